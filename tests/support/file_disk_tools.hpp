#pragma once

#include <filesystem>
#include <fstream>
#include <optional>
#include <vector>

#include "agent/caches/cache_disk_tools.hpp"

namespace garm_edge::testing {

/// qemu-img as plain files: an "overlay" names its size and backing inside, a flatten copies.
class FileDiskTools final : public agent::CacheDiskTools {
 public:
  void create(const std::filesystem::path& file, std::uint64_t size,
              const std::optional<std::filesystem::path>& backing,
              const std::atomic<bool>&) override {
    std::ofstream(file) << "size " << size << " backing " << (backing ? backing->string() : "-");
  }
  void check(const std::filesystem::path& file, const std::atomic<bool>&) override {
    checked.push_back(file);
  }
  void flatten(const std::filesystem::path& from, const std::filesystem::path& to,
               const std::atomic<bool>&) override {
    std::filesystem::copy_file(from, to);
  }
  std::vector<std::filesystem::path> checked;
};

}  // namespace garm_edge::testing
