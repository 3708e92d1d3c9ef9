#pragma once

#include <filesystem>
#include <string_view>

namespace garm_edge {

/// A new private (0700) directory under $TMPDIR named `<prefix>.XXXXXX`. Throws on failure.
std::filesystem::path create_temp_directory(std::string_view prefix);

/// A temporary directory removed, with everything in it, when this object goes away.
class TempDir {
 public:
  explicit TempDir(std::string_view prefix = "garm-edge") : path_(create_temp_directory(prefix)) {}
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

}  // namespace garm_edge
