#include "wire/relay_framing.hpp"

#include <charconv>

namespace garm_edge::wire {
namespace {

/// The next space- or newline-ended field of `text` from `at`, moving `at` past its end.
std::optional<std::string_view> field(std::string_view text, std::size_t& at, char end) {
  const auto stop = text.find(end, at);
  if (stop == std::string_view::npos || stop == at) {
    return std::nullopt;
  }
  const auto value = text.substr(at, stop - at);
  at = stop + 1;
  return value;
}

template <class Number>
std::optional<Number> number(std::optional<std::string_view> text) {
  Number value{};
  if (!text) {
    return std::nullopt;
  }
  const auto [end, error] = std::from_chars(text->data(), text->data() + text->size(), value);
  return error == std::errc() && end == text->data() + text->size() ? std::optional(value)
                                                                    : std::nullopt;
}

}  // namespace

std::optional<std::vector<RelayedAnswer>> parse_relay_framing(std::string_view framed) {
  std::size_t at = 0;
  if (field(framed, at, '\n') != kRelayFraming) {
    return std::nullopt;
  }
  std::vector<RelayedAnswer> answers;
  while (at < framed.size()) {
    RelayedAnswer answer;
    const auto agent = field(framed, at, ' ');
    const auto status = number<int>(field(framed, at, ' '));
    const auto sent = field(framed, at, ' ');
    const auto length = number<std::size_t>(field(framed, at, '\n'));
    if (!agent || !status || !sent || (*sent != "0" && *sent != "1") || !length ||
        *length > framed.size() - at) {
      return std::nullopt;
    }
    answer.agent = std::string(*agent);
    answer.status = *status;
    answer.sent = *sent == "1";
    answer.body = std::string(framed.substr(at, *length));
    at += *length;
    answers.push_back(std::move(answer));
  }
  return answers;
}

}  // namespace garm_edge::wire
