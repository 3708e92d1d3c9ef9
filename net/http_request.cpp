#include "net/http_request.hpp"

#include <algorithm>
#include <charconv>

#include "net/http_syntax.hpp"

namespace garm_edge::net {
namespace {

using http_syntax::is_field_char;
using http_syntax::is_target_char;
using http_syntax::is_token_char;
using http_syntax::lower;
using http_syntax::trim;

constexpr std::string_view kEndOfHead = "\r\n\r\n";
constexpr std::size_t kMaxMethod = 16;

bool contains_token(std::string_view list, std::string_view token) {
  std::size_t start = 0;
  while (start <= list.size()) {
    const auto comma = list.find(',', start);
    const auto item = trim(list.substr(
        start, comma == std::string_view::npos ? std::string_view::npos : comma - start));
    if (lower(item) == token) {
      return true;
    }
    if (comma == std::string_view::npos) {
      break;
    }
    start = comma + 1;
  }
  return false;
}

}  // namespace

std::optional<std::string_view> HttpRequest::header(std::string_view lower_case_name) const {
  for (const auto& [name, value] : headers) {
    if (name == lower_case_name) {
      return value;
    }
  }
  return std::nullopt;
}

std::optional<std::string_view> raw_query_value(const HttpRequest& request, std::string_view name) {
  std::string_view query = request.query;
  while (!query.empty()) {
    const auto amp = query.find('&');
    const auto pair = query.substr(0, amp);
    if (pair.size() > name.size() && pair.starts_with(name) && pair[name.size()] == '=') {
      return pair.substr(name.size() + 1);
    }
    if (amp == std::string_view::npos) {
      break;
    }
    query.remove_prefix(amp + 1);
  }
  return std::nullopt;
}

HttpRequestParser::Result HttpRequestParser::fail(int status, std::string reason) {
  error_status_ = status;
  error_reason_ = std::move(reason);
  return Result::error;
}

namespace {

/// Every line of the head ends in CRLF; a lone CR or LF is how request smuggling starts.
bool has_only_crlf_line_ends(std::string_view head, std::size_t from = 0) {
  for (std::size_t i = from; i < head.size(); ++i) {
    if (head[i] == '\r' && (i + 1 == head.size() || head[i + 1] != '\n')) {
      return false;
    }
    if (head[i] == '\n' && (i == 0 || head[i - 1] != '\r')) {
      return false;
    }
  }
  return true;
}

}  // namespace

HttpRequestParser::Result HttpRequestParser::feed(std::string_view data, std::size_t& consumed) {
  consumed = 0;
  if (error_status_ != 0) {
    return Result::error;
  }
  if (!head_done_) {
    // Keep at most one byte past the limit, and search for the end of the head only in what
    // is new (with three bytes of overlap), so trickled input costs linear time.
    const std::size_t cap = limits_.max_header_bytes + kEndOfHead.size();
    const std::size_t search_from = head_.size() >= 3 ? head_.size() - 3 : 0;
    const std::size_t take = std::min(data.size(), cap - head_.size());
    head_.append(data.substr(0, take));
    const auto end = head_.find(kEndOfHead, search_from);
    if (end == std::string::npos) {
      consumed = take;
      std::string_view pending(head_);
      if (!pending.empty() && pending.back() == '\r') {
        pending.remove_suffix(1);  // its LF may be in the next read
      }
      if (!has_only_crlf_line_ends(pending, search_from)) {
        return fail(400, "bare CR or LF in the request head");
      }
      return head_.size() >= cap ? fail(431, "request head too large") : Result::incomplete;
    }
    const std::size_t head_length = end + kEndOfHead.size();
    consumed = take - (head_.size() - head_length);
    head_.resize(head_length);
    head_done_ = true;
    if (parse_head() == Result::error) {
      return Result::error;
    }
    data.remove_prefix(consumed);
  }
  const std::size_t take = std::min(body_expected_ - request_.body.size(), data.size());
  request_.body.append(data.substr(0, take));
  consumed += take;
  return request_.body.size() == body_expected_ ? Result::complete : Result::incomplete;
}

HttpRequestParser::Result HttpRequestParser::parse_head() {
  std::string_view head(head_);
  if (!has_only_crlf_line_ends(head)) {
    return fail(400, "bare CR or LF in the request head");
  }
  head.remove_suffix(2);  // the blank line's CRLF; every line below ends in CRLF
  const auto line_end = head.find("\r\n");
  const auto request_line = head.substr(0, line_end);
  const auto first_space = request_line.find(' ');
  const auto second_space =
      first_space == std::string_view::npos ? first_space : request_line.find(' ', first_space + 1);
  if (second_space == std::string_view::npos) {
    return fail(400, "malformed request line");
  }
  const auto method = request_line.substr(0, first_space);
  const auto target = request_line.substr(first_space + 1, second_space - first_space - 1);
  const auto version = request_line.substr(second_space + 1);
  if (method.empty() || method.size() > kMaxMethod ||
      !std::all_of(method.begin(), method.end(), [](char c) { return c >= 'A' && c <= 'Z'; })) {
    return fail(400, "malformed method");
  }
  if (target.empty() || target.front() != '/' ||
      !std::all_of(target.begin(), target.end(), is_target_char)) {
    return fail(400, "malformed request target");
  }
  if (version == "HTTP/1.1") {
    request_.minor_version = 1;
  } else if (version == "HTTP/1.0") {
    request_.minor_version = 0;
  } else if (version.substr(0, 5) == "HTTP/") {
    return fail(505, "HTTP version not supported");
  } else {
    return fail(400, "malformed HTTP version");
  }
  request_.method = std::string(method);
  request_.target = std::string(target);
  const auto question = target.find('?');
  request_.path = std::string(target.substr(0, question));
  request_.query =
      question == std::string_view::npos ? "" : std::string(target.substr(question + 1));

  std::string_view rest = line_end == std::string_view::npos ? "" : head.substr(line_end + 2);
  while (!rest.empty()) {
    const auto end = rest.find("\r\n");
    const auto line = rest.substr(0, end);
    rest = end == std::string_view::npos ? "" : rest.substr(end + 2);
    if (line.empty() || line.front() == ' ' || line.front() == '\t') {
      return fail(400, "obsolete header line folding");
    }
    const auto colon = line.find(':');
    if (colon == std::string_view::npos || colon == 0 ||
        !std::all_of(line.begin(), line.begin() + static_cast<std::ptrdiff_t>(colon),
                     is_token_char)) {
      return fail(400, "malformed header field name");
    }
    const auto value = line.substr(colon + 1);
    if (!std::all_of(value.begin(), value.end(), is_field_char)) {
      return fail(400, "malformed header field value");
    }
    if (request_.headers.size() == limits_.max_headers) {
      return fail(431, "too many header fields");
    }
    request_.headers.emplace_back(lower(line.substr(0, colon)), std::string(trim(value)));
  }

  if (request_.header("transfer-encoding")) {
    return fail(501, "Transfer-Encoding is not supported; send Content-Length");
  }
  std::optional<std::string_view> length;
  for (const auto& [name, value] : request_.headers) {
    if (name == "content-length") {
      // Even equal duplicates: a proxy in front may frame the message by another rule.
      if (length) {
        return fail(400, "more than one Content-Length field");
      }
      length = value;
    }
  }
  if (length) {
    std::size_t parsed = 0;
    const auto* first = length->data();
    const auto* last = length->data() + length->size();
    const auto [ptr, ec] = std::from_chars(first, last, parsed);
    if (length->empty() || ec != std::errc() || ptr != last) {
      return fail(400, "malformed Content-Length");
    }
    if (parsed > limits_.max_body_bytes) {
      return fail(413, "request body too large");
    }
    body_expected_ = parsed;
  }
  if (request_.minor_version == 1 && !request_.header("host")) {
    return fail(400, "missing Host header");
  }
  const auto connection = request_.header("connection").value_or("");
  request_.keep_alive = request_.minor_version == 1 ? !contains_token(connection, "close")
                                                    : contains_token(connection, "keep-alive");
  return Result::incomplete;
}

HttpRequest HttpRequestParser::take() {
  HttpRequest request = std::move(request_);
  request_ = HttpRequest{};
  head_.clear();
  head_done_ = false;
  body_expected_ = 0;
  return request;
}

}  // namespace garm_edge::net
