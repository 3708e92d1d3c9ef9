#include "agent/images/image_tools.hpp"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <sstream>
#include <vector>

#include <nlohmann/json.hpp>

#include "agent/images/image_fetcher.hpp"
#include "common/subprocess.hpp"
#include "common/text.hpp"
#include "common/unique_fd.hpp"
#include "net/http_syntax.hpp"

namespace garm_edge::agent {
ProcessResult run_image_tool(const std::vector<std::string>& argv, std::chrono::seconds timeout,
                             const std::atomic<bool>& stop, int stdout_fd) {
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

std::uint64_t HostImageTools::unpacked_size(const std::filesystem::path& xz_file,
                                            const std::atomic<bool>& stop) {
  // --robot: "totals<TAB>streams<TAB>blocks<TAB>compressed<TAB>uncompressed<TAB>…"
  const auto result =
      run_image_tool({"xz", "--robot", "--list", "--", xz_file.string()}, timeout_, stop);
  std::istringstream lines(result.output);
  for (std::string line; std::getline(lines, line);) {
    std::vector<std::string> fields;
    std::istringstream in(line);
    for (std::string field; std::getline(in, field, '\t');) {
      fields.push_back(field);
    }
    if (fields.size() > 4 && fields[0] == "totals") {
      if (const auto size = net::http_syntax::parse_decimal(fields[4], 19)) {
        return *size;
      }
    }
  }
  throw ImagePullError("xz --list did not say what the image unpacks to: " +
                       printable_excerpt(result.output, 200));
}

void HostImageTools::decompress_xz(const std::filesystem::path& from,
                                   const std::filesystem::path& to, std::uint64_t limit,
                                   const std::atomic<bool>& stop) {
  const UniqueFd out(
      ::open(to.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600));
  if (out.get() < 0) {
    throw ImagePullError("creating " + to.string() + ": " + std::strerror(errno));
  }
  // prlimit's file size limit: xz is stopped by SIGXFSZ past what its index promised.
  // --no-sparse: xz skips runs of zeros with a seek, so a stream of zeros would be unpacked
  // whole (gigabytes of CPU) before its one write past the limit; every byte is written now.
  try {
    run_image_tool({"prlimit", "--fsize=" + std::to_string(std::max<std::uint64_t>(limit, 1)), "--",
                    "xz", "--decompress", "--stdout", "--no-sparse", "--", from.string()},
                   timeout_, stop, out.get());
  } catch (const ImagePullError& e) {
    throw ImagePullError("unpacking with xz failed, or its data outgrew the " +
                         std::to_string(limit) + " bytes its index gives: " + e.what());
  }
}

std::uint64_t HostImageTools::converted_size(const std::filesystem::path& file,
                                             const std::string& format,
                                             const std::atomic<bool>& stop) {
  const auto result = run_image_tool({"qemu-img", "measure", "--force-share", "--output=json", "-f",
                                      format, "-O", "qcow2", "--", file.string()},
                                     timeout_, stop);
  try {
    return nlohmann::json::parse(result.output).at("required").get<std::uint64_t>();
  } catch (const nlohmann::json::exception& e) {
    throw ImagePullError(std::string("qemu-img measure answered what is not its JSON: ") +
                         e.what());
  }
}

ImageFacts HostImageTools::inspect(const std::filesystem::path& file, const std::string& format,
                                   const std::atomic<bool>& stop) {
  // --force-share: a read that never waits for a lock another qemu-img may hold.
  const auto result = run_image_tool(
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
  run_image_tool({"qemu-img", "convert", "-t", "writeback", "-f", format, "-O", "qcow2", "--",
                  from.string(), to.string()},
                 timeout_, stop);
}

}  // namespace garm_edge::agent
