// [mirror] in agent.toml (docs/caches.md).
#include "agent/base/mirror_config.hpp"

#include "agent/base/config_sections.hpp"
#include "common/text.hpp"

namespace garm_edge::agent {

void read_mirror_section(TomlTableReader& root, AgentConfig& config) {
  const auto* table = root.table("mirror");
  if (table == nullptr) {
    return;
  }
  TomlTableReader in(*table, root.source(), "[mirror]");
  auto& mirror = config.mirror;
  mirror.enabled = true;
  mirror.upstream = in.string("upstream").value_or(mirror.upstream);
  if (!(mirror.upstream.starts_with("https://") || mirror.upstream.starts_with("http://")) ||
      mirror.upstream.find_first_of(" \"'\\") != std::string::npos) {
    in.fail(in.node("upstream"), "upstream must be an http:// or https:// URL");
  }
  mirror.credentials = in.absolute_path("credentials", false);
  mirror.directory = in.absolute_path("directory", false);
  mirror.max_bytes =
      in.integer<std::uint64_t>("max_gib", 1, 65536).value_or(mirror.max_bytes >> 30U) << 30U;
  if (auto registry = in.string("registry")) {
    mirror.registry = *registry;
  }
  mirror.port = in.integer<std::uint16_t>("port", 0, 65535).value_or(mirror.port);
  in.reject_unknown_keys();
  if (!config.guests.enabled) {
    root.fail(nullptr,
              "[mirror] needs [guests]: guests reach the mirror through the guest service");
  }
  std::error_code ec;
  if (!std::filesystem::is_regular_file(mirror.registry, ec)) {
    in.fail(in.node("registry"), "the registry " + mirror.registry.string() +
                                     " is not there (Debian: apt install docker-registry)");
  }
  if (!mirror.credentials.empty() && !std::filesystem::is_regular_file(mirror.credentials, ec)) {
    in.fail(in.node("credentials"),
            "credentials " + mirror.credentials.string() + " cannot be read");
  }
}

}  // namespace garm_edge::agent
