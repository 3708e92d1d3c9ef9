#pragma once

#include <functional>
#include <string>

#include "agent/base/config.hpp"
#include "agent/images/image_store.hpp"

namespace garm_edge::agent {

/// "120 MiB", rounded down.
std::string in_mib(std::uint64_t bytes);

/// The `images list` table: every configured image, its state (ready, pulling N%, partial,
/// failed, not pulled, local), its digest and base; a failed pull's reason on a line below.
/// `store` is null when no image has a source.
std::string image_list(const AgentConfig& config, const ImageStore* store);

/// Removes `image`'s bases and partial downloads; the lines `images remove` prints.
std::string remove_image(ImageStore& store, const std::string& image,
                         const std::function<bool(const std::string& path)>& in_use);

/// The line `images pull` prints once the image is ready.
std::string pulled_line(const ImageStore& store, const std::string& image,
                        const ImagePullState& state);

}  // namespace garm_edge::agent
