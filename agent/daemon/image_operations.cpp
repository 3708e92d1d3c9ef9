#include "agent/daemon/image_operations.hpp"

#include <iomanip>
#include <sstream>

namespace garm_edge::agent {
namespace fs = std::filesystem;
std::string in_mib(std::uint64_t bytes) {
  return std::to_string(bytes >> 20U) + " MiB";
}

namespace {

/// Bytes of a download that is kept to resume, if there is one.
std::uint64_t partial_bytes(const AgentConfig& config, const std::string& image) {
  std::uint64_t bytes = 0;
  std::error_code ec;
  const auto prefix = "garm-image-" + image + "-";
  for (fs::directory_iterator it(config.state_dir / "images" / "downloads", ec), end;
       !ec && it != end; it.increment(ec)) {
    if (it->path().filename().string().starts_with(prefix)) {
      bytes += it->file_size(ec);
    }
  }
  return bytes;
}

std::string pulled_phase(const AgentConfig& config, const std::optional<ImageBase>& base,
                         const ImagePullState& state) {
  if (state.bytes > 0 && state.phase == ImagePullState::Phase::pulling) {
    const auto percent = state.total > 0 ? std::to_string(state.bytes * 100 / state.total) : "?";
    return (base ? "ready, pulling " : "pulling ") + percent + "%";
  }
  if (base) {
    return "ready";
  }
  if (!state.error.empty()) {
    return "failed";
  }
  const auto partial = partial_bytes(config, state.name);
  return partial > 0 ? "partial " + in_mib(partial) : "not pulled";
}

}  // namespace

std::string image_list(const AgentConfig& config, const ImageStore* store) {
  std::ostringstream out;
  out << std::left << std::setw(20) << "IMAGE" << std::setw(22) << "STATE" << std::setw(26)
      << "DIGEST"
      << "BASE OR SOURCE\n";
  std::string failures;
  for (const auto& image : config.images) {
    std::string phase = "local";
    std::string where = image.base_path.empty() ? image.base_volume : image.base_path;
    std::string digest = "-";
    if (image.source && store == nullptr) {
      phase = "not pulled";  // the agent never ran here
      where = image.source->url.substr(0, image.source->url.find_first_of("?#"));
    } else if (image.source) {
      const auto base = store->ready(image.name);
      const auto state = *store->state(image.name);
      phase = pulled_phase(config, base, state);
      where =
          base ? base->path : image.source->url.substr(0, image.source->url.find_first_of("?#"));
      digest = state.digest.empty() ? "-" : state.digest.substr(0, 23);
      if (!state.error.empty() && state.phase != ImagePullState::Phase::ready) {
        failures += "  " + image.name + ": " + state.error + "\n";
      }
    }
    out << std::setw(20) << image.name << std::setw(22) << phase << std::setw(26) << digest << where
        << "\n";
  }
  if (!failures.empty()) {
    out << "\nlast failed pulls:\n" << failures;
  }
  return out.str();
}

std::string remove_image(ImageStore& store, const std::string& image,
                         const std::function<bool(const std::string& path)>& in_use) {
  std::string removed;
  for (const auto& path : store.remove(image, in_use)) {
    removed += "removed " + path + "\n";
  }
  return removed.empty() ? "image " + image + ": nothing to remove\n" : removed;
}

std::string pulled_line(const ImageStore& store, const std::string& image,
                        const ImagePullState& state) {
  return image + ": " + state.digest + " is ready at " + store.ready(image)->path + "\n";
}

}  // namespace garm_edge::agent
