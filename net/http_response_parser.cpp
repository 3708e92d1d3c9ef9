#include <algorithm>
#include <charconv>

#include "net/http_client.hpp"
#include "net/http_syntax.hpp"

// HttpResponseParser: declared in http_client.hpp, kept apart from any I/O.

namespace garm_edge::net {
namespace {

using http_syntax::equals_ignoring_case;
using http_syntax::is_field_value;
using http_syntax::is_token;
using http_syntax::lower;
using http_syntax::parse_decimal;
using http_syntax::trim;

constexpr std::string_view kCrlf = "\r\n";

}  // namespace

HttpResponseParser::Result HttpResponseParser::feed(std::string_view data) {
  while (!data.empty() && state_ != State::done) {
    std::size_t used = 0;
    switch (state_) {
      case State::head:
        used = consume_head(data);
        break;
      case State::body_with_length:
        used = consume_body_with_length(data);
        break;
      case State::body_until_close:
        used = consume_body_until_close(data);
        break;
      case State::chunk_size:
        used = consume_chunk_size(data);
        break;
      case State::chunk_data:
        used = consume_chunk_data(data);
        break;
      case State::chunk_data_end:
        used = consume_chunk_data_end(data);
        break;
      case State::trailers:
        used = consume_trailers(data);
        break;
      case State::done:
        break;
    }
    data.remove_prefix(used);
  }
  return state_ == State::done ? Result::complete : Result::incomplete;
}

void HttpResponseParser::finish() {
  switch (state_) {
    case State::done:
      return;
    case State::body_until_close:
      state_ = State::done;
      return;
    case State::head:
      throw HttpClientError(pending_.empty() && response_.status == 0
                                ? "the connection closed without an answer"
                                : "the connection closed in the middle of the response head");
    case State::body_with_length:
      throw HttpClientError("the connection closed before the body reached its Content-Length");
    default:
      throw HttpClientError("the connection closed in the middle of a chunked body");
  }
}

ClientResponse HttpResponseParser::take() {
  if (state_ != State::done) {
    throw HttpClientError("the response is not complete");
  }
  return std::move(response_);
}

std::size_t HttpResponseParser::consume_head(std::string_view data) {
  // The terminator may straddle two reads: look from just before the new bytes.
  const std::size_t search_from = pending_.size() >= 3 ? pending_.size() - 3 : 0;
  pending_.append(data);
  const auto end = pending_.find("\r\n\r\n", search_from);
  if (end == std::string::npos) {
    if (pending_.size() > kMaxHeadBytes) {
      throw HttpClientError("the response head is larger than " + std::to_string(kMaxHeadBytes) +
                            " bytes");
    }
    return data.size();
  }
  const std::size_t head_size = end + 4;
  if (head_size > kMaxHeadBytes) {
    throw HttpClientError("the response head is larger than " + std::to_string(kMaxHeadBytes) +
                          " bytes");
  }
  const std::size_t used = data.size() - (pending_.size() - head_size);
  pending_.resize(end);
  parse_head(pending_);
  pending_.clear();
  return used;
}

void HttpResponseParser::parse_head(std::string_view head) {
  response_ = {};
  const auto line_end = std::min(head.find(kCrlf), head.size());
  const auto status_line = head.substr(0, line_end);
  // "HTTP/1.x 200 reason" or "HTTP/1.x 200": HTTP/2 and later never look like this.
  if (status_line.size() < 12 || !status_line.starts_with("HTTP/1.") ||
      (status_line[7] != '0' && status_line[7] != '1') || status_line[8] != ' ' ||
      (status_line.size() > 12 && status_line[12] != ' ') ||
      !is_field_value(status_line.substr(12))) {
    throw HttpClientError("the status line is not HTTP/1.0 or HTTP/1.1");
  }
  const auto status = parse_decimal(status_line.substr(9, 3), 3);
  if (!status || *status < 100) {
    throw HttpClientError("the status code is not three digits");
  }
  response_.status = static_cast<int>(*status);
  auto rest = head.substr(std::min(line_end + 2, head.size()));
  while (!rest.empty()) {
    const auto end = std::min(rest.find(kCrlf), rest.size());
    const auto line = rest.substr(0, end);
    rest.remove_prefix(std::min(end + 2, rest.size()));
    if (line.starts_with(' ') || line.starts_with('\t')) {
      throw HttpClientError("obsolete header line folding");
    }
    const auto colon = line.find(':');
    const auto name = line.substr(0, colon);
    if (colon == std::string_view::npos || !is_token(name)) {
      throw HttpClientError("a header line is not \"name: value\"");
    }
    const auto value = trim(line.substr(colon + 1));
    if (!is_field_value(value)) {
      throw HttpClientError("the value of header " + std::string(name) +
                            " holds control characters");
    }
    if (response_.headers.size() == kMaxHeaders) {
      throw HttpClientError("more than " + std::to_string(kMaxHeaders) + " headers");
    }
    response_.headers.emplace_back(lower(name), value);
  }
  choose_framing();
}

void HttpResponseParser::choose_framing() {
  const int status = response_.status;
  if (status == 101 && switching_allowed_) {
    state_ = State::done;
    return;
  }
  if (status == 101) {
    throw HttpClientError("the server switched protocols, which was never asked for");
  }
  if (status < 200) {
    state_ =
        State::head;  // an interim answer (100 Continue, 103 Early Hints): the real one follows
    return;
  }
  if (head_handler_) {
    if (auto sink = head_handler_(response_)) {
      body_sink_ = std::move(sink);
    }
  }
  std::optional<std::uint64_t> length;
  bool chunked = false;
  for (const auto& [name, value] : response_.headers) {
    if (name == "transfer-encoding") {
      // Only "chunked": no Accept-Encoding is sent, so no other coding has a reason to appear.
      if (chunked || !equals_ignoring_case(value, "chunked")) {
        throw HttpClientError("a transfer coding other than a single chunked");
      }
      chunked = true;
    } else if (name == "content-length") {
      const auto parsed = parse_decimal(value, 18);
      if (!parsed || (length && *length != *parsed)) {
        throw HttpClientError("Content-Length is not one decimal number");
      }
      length = parsed;
    }
  }
  if (chunked && length) {
    // Either could be a smuggling attempt: refuse rather than pick one.
    throw HttpClientError("both Transfer-Encoding and Content-Length");
  }
  if (response_to_head_ || status == 204 || status == 304) {
    state_ = State::done;
  } else if (chunked) {
    state_ = State::chunk_size;
  } else if (length) {
    if (*length > max_body_bytes_) {
      throw HttpClientError("the body is larger than " + std::to_string(max_body_bytes_) +
                            " bytes");
    }
    remaining_ = *length;
    state_ = remaining_ == 0 ? State::done : State::body_with_length;
  } else {
    state_ = State::body_until_close;
  }
}

void HttpResponseParser::append_body(std::string_view data) {
  if (data.size() > max_body_bytes_ - body_bytes_) {
    throw HttpClientError("the body is larger than " + std::to_string(max_body_bytes_) + " bytes");
  }
  body_bytes_ += data.size();
  if (body_sink_) {
    body_sink_(response_.status, data);
  } else {
    response_.body.append(data);
  }
}

std::size_t HttpResponseParser::consume_body_with_length(std::string_view data) {
  const auto used = static_cast<std::size_t>(std::min<std::uint64_t>(remaining_, data.size()));
  append_body(data.substr(0, used));
  remaining_ -= used;
  if (remaining_ == 0) {
    state_ = State::done;
  }
  return used;
}

std::size_t HttpResponseParser::consume_body_until_close(std::string_view data) {
  append_body(data);
  return data.size();
}

bool HttpResponseParser::take_line(std::string_view data, std::size_t& consumed, std::size_t limit,
                                   const char* what) {
  const std::size_t search_from = pending_.empty() ? 0 : pending_.size() - 1;
  const std::size_t before = pending_.size();
  // Never buffer more than the limit allows, whatever the size of `data`.
  pending_.append(data.substr(0, limit + 2 - std::min(limit + 2, pending_.size())));
  const auto end = pending_.find(kCrlf, search_from);
  if (end == std::string::npos) {
    // A CR at the end may be the first half of the line's CRLF.
    if (pending_.size() - (pending_.ends_with('\r') ? 1 : 0) > limit) {
      throw HttpClientError(std::string(what) + " is longer than " + std::to_string(limit) +
                            " bytes");
    }
    consumed = pending_.size() - before;
    return false;
  }
  consumed = end + 2 - before;
  pending_.resize(end);
  return true;
}

std::size_t HttpResponseParser::consume_chunk_size(std::string_view data) {
  std::size_t used = 0;
  if (!take_line(data, used, kMaxChunkLineBytes, "a chunk-size line")) {
    return used;
  }
  const std::string_view line = pending_;
  const auto digits_end = std::min(line.find_first_not_of("0123456789abcdefABCDEF"), line.size());
  const auto extension = line.substr(digits_end);
  std::uint64_t size = 0;
  const auto [end, error] = std::from_chars(line.data(), line.data() + digits_end, size, 16);
  // After the size only BWS and ";extension" may follow; extensions mean nothing to us.
  const auto after_size = trim(extension);
  if (digits_end == 0 || digits_end > 15 || error != std::errc() ||
      (!after_size.empty() && !after_size.starts_with(';')) || !is_field_value(extension)) {
    throw HttpClientError("a chunk-size line is malformed");
  }
  if (size > max_body_bytes_ - body_bytes_) {
    throw HttpClientError("the body is larger than " + std::to_string(max_body_bytes_) + " bytes");
  }
  pending_.clear();
  remaining_ = size;
  state_ = size == 0 ? State::trailers : State::chunk_data;
  return used;
}

std::size_t HttpResponseParser::consume_chunk_data(std::string_view data) {
  const auto used = static_cast<std::size_t>(std::min<std::uint64_t>(remaining_, data.size()));
  append_body(data.substr(0, used));
  remaining_ -= used;
  if (remaining_ == 0) {
    state_ = State::chunk_data_end;
  }
  return used;
}

std::size_t HttpResponseParser::consume_chunk_data_end(std::string_view data) {
  // pending_ holds the part of the CRLF after the chunk's data seen so far.
  std::size_t used = 0;
  while (used < data.size() && pending_.size() < kCrlf.size()) {
    pending_ += data[used++];
  }
  if (!kCrlf.starts_with(pending_)) {
    throw HttpClientError("a chunk's data does not end where its size says");
  }
  if (pending_.size() == kCrlf.size()) {
    pending_.clear();
    state_ = State::chunk_size;
  }
  return used;
}

std::size_t HttpResponseParser::consume_trailers(std::string_view data) {
  std::size_t used = 0;
  if (!take_line(data, used, kMaxHeadBytes, "a trailer line")) {
    return used;
  }
  trailer_bytes_ += pending_.size() + 2;
  if (trailer_bytes_ > kMaxHeadBytes) {
    throw HttpClientError("the trailers are larger than " + std::to_string(kMaxHeadBytes) +
                          " bytes");
  }
  // Trailers are read past and dropped: nothing garm sends needs them.
  const bool last = pending_.empty();
  if (!last && (pending_.find(':') == std::string::npos || !is_field_value(pending_))) {
    throw HttpClientError("a trailer line is not \"name: value\"");
  }
  pending_.clear();
  if (last) {
    state_ = State::done;
  }
  return used;
}

ClientResponse parse_http_response(std::string_view raw, std::size_t max_body_bytes,
                                   bool response_to_head) {
  HttpResponseParser parser(max_body_bytes, response_to_head);
  if (parser.feed(raw) == HttpResponseParser::Result::incomplete) {
    parser.finish();
  }
  return parser.take();
}

}  // namespace garm_edge::net
