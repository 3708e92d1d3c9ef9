#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "common/subprocess.hpp"

namespace garm_edge::agent {

/// What qemu-img says of a file read as the format it was declared to be.
struct ImageFacts {
  std::uint64_t virtual_size = 0;
  std::string backing_file;  // non-empty: the image would read another file of the host
  std::string data_file;     // qcow2's external data file: the same
};

/// The boundary to the disk image tools. Every call ends within `timeout` or when `stop`
/// turns true; failures throw ImagePullError naming the tool and its own words.
class ImageTools {
 public:
  virtual ~ImageTools() = default;
  /// What the xz file unpacks to, from its index: checked against the disk before unpacking.
  virtual std::uint64_t unpacked_size(const std::filesystem::path& xz_file,
                                      const std::atomic<bool>& stop) = 0;
  /// Unpacks at most `limit` bytes: a file whose data outgrows its index fails, never the disk.
  virtual void decompress_xz(const std::filesystem::path& from, const std::filesystem::path& to,
                             std::uint64_t limit, const std::atomic<bool>& stop) = 0;
  /// The format is given, never probed: a raw image that looks like qcow2 stays raw.
  virtual ImageFacts inspect(const std::filesystem::path& file, const std::string& format,
                             const std::atomic<bool>& stop) = 0;
  /// The most the qcow2 base of `file` takes on disk: a compressed qcow2 grows when converted.
  virtual std::uint64_t converted_size(const std::filesystem::path& file, const std::string& format,
                                       const std::atomic<bool>& stop) = 0;
  virtual void convert_to_qcow2(const std::filesystem::path& from, const std::string& format,
                                const std::filesystem::path& to, const std::atomic<bool>& stop) = 0;
};

/// Runs a disk image tool from the system's directories; ImagePullError naming the tool and its
/// own words when it fails, times out or is stopped.
ProcessResult run_image_tool(const std::vector<std::string>& argv, std::chrono::seconds timeout,
                             const std::atomic<bool>& stop, int stdout_fd = -1);

/// qemu-img and xz from the host's system directories.
class HostImageTools final : public ImageTools {
 public:
  explicit HostImageTools(std::chrono::seconds timeout) : timeout_(timeout) {}
  std::uint64_t unpacked_size(const std::filesystem::path& xz_file,
                              const std::atomic<bool>& stop) override;
  void decompress_xz(const std::filesystem::path& from, const std::filesystem::path& to,
                     std::uint64_t limit, const std::atomic<bool>& stop) override;
  ImageFacts inspect(const std::filesystem::path& file, const std::string& format,
                     const std::atomic<bool>& stop) override;
  std::uint64_t converted_size(const std::filesystem::path& file, const std::string& format,
                               const std::atomic<bool>& stop) override;
  void convert_to_qcow2(const std::filesystem::path& from, const std::string& format,
                        const std::filesystem::path& to, const std::atomic<bool>& stop) override;

 private:
  std::chrono::seconds timeout_;
};

}  // namespace garm_edge::agent
