#pragma once

#include <cstddef>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace garm_edge::hub {

/// Many sources' /metrics as one exposition (the hub's scrape of its agents): every sample of a
/// source gets `label="source"` first, and the families are grouped, one HELP and TYPE each, as
/// the format requires. The input is a stranger's, so nothing in it can break the whole or take
/// from another source: a line that is not exposition text is dropped, as is a sample that
/// carries the label itself (no source can pass for another) or a reserved one (`__name__`), a
/// family the merger's own samples hold, and every sample of a source that types a family
/// otherwise than the merge keeps it. The type kept is the known one (from the code that writes
/// the family), else the one most sources give with samples under it: a TYPE line alone claims
/// nothing, and the order sources are added in decides nothing.
class PrometheusMerge {
 public:
  using Types = std::map<std::string, std::string, std::less<>>;

  /// `reserved`: family names (or their prefixes) only the merger's own text may hold;
  /// `known_types`: each known family's type, whatever a source declares.
  explicit PrometheusMerge(std::string label, std::vector<std::string> reserved = {},
                           Types known_types = {})
      : label_(std::move(label)),
        reserved_(std::move(reserved)),
        known_types_(std::move(known_types)) {}

  /// Adds the unlabelled text of whoever merges (its families are closed to the sources).
  void add_own(std::string_view text);
  /// Adds `source`'s text (once per source).
  void add(std::string_view source, std::string_view text);
  /// How many lines of each source were dropped: malformed ones, and its samples of families it
  /// typed otherwise than the merge keeps them.
  std::map<std::string, std::size_t, std::less<>> dropped() const;
  std::string str() const;

 private:
  /// One source's part of a family: its TYPE, its HELP and its samples, labelled already.
  struct Part {
    std::string type;  // "" until the source gives a TYPE line
    std::string help;
    std::string samples;
    std::size_t count = 0;
  };
  /// A family's parts by source ("" for the merger's own).
  using Family = std::map<std::string, Part, std::less<>>;

  void add_text(const std::string& source, std::string_view text);
  /// `#` lines: HELP and TYPE set the current family; returns false for a malformed one.
  bool read_comment(std::string_view line, const std::string& source, std::string& current);
  /// The family one of `source`'s samples belongs to ("" for none): the current TYPE's, or its
  /// own name's, as that source typed them.
  std::string family_of(std::string_view sample_name, const std::string& current,
                        const std::string& source) const;
  /// The type the merge keeps for a family ("" when no source gives it samples).
  std::string kept_type(const std::string& name, const Family& family) const;
  /// Whether `name` is X_bucket, X_sum or X_count of a histogram or summary X in the output: the
  /// exposition format's parser takes such a family for a second TYPE of X.
  bool shadowed(const std::string& name) const;
  /// Whether `part` of `source` is in the output of a family of type `kept`.
  static bool kept(const std::string& source, const Part& part, const Family& family,
                   const std::string& kept_type);

  std::string label_;
  std::vector<std::string> reserved_;
  Types known_types_;
  std::map<std::string, Family, std::less<>> families_;
  std::map<std::string, std::size_t, std::less<>> malformed_;  // by source
};

/// Whether `line` is one sample line of the text format (name, optional labels, value,
/// optional timestamp); sets where its name and label set end.
bool parse_sample_line(std::string_view line, std::string_view& name, std::string_view& labels,
                       std::string_view& rest);

}  // namespace garm_edge::hub
