#pragma once

#include <cstddef>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace garm_edge::hub {

/// Many sources' /metrics as one exposition (the hub's scrape of its agents): every sample of a
/// source gets `label="source"` first, and the families are grouped, one HELP and TYPE each, as
/// the format requires. The input is a stranger's, so nothing in it can break the whole: a line
/// that is not exposition text is dropped, as is a sample that carries the label itself (no
/// source can pass for another), one of a family whose TYPE another source gave differently,
/// and one of a family the merger's own samples (added without a source) hold.
class PrometheusMerge {
 public:
  /// `reserved`: family names (or their prefixes) only the merger's own text may hold.
  explicit PrometheusMerge(std::string label, std::vector<std::string> reserved = {})
      : label_(std::move(label)), reserved_(std::move(reserved)) {}

  /// Adds the unlabelled text of whoever merges (its families are closed to the sources).
  void add_own(std::string_view text);
  /// Adds `source`'s text; returns how many of its lines were dropped.
  std::size_t add(std::string_view source, std::string_view text);
  std::string str() const;

 private:
  struct Family {
    std::string type = "untyped";
    std::string help;
    bool typed = false;
    bool own = false;
    std::string samples;
  };
  std::size_t add_text(std::string_view source, std::string_view text);
  /// `#` lines: HELP and TYPE set the current family; returns false for a malformed one.
  bool read_comment(std::string_view line, std::string_view source, std::string& current,
                    std::map<std::string, std::string>& types_seen);
  /// The family a sample belongs to ("" for none): the current TYPE's, or its own name's.
  std::string family_of(std::string_view sample_name, const std::string& current) const;

  std::string label_;
  std::vector<std::string> reserved_;
  std::vector<std::string> order_;
  std::map<std::string, Family, std::less<>> families_;
};

/// Whether `line` is one sample line of the text format (name, optional labels, value,
/// optional timestamp); sets where its name and label set end.
bool parse_sample_line(std::string_view line, std::string_view& name, std::string_view& labels,
                       std::string_view& rest);

}  // namespace garm_edge::hub
