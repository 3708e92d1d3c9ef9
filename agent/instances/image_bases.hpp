#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace garm_edge::agent {

/// A base image file new overlays may back onto.
struct ImageBase {
  std::string path;
  std::string format;  // "qcow2" or "raw"
};

/// Where one pulled image stands (docs/images.md).
struct ImagePullState {
  enum class Phase { ready, pulling, failed };
  std::string name;
  Phase phase = Phase::pulling;
  std::uint64_t bytes = 0;  // of the download under way
  std::uint64_t total = 0;  // 0: not known yet
  std::string error;        // why the last pull failed
  std::string digest;       // of the ready base: "sha256:…"
  bool has_base = false;    // a base is ready (also while a newer version is pulled)
};

/// The images the agent pulls, as the instance service sees them (agent/images implements
/// it): what a create backs onto, and which old bases running guests still hold.
class ImageBases {
 public:
  virtual ~ImageBases() = default;
  /// Whether `image` is one the agent pulls.
  virtual bool pulls(const std::string& image) const = 0;
  /// Its ready base; nothing while none is (state() says why).
  virtual std::optional<ImageBase> ready(const std::string& image) const = 0;
  virtual std::optional<ImagePullState> state(const std::string& image) const = 0;
  virtual std::vector<ImagePullState> states() const = 0;
  /// Starts a pull of `image` now, with a fresh look at its checksum file; false when one is
  /// under way already.
  virtual bool pull(const std::string& image) = 0;
  /// Removes replaced bases that no overlay backs onto; `in_use` says which do.
  virtual void remove_unused(const std::function<bool(const std::string& path)>& in_use) = 0;
};

}  // namespace garm_edge::agent
