#pragma once

// The command lines of garm-edge-agent and garm-edge-hub: COMMAND [--name value]...

#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace garm_edge {

/// The command line itself is wrong: exit 2 with the usage, as getopt-style tools do.
class UsageError : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

/// `--name value` pairs after the command; unknown options are an error.
class Options {
 public:
  Options(int argc, char** argv, std::vector<std::string_view> known, int first = 2) {
    for (int i = first; i < argc; ++i) {
      const std::string_view arg = argv[i];
      bool matched = false;
      for (const auto name : known) {
        if (arg == name && i + 1 < argc) {
          values_.emplace_back(name, argv[++i]);
          matched = true;
        }
      }
      if (!matched) {
        throw UsageError("unexpected argument \"" + std::string(arg) + "\"");
      }
    }
  }

  std::optional<std::string> get(std::string_view name) const {
    for (const auto& [key, value] : values_) {
      if (key == name) {
        return value;
      }
    }
    return std::nullopt;
  }

  std::vector<std::string> get_all(std::string_view name) const {
    std::vector<std::string> all;
    for (const auto& [key, value] : values_) {
      if (key == name) {
        all.push_back(value);
      }
    }
    return all;
  }

  std::string require(std::string_view name) const {
    auto value = get(name);
    if (!value) {
      throw UsageError(std::string(name) + " is required");
    }
    return *value;
  }

 private:
  std::vector<std::pair<std::string_view, std::string>> values_;
};

}  // namespace garm_edge
