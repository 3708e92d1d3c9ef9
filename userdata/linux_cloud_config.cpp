// #cloud-config user-data, shaped like garm-provider-common's GetCloudInitConfig (same keys,
// same order, same default user) so garm's install scripts find the guest they expect.

#include <algorithm>
#include <string>

#include "common/hex.hpp"
#include "userdata/internal.hpp"
#include "wire/base64.hpp"
#include "wire/pool_shape.hpp"

namespace garm_edge::userdata {
namespace {

using nlohmann::ordered_json;

constexpr std::string_view kPreInstallDir = "/garm-pre-install";
constexpr std::string_view kInstallScriptPath = "/install_runner.sh";
constexpr std::string_view kRunnerUser = "runner";

ordered_json packages(const wire::UserDataOptions& options) {
  std::vector<std::string> names;
  if (!options.disable_updates_on_boot) {
    names = {"curl", "tar"};
  }
  for (const auto& name : options.extra_packages.value_or(std::vector<std::string>{})) {
    if (std::find(names.begin(), names.end(), name) == names.end()) {
      names.push_back(name);
    }
  }
  return names;
}

ordered_json system_info() {
  return {
      {"default_user",
       {{"name", kRunnerUser},
        {"home", "/home/runner"},
        {"shell", "/bin/bash"},
        {"groups",
         {"sudo", "adm", "cdrom", "dialout", "dip", "video", "plugdev", "netdev", "docker", "lxd"}},
        {"sudo", "ALL=(ALL) NOPASSWD:ALL"}}}};
}

ordered_json executable_file(std::string_view path, std::string_view content) {
  return {{"path", path},
          {"content", wire::base64_encode(content)},
          {"encoding", "b64"},
          {"owner", "root:root"},
          {"permissions", "0755"}};
}

struct Commands {
  ordered_json runcmd = ordered_json::array();
  ordered_json write_files = ordered_json::array();
};

/// Pre-install scripts run as root, in name order, before the runner is installed.
void add_pre_install_scripts(Commands& commands,
                             const std::map<std::string, std::string>& scripts) {
  for (const auto& [name, script] : scripts) {
    const auto path = std::string(kPreInstallDir) + "/" + name;
    commands.write_files.push_back(executable_file(path, script));
    commands.runcmd.push_back(ordered_json::array({path}));
  }
  if (!scripts.empty()) {
    commands.runcmd.push_back(ordered_json::array({"rm", "-rf", kPreInstallDir}));
  }
}

/// The install script runs as the runner user (with passwordless sudo), as garm's expect.
void add_install_script(Commands& commands, std::string_view script) {
  commands.write_files.push_back(executable_file(kInstallScriptPath, script));
  commands.runcmd.push_back(
      ordered_json::array({"su", "-l", "-c", kInstallScriptPath, kRunnerUser}));
  commands.runcmd.push_back(ordered_json::array({"rm", "-f", kInstallScriptPath}));
}

/// Starts the prefetch below ($1, with the archive's URL $2 and sha256 $3) detached (setsid),
/// so cloud-init never waits for it; its directory exists before this returns, so the take step
/// knows a prefetch was started.
constexpr std::string_view kLaunchPrefetch = R"bash(set -eu
mkdir -p /var/lib/garm-edge/runner
setsid -f bash -c "$1" garm-edge-runner-prefetch "$2" "$3"
)bash";

/// The runner archive ($1, its sha256 $2) from the agent's cache, verified and unpacked while
/// cloud-init goes on, its output in a log. Its pid is its process group's (setsid).
constexpr std::string_view kRunnerPrefetch =
    R"bash(exec </dev/null >/var/log/garm-edge-runner-prefetch.log 2>&1
set -u
dir=/var/lib/garm-edge/runner
mkdir -p "$dir"
echo $$ > "$dir/pid"
if fetch_runner_archive "$1" "$2" "$dir/actions-runner"; then printf '%s\n' "$2" > "$dir/ready"; fi
touch "$dir/done"
)bash";

/// As root, just before the install script: the prefetched runner (sha256 $1) becomes the
/// runner user's ~/actions-runner, where the install script finds it ("using cached runner")
/// and skips its download; its dependencies are installed as the install script would have.
/// A prefetch under way is waited for, at most 16 minutes (its curl gives up within 15); one
/// that never started (no directory, or no pid within 30 s) or died is not, and one still
/// running at the end is stopped. Then the install script downloads as it would have.
constexpr std::string_view kTakePrefetchedRunner = R"bash(set -u
dir=/var/lib/garm-edge/runner
if [ -d "$dir" ]; then
  for waited in $(seq 960); do
    [ -e "$dir/done" ] && break
    if [ -e "$dir/pid" ]; then
      kill -0 "$(cat "$dir/pid")" 2>/dev/null || break
    elif [ "$waited" -ge 30 ]; then
      break
    fi
    sleep 1
  done
  if [ ! -e "$dir/done" ] && [ -e "$dir/pid" ]; then
    kill -- "-$(cat "$dir/pid")" 2>/dev/null || true
  fi
fi
taken=
if [ "$(cat "$dir/ready" 2>/dev/null)" = "$1" ] && [ ! -e /home/runner/actions-runner ]; then
  mv "$dir/actions-runner" /home/runner/actions-runner
  chown -R --reference=/home/runner /home/runner/actions-runner
  taken=1
fi
rm -rf "$dir"
[ -n "$taken" ] || exit 0
)bash";

/// The first line of cloud-init's runcmd script, as a plain string so that cloud-init writes it
/// unquoted: whoever runs the script first (the early start below or cloud-final) claims it, and
/// the other leaves at once. The claim is kept with the instance (a reboot between the two does
/// not make a second install).
constexpr std::string_view kClaimRuncmd =
    "mkdir /var/lib/cloud/instance/garm-edge-runcmd 2>/dev/null || exit 0";

/// cloud-init writes runcmd's script here during modules:config and runs it in modules:final.
constexpr std::string_view kRuncmdScript = "/var/lib/cloud/instance/scripts/runcmd";

/// With nothing for cloud-final to install first, the runner need not wait for cloud-final's
/// own start (a Python process, seconds under TCG): a transient unit runs runcmd's script as
/// soon as modules:config has written it. The unit is ordered and run as cloud-final is
/// (after multi-user.target, before apt's daily jobs, leftover processes kept, no timeout), so
/// the script sees the system it would have seen there. Where systemd-run or the script is
/// missing, this does nothing and cloud-final runs the script as before. It runs beside
/// cloud-final's own start, so it gets the larger share of a busy CPU (CPUWeight, 10 times the
/// default): the runner is what the guest is for. The command has no `$`: systemd would
/// expand it.
ordered_json early_runner_start() {
  const std::string script(kRuncmdScript);
  const std::string run_once = "[ -x " + script + " ] || exit 0; exec " + script;
  return ordered_json::array(
      {"cloud-init-per",
       "instance",
       "garm-edge-runner-start",
       "sh",
       "-c",
       "command -v systemd-run >/dev/null || exit 0; exec systemd-run \"$@\"",
       "garm-edge-runner-start",
       "--no-block",
       "--unit=garm-edge-runner-start",
       "--description=garm-edge: runcmd, ahead of cloud-final",
       "--property=After=network-online.target cloud-config.service rc-local.service "
       "multi-user.target",
       "--property=Before=apt-daily.service apt-daily-upgrade.service",
       "--property=Type=oneshot",
       "--property=RemainAfterExit=yes",
       "--property=TimeoutStartSec=infinity",
       "--property=KillMode=process",
       "--property=TasksMax=infinity",
       "--property=CPUWeight=1000",
       "--property=StandardOutput=journal+console",
       "--property=StandardError=journal+console",
       "/bin/sh",
       "-c",
       run_once});
}

ordered_json proxy_bootcmd(const wire::ProxyConfig& proxy) {
  if (proxy.http_proxy.empty() && proxy.https_proxy.empty()) {
    return ordered_json::array();
  }
  return ordered_json::array({"sh", "-c", detail::kAptProxyScript, "garm-edge-apt-proxy",
                              detail::kAptProxyConfig, proxy.http_proxy, proxy.https_proxy});
}

/// Early in boot, once per instance (bootcmd runs on every boot; cloud-init-per's "once" would
/// survive a new instance-id in an image made from a booted guest): apt's proxy, garm's CA
/// (incrementally, before apt or the install script opens a TLS connection) and the runner
/// prefetch.
ordered_json early_steps(const wire::BootstrapInstance& bootstrap, const RunnerPrefetch& prefetch,
                         bool runner_starts_early) {
  auto steps = ordered_json::array();
  if (auto proxy = proxy_bootcmd(detail::checked_proxy_config(bootstrap)); !proxy.empty()) {
    steps.push_back(std::move(proxy));
  }
  if (const auto ca = detail::ca_certificates_steps(bootstrap); !ca.empty()) {
    steps.push_back(ordered_json::array({"cloud-init-per", "instance", "garm-edge-ca-certificates",
                                         "bash", "-euo", "pipefail", "-c", "umask 022\n" + ca}));
  }
  if (!prefetch.url.empty() && !prefetch.sha256.empty()) {
    steps.push_back(ordered_json::array(
        {"cloud-init-per", "instance", "garm-edge-runner-prefetch", "bash", "-c", kLaunchPrefetch,
         "garm-edge-runner-prefetch",
         std::string(detail::kFetchRunnerArchive) + std::string(kRunnerPrefetch), prefetch.url,
         prefetch.sha256}));
  }
  if (runner_starts_early) {
    steps.push_back(early_runner_start());
  }
  return steps;
}

void add_prefetched_runner(Commands& commands, const RunnerPrefetch& prefetch) {
  if (prefetch.url.empty() || prefetch.sha256.empty()) {
    return;
  }
  const auto script =
      std::string(kTakePrefetchedRunner) + std::string(detail::kKeptRunnerDependencies);
  commands.runcmd.push_back(
      ordered_json::array({"bash", "-c", script, "garm-edge-runner", prefetch.sha256}));
}

bool plain_disk_mount(std::string_view serial, std::string_view path) {
  return wire::is_plain_guest_path(path) && !serial.empty() &&
         serial.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789-") == std::string::npos;
}

/// cloud-init's mounts module writes them to fstab and mounts them in its init stage: before
/// runcmd, and before Docker (After=network-online.target) starts on its cache. `nofail`: a
/// guest whose cache or scratch disk is missing still boots (and runs its job cold).
ordered_json disk_mounts(const GuestDevices& devices) {
  auto mounts = ordered_json::array();
  for (const auto& cache : devices.caches) {
    if (!plain_disk_mount(cache.serial, cache.path)) {
      throw UserDataError("a cache mount must be a plain absolute path on a plain disk serial");
    }
    mounts.push_back(ordered_json::array({"/dev/disk/by-id/virtio-" + cache.serial, cache.path,
                                          "auto", "defaults,nofail,noatime", "0", "2"}));
  }
  for (const auto& disk : devices.scratch) {
    if (!plain_disk_mount(disk.serial, disk.path)) {
      throw UserDataError("a scratch mount must be a plain absolute path on a plain disk serial");
    }
    mounts.push_back(ordered_json::array({"/dev/disk/by-id/virtio-" + disk.serial, disk.path,
                                          "auto", "defaults,nofail,noatime", "0", "2"}));
  }
  return mounts;
}

/// $1: the disk's serial. Early in every boot, before cloud-init's mounts module mounts it
/// (disk_mounts): an empty disk gets its filesystem.
constexpr std::string_view kScratchDisk = R"bash(set -u
dev=/dev/disk/by-id/virtio-$1
for _ in $(seq 50); do [ -e "$dev" ] && break; sleep 0.2; done
[ -e "$dev" ] || { echo "garm-edge: scratch disk $1 is missing" >&2; exit 0; }
blkid "$dev" >/dev/null 2>&1 || mkfs.ext4 -q -E nodiscard -L "${1#garm-}" "$dev" || true
)bash";

/// $@: the further NICs' MACs. DHCP on each, its default route (if any) behind the first NIC's,
/// with dhclient (Debian's ifupdown) or systemd-networkd, whichever the image has.
constexpr std::string_view kExtraNics = R"bash(set -u
for mac in "$@"; do
  for dev in /sys/class/net/*; do
    [ "$(cat "$dev/address" 2>/dev/null)" = "$mac" ] || continue
    name=${dev##*/}
    ip link set "$name" up
    if command -v networkctl >/dev/null && systemctl -q is-active systemd-networkd; then
      mkdir -p /run/systemd/network
      printf '[Match]
MACAddress=%s
[Network]
DHCP=ipv4
[DHCPv4]
RouteMetric=2048
' "$mac"         >"/run/systemd/network/10-garm-edge-$name.network"
      networkctl reload
    elif command -v dhclient >/dev/null; then
      dhclient -nw -e IF_METRIC=2048 "$name"
    fi
  done
done
)bash";

ordered_json device_steps(const GuestDevices& devices) {
  auto steps = ordered_json::array();
  for (const auto& disk : devices.scratch) {
    steps.push_back(
        ordered_json::array({"bash", "-c", kScratchDisk, "garm-edge-scratch", disk.serial}));
  }
  if (!devices.extra_nic_macs.empty()) {
    auto step = ordered_json::array({"bash", "-c", kExtraNics, "garm-edge-nics"});
    for (const auto& mac : devices.extra_nic_macs) {
      if (!is_mac_address(mac)) {
        throw UserDataError("a further NIC's MAC must be xx:xx:xx:xx:xx:xx");
      }
      step.push_back(mac);
    }
    steps.push_back(std::move(step));
  }
  return steps;
}

void set_unless_empty(ordered_json& config, const char* key, ordered_json value) {
  if (!value.empty()) {
    config[key] = std::move(value);
  }
}

}  // namespace

std::string render_linux_cloud_config(const wire::BootstrapInstance& bootstrap,
                                      std::string_view install_script,
                                      const RunnerPrefetch& prefetch, const GuestDevices& devices,
                                      const std::string& mirror_url) {
  const auto specs = detail::parse_extra_specs(bootstrap);
  const auto options = detail::effective_user_data_options(bootstrap, specs);

  auto package_names = packages(options);
  // Packages (and upgrades) are installed by cloud-final before runcmd; without any, nothing
  // the install script needs comes from cloud-final.
  const bool runner_starts_early = options.disable_updates_on_boot && package_names.empty();
  Commands commands;
  if (runner_starts_early) {
    commands.runcmd.push_back(kClaimRuncmd);
  }
  for (const auto& disk : devices.scratch) {
    // Mounted by now (the mounts module runs before runcmd): every user may write there, as in
    // /tmp, whatever the runner's user is called.
    commands.runcmd.push_back(ordered_json::array({"chmod", "1777", disk.path}));
  }
  add_pre_install_scripts(commands, specs.pre_install_scripts);
  add_prefetched_runner(commands, prefetch);
  add_install_script(commands, install_script);

  ordered_json config;
  config["users"] = ordered_json::array({"default"});
  config["package_upgrade"] = !options.disable_updates_on_boot;
  set_unless_empty(config, "packages", std::move(package_names));
  set_unless_empty(config, "ssh_authorized_keys", detail::checked_ssh_keys(bootstrap));
  set_unless_empty(config, "mounts", disk_mounts(devices));
  config["system_info"] = system_info();
  // sudo looks the host name up: without it in /etc/hosts, every sudo of the install script
  // asks DNS and warns "unable to resolve host" (warm guests keep /etc/hosts the same way).
  config["manage_etc_hosts"] = "localhost";
  // The host keys' fingerprints on the console are for a person at the console, not a runner:
  // printing them cost a cold guest 1.2 s of its boot under TCG (cloud-init analyze blame).
  config["ssh"] = {{"emit_keys_to_console", false}};
  config["runcmd"] = std::move(commands.runcmd);
  config["write_files"] = std::move(commands.write_files);
  auto early = device_steps(devices);
  for (auto& step : early_steps(bootstrap, prefetch, runner_starts_early)) {
    early.push_back(std::move(step));
  }
  if (!mirror_url.empty()) {
    early.insert(early.begin(), registry_mirror_bootcmd(mirror_url));  // before Docker starts
  }
  set_unless_empty(config, "bootcmd", std::move(early));
  return "#cloud-config\n" + to_yaml(config);
}

}  // namespace garm_edge::userdata
