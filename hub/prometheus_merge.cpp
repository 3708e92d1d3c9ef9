#include "hub/prometheus_merge.hpp"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "common/text.hpp"

namespace garm_edge::hub {
namespace {

constexpr std::size_t kMaxHelpBytes = 1024;
/// A source's samples beyond this are dropped: a short line grows by the label the merge adds.
constexpr std::size_t kMaxSamplesPerSource = 100000;

bool is_name_start(char c, bool metric) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || (metric && c == ':');
}

bool is_name_char(char c, bool metric) {
  return is_name_start(c, metric) || (c >= '0' && c <= '9');
}

/// The length of the name at the front of `text` (0 when there is none).
std::size_t name_length(std::string_view text, bool metric) {
  if (text.empty() || !is_name_start(text.front(), metric)) {
    return 0;
  }
  std::size_t length = 1;
  while (length < text.size() && is_name_char(text[length], metric)) {
    ++length;
  }
  return length;
}

bool is_number(std::string_view text) {
  if (text == "+Inf" || text == "-Inf" || text == "Inf" || text == "NaN") {
    return true;
  }
  if (text.empty() || text.size() > 64 ||
      text.find_first_not_of("0123456789.eE+-") != std::string_view::npos) {
    return false;
  }
  const std::string copy(text);
  char* end = nullptr;
  errno = 0;
  const double value = std::strtod(copy.c_str(), &end);
  // Out of a double's range Prometheus refuses the whole scrape, not the line.
  return end == copy.c_str() + copy.size() && errno != ERANGE && value == value;
}

bool is_integer(std::string_view text) {
  std::int64_t value = 0;
  const auto* end = text.data() + text.size();
  const auto parsed = std::from_chars(text.data(), end, value);
  return !text.empty() && parsed.ec == std::errc() && parsed.ptr == end;
}

/// Reads `{name="value",...}` from the front of `text`; returns its length, 0 when malformed.
std::size_t label_set_length(std::string_view text, std::string_view forbidden,
                             bool& has_forbidden) {
  std::size_t at = 1;                   // past '{'
  std::vector<std::string_view> names;  // a name twice makes Prometheus refuse the whole scrape
  while (at < text.size() && text[at] != '}') {
    const auto length = name_length(text.substr(at), false);
    const auto name = text.substr(at, length);
    if (length == 0 || std::find(names.begin(), names.end(), name) != names.end() ||
        names.size() >= 64) {
      return 0;
    }
    names.push_back(name);
    has_forbidden = has_forbidden || name == forbidden;
    at += length;
    if (at + 1 >= text.size() || text[at] != '=' || text[at + 1] != '"') {
      return 0;
    }
    at += 2;
    const auto value_start = at;
    while (at < text.size() && text[at] != '"') {
      if (text[at] == '\\') {
        if (at + 1 >= text.size() ||
            (text[at + 1] != '\\' && text[at + 1] != '"' && text[at + 1] != 'n')) {
          return 0;
        }
        ++at;
      }
      ++at;
    }
    if (at >= text.size() || !is_plain_text(text.substr(value_start, at - value_start))) {
      return 0;
    }
    ++at;  // the closing quote
    if (at < text.size() && text[at] == ',') {
      ++at;
    } else if (at < text.size() && text[at] != '}') {
      return 0;
    }
  }
  return at < text.size() ? at + 1 : 0;
}

bool valid_rest(std::string_view rest) {
  while (!rest.empty() && rest.front() == ' ') {
    rest.remove_prefix(1);
  }
  const auto space = rest.find(' ');
  if (!is_number(rest.substr(0, space))) {
    return false;
  }
  if (space == std::string_view::npos) {
    return true;
  }
  auto timestamp = rest.substr(space + 1);
  while (!timestamp.empty() && timestamp.front() == ' ') {
    timestamp.remove_prefix(1);
  }
  return timestamp.empty() || is_integer(timestamp);
}

std::string_view next_line(std::string_view& text) {
  const auto end = text.find('\n');
  auto line = text.substr(0, end);
  text.remove_prefix(end == std::string_view::npos ? text.size() : end + 1);
  if (!line.empty() && line.back() == '\r') {
    line.remove_suffix(1);
  }
  return line;
}

bool is_known_type(std::string_view type) {
  return type == "counter" || type == "gauge" || type == "histogram" || type == "summary" ||
         type == "untyped";
}

/// Whether the label set (without its braces, already checked) names `label`.
bool has_label(std::string_view labels, std::string_view label) {
  if (labels.empty()) {
    return false;
  }
  bool found = false;
  return label_set_length("{" + std::string(labels) + "}", label, found) == 0 || found;
}

}  // namespace

bool parse_sample_line(std::string_view line, std::string_view& name, std::string_view& labels,
                       std::string_view& rest) {
  const auto length = name_length(line, true);
  if (length == 0) {
    return false;
  }
  name = line.substr(0, length);
  auto after = line.substr(length);
  labels = {};
  if (!after.empty() && after.front() == '{') {
    bool ignored = false;
    const auto set = label_set_length(after, {}, ignored);
    if (set == 0) {
      return false;
    }
    labels = after.substr(1, set - 2);
    after.remove_prefix(set);
  }
  if (after.empty() || after.front() != ' ') {
    return false;
  }
  rest = after;
  return valid_rest(rest);
}

void PrometheusMerge::add_own(std::string_view text) {
  add_text({}, text);
}

std::size_t PrometheusMerge::add(std::string_view source, std::string_view text) {
  return add_text(source, text);
}

std::size_t PrometheusMerge::add_text(std::string_view source, std::string_view text) {
  const bool own = source.empty();
  std::size_t dropped = 0;
  std::size_t samples = 0;
  std::string current;
  std::map<std::string, std::string> types_seen;  // this source's TYPE lines
  while (!text.empty()) {
    const auto line = next_line(text);
    if (line.empty()) {
      continue;
    }
    if (line.front() == '#') {
      if (!read_comment(line, source, current, types_seen)) {
        ++dropped;
      }
      continue;
    }
    std::string_view name;
    std::string_view labels;
    std::string_view rest;
    if (!parse_sample_line(line, name, labels, rest) || (!own && has_label(labels, label_)) ||
        (!own && ++samples > kMaxSamplesPerSource)) {
      ++dropped;
      continue;
    }
    // A source's sample counts only under a TYPE it gave itself, the one the merge keeps.
    const auto family_name = family_of(name, current);
    const auto declared = types_seen.find(family_name);
    auto* family = family_name.empty() ? nullptr : &families_.find(family_name)->second;
    if (family == nullptr || family->own != own || declared == types_seen.end() ||
        declared->second != family->type) {
      ++dropped;
      continue;
    }
    auto& out = family->samples;
    out.append(name);
    if (!own) {
      out.append("{").append(label_).append("=\"");
      for (const char c : source) {
        if (c == '\\' || c == '"' || c == '\n') {
          out += '\\';
        }
        out += c == '\n' ? 'n' : c;
      }
      out.append("\"");
      if (!labels.empty()) {
        out.append(",").append(labels);
      }
      out.append("}");
    } else if (!labels.empty()) {
      out.append("{").append(labels).append("}");
    }
    out.append(rest).append("\n");
  }
  return dropped;
}

bool PrometheusMerge::read_comment(std::string_view line, std::string_view source,
                                   std::string& current,
                                   std::map<std::string, std::string>& types_seen) {
  const bool help = line.starts_with("# HELP ");
  const bool type = line.starts_with("# TYPE ");
  if (!help && !type) {
    return true;  // a plain comment: not copied
  }
  auto rest = line.substr(7);
  const auto length = name_length(rest, true);
  if (length == 0 || (length < rest.size() && rest[length] != ' ')) {
    return false;
  }
  const std::string name(rest.substr(0, length));
  rest.remove_prefix(std::min(rest.size(), length + 1));
  if (!source.empty() && std::any_of(reserved_.begin(), reserved_.end(), [&](const auto& prefix) {
        return name.starts_with(prefix);
      })) {
    current.clear();
    return false;
  }
  if (type && !is_known_type(rest)) {
    return false;
  }
  auto [found, added] = families_.try_emplace(name);
  auto& family = found->second;
  if (added) {
    order_.push_back(name);
    family.own = source.empty();
  }
  current = name;
  if (help && family.help.empty() && is_plain_text(rest)) {
    family.help = std::string(rest.substr(0, std::min(rest.size(), kMaxHelpBytes)));
    while (!family.help.empty() && !is_plain_text(family.help)) {
      family.help.pop_back();  // cut inside a character
    }
  }
  if (type) {
    types_seen[name] = std::string(rest);
    if (!family.typed) {
      family.type = std::string(rest);
      family.typed = true;
    }
  }
  return true;
}

std::string PrometheusMerge::family_of(std::string_view sample_name,
                                       const std::string& current) const {
  if (!current.empty() && sample_name.starts_with(current)) {
    const auto suffix = sample_name.substr(current.size());
    const auto& type = families_.find(current)->second.type;
    const bool grouped = type == "histogram" || type == "summary";
    if (suffix.empty() ||
        (grouped && (suffix == "_bucket" || suffix == "_sum" || suffix == "_count"))) {
      return current;
    }
  }
  // A sample outside its TYPE's group: the family of its own name, when there is one.
  return families_.contains(sample_name) ? std::string(sample_name) : std::string();
}

std::string PrometheusMerge::str() const {
  std::string out;
  for (const auto& name : order_) {
    const auto& family = families_.find(name)->second;
    if (family.samples.empty()) {
      continue;
    }
    out.append("# HELP ").append(name).append(" ").append(family.help).append("\n");
    out.append("# TYPE ").append(name).append(" ").append(family.type).append("\n");
    out.append(family.samples);
  }
  return out;
}

}  // namespace garm_edge::hub
