#include "hub/prometheus_merge.hpp"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdint>
#include <cstdlib>
#include <optional>
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

/// A timestamp: milliseconds since the epoch, no sign (Prometheus refuses the scrape of a
/// negative one).
bool is_timestamp(std::string_view text) {
  if (text.empty() || text.front() < '0' || text.front() > '9') {
    return false;
  }
  std::int64_t value = 0;
  const auto* end = text.data() + text.size();
  const auto parsed = std::from_chars(text.data(), end, value);
  return parsed.ec == std::errc() && parsed.ptr == end;
}

/// Reads `{name="value",...}` from the front of `text`; returns its length, 0 when malformed.
std::size_t label_set_length(std::string_view text, std::string_view forbidden,
                             bool& has_forbidden) {
  // Names with "__" are Prometheus's own: `__name__` beside the metric's name is refused.
  std::size_t at = 1;                   // past '{'
  std::vector<std::string_view> names;  // a name twice makes Prometheus refuse the whole scrape
  while (at < text.size() && text[at] != '}') {
    const auto length = name_length(text.substr(at), false);
    const auto name = text.substr(at, length);
    if (length == 0 || name.starts_with("__") ||
        std::find(names.begin(), names.end(), name) != names.end() || names.size() >= 64) {
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
  return timestamp.empty() || is_timestamp(timestamp);
}

/// " value" or " value timestamp": the sample's rest (valid already) as both of Prometheus's
/// parsers read it (the exposition format's parser takes a trailing space for a missing
/// timestamp).
std::string canonical_rest(std::string_view rest) {
  const auto trim = [](std::string_view text) {
    while (!text.empty() && text.front() == ' ') {
      text.remove_prefix(1);
    }
    return text;
  };
  rest = trim(rest);
  const auto space = std::min(rest.find(' '), rest.size());
  const auto timestamp = trim(rest.substr(space));
  return " " + std::string(rest.substr(0, space)) +
         (timestamp.empty() ? "" : " " + std::string(timestamp));
}

/// The raw value of `label` in a label set (without braces, valid already).
std::optional<std::string_view> label_value(std::string_view labels, std::string_view label) {
  std::size_t at = 0;
  while (at < labels.size()) {
    const auto name_end = labels.find('=', at);
    const auto value_start = name_end + 2;  // past ="
    auto value_end = value_start;
    while (value_end < labels.size() && labels[value_end] != '"') {
      value_end += labels[value_end] == '\\' ? std::size_t{2} : std::size_t{1};
    }
    if (labels.substr(at, name_end - at) == label) {
      return labels.substr(value_start, value_end - value_start);
    }
    at = value_end + 2;  // past the quote and the comma
  }
  return std::nullopt;
}

/// A histogram's bucket needs an `le`, a summary's quantile a `quantile`, that both of
/// Prometheus's parsers read as a number; the exposition format's parser reads that label as a
/// number on every sample of the family that has it, and refuses the whole scrape otherwise.
bool has_bound(std::string_view name, std::string_view family, std::string_view type,
               std::string_view labels) {
  const bool histogram = type == "histogram";
  if (!histogram && type != "summary") {
    return true;
  }
  const auto value = label_value(labels, histogram ? "le" : "quantile");
  const bool needed =
      histogram ? name.size() == family.size() + 7 && name.ends_with("_bucket") : name == family;
  return value ? is_number(*value) : !needed;
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

/// A HELP text as the format allows it (escapes `\\` and `\n` only), cut to kMaxHelpBytes;
/// nothing when it is not one.
std::optional<std::string> help_text(std::string_view text) {
  if (!is_plain_text(text)) {
    return std::nullopt;
  }
  std::string help;
  for (std::size_t at = 0; at < text.size(); ++at) {
    std::size_t length = 1;
    if (text[at] == '\\') {
      if (at + 1 >= text.size() || (text[at + 1] != '\\' && text[at + 1] != 'n')) {
        return std::nullopt;
      }
      length = 2;
    }
    if (help.size() + length > kMaxHelpBytes) {
      break;
    }
    help.append(text.substr(at, length));
    at += length - 1;
  }
  while (!help.empty() && !is_plain_text(help)) {
    help.pop_back();  // cut inside a character
  }
  return help;
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

void PrometheusMerge::add(std::string_view source, std::string_view text) {
  add_text(std::string(source), text);
}

void PrometheusMerge::add_text(const std::string& source, std::string_view text) {
  const bool own = source.empty();
  auto& malformed = malformed_[source];
  std::size_t samples = 0;
  std::string current;
  while (!text.empty()) {
    const auto line = next_line(text);
    if (line.empty()) {
      continue;
    }
    if (line.front() == '#') {
      if (!read_comment(line, source, current)) {
        ++malformed;
      }
      continue;
    }
    std::string_view name;
    std::string_view labels;
    std::string_view rest;
    if (!parse_sample_line(line, name, labels, rest) || (!own && has_label(labels, label_)) ||
        (!own && ++samples > kMaxSamplesPerSource)) {
      ++malformed;
      continue;
    }
    // A source's sample counts only under a TYPE it gave itself.
    const auto family_name = family_of(name, current, source);
    if (family_name.empty()) {
      ++malformed;
      continue;
    }
    auto& part = families_.find(family_name)->second.find(source)->second;
    if (!has_bound(name, family_name, part.type, labels)) {
      ++malformed;
      continue;
    }
    ++part.count;
    auto& out = part.samples;
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
    out.append(canonical_rest(rest)).append("\n");
  }
}

bool PrometheusMerge::read_comment(std::string_view line, const std::string& source,
                                   std::string& current) {
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
  auto& part = families_[name][source];
  current = name;
  if (help) {
    const auto text = help_text(rest);
    if (!text) {
      return false;
    }
    if (part.help.empty()) {
      part.help = *text;
    }
  } else if (part.type.empty()) {
    part.type = std::string(rest);
  } else if (part.type != rest) {
    return false;  // a second TYPE of the same family: the first stays
  }
  return true;
}

std::string PrometheusMerge::family_of(std::string_view sample_name, const std::string& current,
                                       const std::string& source) const {
  const auto type_of = [&](std::string_view family) -> const std::string* {
    const auto found = families_.find(family);
    if (found == families_.end()) {
      return nullptr;
    }
    const auto part = found->second.find(source);
    return part == found->second.end() || part->second.type.empty() ? nullptr : &part->second.type;
  };
  if (!current.empty() && sample_name.starts_with(current)) {
    const auto suffix = sample_name.substr(current.size());
    const auto* type = type_of(current);
    const bool grouped = type != nullptr && (*type == "histogram" || *type == "summary");
    if (type != nullptr &&
        (suffix.empty() ||
         (grouped && (suffix == "_bucket" || suffix == "_sum" || suffix == "_count")))) {
      return current;
    }
  }
  // A sample outside its TYPE's group: the family of its own name, when the source typed one.
  return type_of(sample_name) != nullptr ? std::string(sample_name) : std::string();
}

std::string PrometheusMerge::kept_type(const std::string& name, const Family& family) const {
  if (const auto own = family.find(std::string()); own != family.end()) {
    return own->second.type;
  }
  if (const auto known = known_types_.find(name); known != known_types_.end()) {
    return known->second;
  }
  std::map<std::string, std::size_t> votes;  // sources with samples, by the type they gave
  for (const auto& [source, part] : family) {
    if (part.count > 0) {
      ++votes[part.type];
    }
  }
  const auto most = std::max_element(votes.begin(), votes.end(), [](const auto& a, const auto& b) {
    return a.second < b.second;  // the first of equals: the same whatever the sources' order
  });
  return most == votes.end() ? std::string() : most->first;
}

bool PrometheusMerge::kept(const std::string& source, const Part& part, const Family& family,
                           const std::string& kept_type) {
  const bool own_family = family.contains(std::string());
  return part.count > 0 && part.type == kept_type && (source.empty() || !own_family);
}

bool PrometheusMerge::shadowed(const std::string& name) const {
  for (const std::string_view suffix : {"_bucket", "_sum", "_count"}) {
    if (name.size() <= suffix.size() || !name.ends_with(suffix)) {
      continue;
    }
    const auto base = families_.find(std::string_view(name).substr(0, name.size() - suffix.size()));
    if (base == families_.end()) {
      continue;
    }
    const auto type = kept_type(base->first, base->second);
    if ((type == "histogram" || type == "summary") &&
        std::any_of(base->second.begin(), base->second.end(), [&](const auto& part) {
          return kept(part.first, part.second, base->second, type);
        })) {
      return true;
    }
  }
  return false;
}

std::map<std::string, std::size_t, std::less<>> PrometheusMerge::dropped() const {
  std::map<std::string, std::size_t, std::less<>> dropped;
  for (const auto& [source, count] : malformed_) {
    if (!source.empty()) {
      dropped[source] = count;
    }
  }
  for (const auto& [name, family] : families_) {
    const auto type = kept_type(name, family);
    const bool lost = shadowed(name);
    for (const auto& [source, part] : family) {
      if (!source.empty() && (lost || !kept(source, part, family, type))) {
        dropped[source] += part.count;
      }
    }
  }
  return dropped;
}

std::string PrometheusMerge::str() const {
  std::string out;
  for (const auto& [name, family] : families_) {
    if (shadowed(name)) {
      continue;  // its samples' names belong to a histogram's or summary's group
    }
    const auto type = kept_type(name, family);
    std::string help;
    std::string samples;
    for (const auto& [source, part] : family) {
      if (kept(source, part, family, type)) {
        samples.append(part.samples);
        if (help.empty()) {
          help = part.help;
        }
      }
    }
    if (samples.empty()) {
      continue;
    }
    if (!help.empty()) {
      out.append("# HELP ").append(name).append(" ").append(help).append("\n");
    }
    out.append("# TYPE ").append(name).append(" ").append(type).append("\n");
    out.append(samples);
  }
  return out;
}

}  // namespace garm_edge::hub
