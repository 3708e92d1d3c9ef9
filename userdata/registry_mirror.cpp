// A guest's container tools pointed at the host's registry mirror (docs/caches.md).

#include "userdata/userdata.hpp"

namespace garm_edge::userdata {
namespace {

/// $1: the mirror's URL (http://address:port). Written once per instance, before Docker,
/// containerd or podman start (bootcmd runs in cloud-init's init stage). Each only where the
/// image has the tool; Docker's daemon.json of the image is kept, the mirror added to it.
constexpr std::string_view kConfigureMirror = R"bash(set -eu
url=$1
host=${url#http://}
if [ -d /etc/docker ] || command -v dockerd >/dev/null 2>&1; then
  mkdir -p /etc/docker
  if [ -s /etc/docker/daemon.json ] && command -v python3 >/dev/null 2>&1; then
    python3 - "$url" "$host" <<'PY'
import json, sys
path = "/etc/docker/daemon.json"
with open(path) as f:
    config = json.load(f)
config["registry-mirrors"] = [sys.argv[1]] + [m for m in config.get("registry-mirrors", []) if m != sys.argv[1]]
config["insecure-registries"] = sorted(set(config.get("insecure-registries", []) + [sys.argv[2]]))
with open(path, "w") as f:
    json.dump(config, f, indent=2)
PY
  elif [ ! -s /etc/docker/daemon.json ]; then
    printf '{\n  "registry-mirrors": ["%s"],\n  "insecure-registries": ["%s"]\n}\n' "$url" "$host" > /etc/docker/daemon.json
  fi
fi
if [ -d /etc/containers ]; then
  mkdir -p /etc/containers/registries.conf.d
  printf '[[registry]]\nprefix = "docker.io"\nlocation = "docker.io"\n[[registry.mirror]]\nlocation = "%s"\ninsecure = true\n' "$host" > /etc/containers/registries.conf.d/50-garm-edge-mirror.conf
fi
if [ -d /etc/containerd ]; then
  mkdir -p /etc/containerd/certs.d/docker.io
  printf 'server = "https://registry-1.docker.io"\n[host."%s"]\n  capabilities = ["pull", "resolve"]\n' "$url" > /etc/containerd/certs.d/docker.io/hosts.toml
fi
)bash";

}  // namespace

nlohmann::ordered_json registry_mirror_bootcmd(const std::string& mirror_url) {
  if (!mirror_url.starts_with("http://") ||
      mirror_url.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789.:/[]") !=
          std::string::npos) {
    throw UserDataError("the registry mirror's URL must be a plain http:// URL");
  }
  return nlohmann::ordered_json::array({"cloud-init-per", "instance", "garm-edge-registry-mirror",
                                        "bash", "-c", kConfigureMirror, "garm-edge-mirror",
                                        mirror_url});
}

}  // namespace garm_edge::userdata
