#include "agent/images/image_tools.hpp"

#include <cerrno>
#include <cstring>
#include <fcntl.h>

#include <nlohmann/json.hpp>

#include "agent/images/image_fetcher.hpp"
#include "common/subprocess.hpp"
#include "common/text.hpp"
#include "common/unique_fd.hpp"

namespace garm_edge::agent {
namespace {

ProcessResult run_tool(const std::vector<std::string>& argv, std::chrono::seconds timeout,
                       const std::atomic<bool>& stop, int stdout_fd = -1) {
  ProcessResult result;
  try {
    result = run_process(
        argv, {.timeout = timeout, .stop = &stop, .stdout_fd = stdout_fd, .max_output = 64 * 1024});
  } catch (const std::exception& e) {
    throw ImagePullError(e.what());
  }
  if (result.stopped) {
    throw ImagePullError(argv.front() + " was stopped: the agent is stopping");
  }
  if (result.timed_out) {
    throw ImagePullError(argv.front() + " did not finish within " +
                         std::to_string(timeout.count()) + " s");
  }
  if (result.exit_code != 0) {
    throw ImagePullError(argv.front() + " " + argv.at(1) +
                         " failed: " + printable_excerpt(result.output, 400));
  }
  return result;
}

}  // namespace

void HostImageTools::decompress_xz(const std::filesystem::path& from,
                                   const std::filesystem::path& to, const std::atomic<bool>& stop) {
  const UniqueFd out(
      ::open(to.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600));
  if (out.get() < 0) {
    throw ImagePullError("creating " + to.string() + ": " + std::strerror(errno));
  }
  run_tool({"xz", "--decompress", "--stdout", "--", from.string()}, timeout_, stop, out.get());
}

ImageFacts HostImageTools::inspect(const std::filesystem::path& file, const std::string& format,
                                   const std::atomic<bool>& stop) {
  // --force-share: a read that never waits for a lock another qemu-img may hold.
  const auto result = run_tool(
      {"qemu-img", "info", "--force-share", "--output=json", "-f", format, "--", file.string()},
      timeout_, stop);
  try {
    const auto info = nlohmann::json::parse(result.output);
    ImageFacts facts{.virtual_size = info.value("virtual-size", std::uint64_t{0}),
                     .backing_file = info.value("backing-filename", std::string()),
                     .data_file = ""};
    if (const auto specific = info.find("format-specific"); specific != info.end()) {
      facts.data_file = specific->value("/data/data-file"_json_pointer, std::string());
    }
    return facts;
  } catch (const nlohmann::json::exception& e) {
    throw ImagePullError(std::string("qemu-img info answered what is not its JSON: ") + e.what());
  }
}

void HostImageTools::convert_to_qcow2(const std::filesystem::path& from, const std::string& format,
                                      const std::filesystem::path& to,
                                      const std::atomic<bool>& stop) {
  // -t writeback: flushed when qemu-img closes it (convert's default cache is "unsafe"), so the
  // base is on disk before the record names it.
  run_tool({"qemu-img", "convert", "-t", "writeback", "-f", format, "-O", "qcow2", "--",
            from.string(), to.string()},
           timeout_, stop);
}

}  // namespace garm_edge::agent
