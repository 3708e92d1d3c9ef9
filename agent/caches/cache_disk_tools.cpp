#include "agent/caches/cache_disk_tools.hpp"

#include "agent/images/image_tools.hpp"

namespace garm_edge::agent {

void HostCacheDiskTools::create(const std::filesystem::path& file, std::uint64_t size_bytes,
                                const std::optional<std::filesystem::path>& backing,
                                const std::atomic<bool>& stop) {
  std::vector<std::string> argv{"qemu-img", "create", "-q", "-f", "qcow2"};
  if (backing) {
    argv.insert(argv.end(), {"-F", "qcow2", "-b", backing->string()});
  }
  argv.insert(argv.end(), {"--", file.string(), std::to_string(size_bytes)});
  run_image_tool(argv, timeout_, stop);
}

void HostCacheDiskTools::check(const std::filesystem::path& file, const std::atomic<bool>& stop) {
  // -r leaks: clusters a torn write left unreferenced are harmless and freed; corruption fails.
  run_image_tool({"qemu-img", "check", "-q", "-r", "leaks", "-f", "qcow2", "--", file.string()},
                 timeout_, stop);
}

void HostCacheDiskTools::flatten(const std::filesystem::path& from, const std::filesystem::path& to,
                                 const std::atomic<bool>& stop) {
  // -t writeback: on disk when qemu-img closes it, before the record names it.
  run_image_tool({"qemu-img", "convert", "-t", "writeback", "-f", "qcow2", "-O", "qcow2", "--",
                  from.string(), to.string()},
                 timeout_, stop);
}

}  // namespace garm_edge::agent
