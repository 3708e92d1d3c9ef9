#include "common/temp_dir.hpp"

#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <stdlib.h>
#include <string>
#include <system_error>

namespace garm_edge {

std::filesystem::path create_temp_directory(std::string_view prefix) {
  std::string pattern =
      (std::filesystem::temp_directory_path() / (std::string(prefix) + ".XXXXXX")).string();
  if (::mkdtemp(pattern.data()) == nullptr) {
    throw std::system_error(errno, std::generic_category(),
                            "cannot create a temporary directory " + pattern);
  }
  return pattern;
}

TempDir::~TempDir() {
  std::error_code ignored;
  std::filesystem::remove_all(path_, ignored);
}

}  // namespace garm_edge
