#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <optional>

namespace garm_edge::agent {

/// The boundary to qemu-img for cache generations. Failures throw ImagePullError naming the
/// tool and its own words; every call ends within its timeout or when `stop` turns true.
class CacheDiskTools {
 public:
  virtual ~CacheDiskTools() = default;
  /// A qcow2 of `size_bytes`, empty or an overlay on `backing` (a qcow2).
  virtual void create(const std::filesystem::path& file, std::uint64_t size_bytes,
                      const std::optional<std::filesystem::path>& backing,
                      const std::atomic<bool>& stop) = 0;
  /// qemu-img check: a qcow2 a builder left torn is refused.
  virtual void check(const std::filesystem::path& file, const std::atomic<bool>& stop) = 0;
  /// A standalone qcow2 of what `from` reads, its backing chain included: the clusters the
  /// guest discarded are not copied.
  virtual void flatten(const std::filesystem::path& from, const std::filesystem::path& to,
                       const std::atomic<bool>& stop) = 0;
};

/// qemu-img from the host's system directories.
class HostCacheDiskTools final : public CacheDiskTools {
 public:
  explicit HostCacheDiskTools(std::chrono::seconds timeout) : timeout_(timeout) {}
  void create(const std::filesystem::path& file, std::uint64_t size_bytes,
              const std::optional<std::filesystem::path>& backing,
              const std::atomic<bool>& stop) override;
  void check(const std::filesystem::path& file, const std::atomic<bool>& stop) override;
  void flatten(const std::filesystem::path& from, const std::filesystem::path& to,
               const std::atomic<bool>& stop) override;

 private:
  std::chrono::seconds timeout_;
};

}  // namespace garm_edge::agent
