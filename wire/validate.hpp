#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "wire/bootstrap.hpp"

namespace garm_edge::wire {

/// Limits on what garm (or anyone holding a controller's certificate) may send. Every check of
/// a garm value lives in this file; each throws WireError naming the field.
struct Limits {
  static constexpr std::size_t kMaxInstanceName = 63;  // it becomes the guest's host name
  static constexpr std::size_t kMaxResourceName = 128;
  static constexpr std::size_t kMaxPoolIdPrefix = 128;
  static constexpr std::size_t kMaxLabels = 64;
  static constexpr std::size_t kMaxLabelLength = 256;
  static constexpr std::size_t kMaxExtraSpecsBytes = 256 * 1024;
  /// Well inside the JSON depth the agent parses (extra specs sit one level into a bootstrap).
  static constexpr std::size_t kMaxExtraSpecsDepth = 16;
};

bool is_uuid(std::string_view value);
bool is_http_url(std::string_view url);

/// garm names are `lower(<prefix>-<short id>)`; the name is used as host name and file name.
void validate_instance_name(std::string_view name, const std::string& field = "name");
void validate_uuid(std::string_view value, const std::string& field);
/// A pool UUID, or a scale set's pseudo ID `<scale set name>-<entity uuid>`.
void validate_pool_id(std::string_view value, const std::string& field = "pool_id");
/// Image and flavor names: a short token that can never act as a path.
void validate_resource_name(std::string_view value, const std::string& field);
void validate_labels(const std::optional<std::vector<std::string>>& labels);
void validate_extra_specs(const std::optional<nlohmann::json>& extra_specs);
/// One line of text (no control characters, valid UTF-8), as every string garm sends is.
void validate_text(std::string_view value, const std::string& field);
/// Empty, or an http:// or https:// URL without control characters.
void validate_http_url(std::string_view value, const std::string& field);

/// Everything the agent needs from a bootstrap before it creates anything.
void validate_bootstrap(const BootstrapInstance& bootstrap);

/// An agent's name in a fleet (its agent_id; the prefix of its provider IDs, a hub's record
/// file name, a certificate's CN): 1-64 of [A-Za-z0-9._-], starting with a letter or digit,
/// without "..".
bool is_agent_name(std::string_view name);

}  // namespace garm_edge::wire
