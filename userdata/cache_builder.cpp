// The user-data of a cache builder (docs/caches.md): the operator's script run as root against
// the cache's writable disk, its status written to a raw disk the agent reads, then power-off.

#include <nlohmann/json.hpp>

#include "userdata/userdata.hpp"
#include "wire/base64.hpp"

namespace garm_edge::userdata {
namespace {

constexpr std::string_view kScriptPath = "/var/lib/garm-edge/cache-refresh";
constexpr std::string_view kWrapperPath = "/var/lib/garm-edge/cache-refresh-wrapper";

/// $1: filesystem, $2: mount path, $3: the operator's script. Docker and containerd are stopped
/// around the mount so neither writes under the path before or after the cache is there. The
/// first line of the status disk is "garm-edge-refresh exit=<code>"; the script's output
/// follows (its last 60 KiB). The guest powers off either way: the agent waits for that.
constexpr std::string_view kWrapper = R"bash(#!/bin/bash
set -u
work=/dev/disk/by-id/virtio-garm-cache-work
status=/dev/disk/by-id/virtio-garm-refresh-status
log=/var/log/garm-edge-cache-refresh.log
services="docker.socket docker.service containerd.service"
refresh() {
  for _ in $(seq 60); do [ -e "$work" ] && [ -e "$status" ] && break; sleep 1; done
  [ -e "$work" ] || { echo "the cache disk $work is not there"; return 90; }
  if ! blkid "$work" >/dev/null 2>&1; then
    echo "a first generation: making a $1 filesystem"
    "mkfs.$1" -q -L garm-cache "$work" || return 91
  fi
  running=""
  for service in $services; do
    if systemctl is-active --quiet "$service"; then running="$service $running"; fi
  done
  # shellcheck disable=SC2086
  [ -z "$running" ] || systemctl stop $running
  mkdir -p "$2" && mount -o noatime "$work" "$2" || return 92
  # shellcheck disable=SC2086
  [ -z "$running" ] || systemctl start $running
  GARM_EDGE_CACHE_PATH="$2" "$3"
  rc=$?
  # shellcheck disable=SC2086
  [ -z "$running" ] || systemctl stop $running
  sync
  fstrim "$2" >/dev/null 2>&1 || true
  umount "$2" || return 93
  return "$rc"
}
refresh "$@" >"$log" 2>&1
rc=$?
{ printf 'garm-edge-refresh exit=%d\n' "$rc"; tail -c 61440 "$log"; } >/run/garm-edge-refresh-status
dd if=/run/garm-edge-refresh-status of="$status" bs=65536 count=1 conv=sync,fsync 2>/dev/null
sync
systemctl poweroff
)bash";

nlohmann::ordered_json root_file(std::string_view path, std::string_view content) {
  return {{"path", path},
          {"content", wire::base64_encode(content)},
          {"encoding", "b64"},
          {"owner", "root:root"},
          {"permissions", "0700"}};
}

}  // namespace

std::string render_cache_builder(const CacheBuilderValues& values) {
  if (values.filesystem != "ext4" && values.filesystem != "xfs") {
    throw UserDataError("a cache's filesystem must be ext4 or xfs");
  }
  nlohmann::ordered_json config;
  config["package_upgrade"] = false;
  config["ssh"] = {{"emit_keys_to_console", false}};
  config["write_files"] = nlohmann::ordered_json::array(
      {root_file(kScriptPath, values.script), root_file(kWrapperPath, kWrapper)});
  config["runcmd"] = nlohmann::ordered_json::array({nlohmann::ordered_json::array(
      {kWrapperPath, values.filesystem, values.mount, kScriptPath})});
  return "#cloud-config\n" + to_yaml(config);
}

}  // namespace garm_edge::userdata
