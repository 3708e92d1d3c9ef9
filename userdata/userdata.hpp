#pragma once

#include <chrono>
#include <stdexcept>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "wire/bootstrap.hpp"

/// What a guest boots with, rendered from garm's BootstrapInstance. Pure functions: no I/O, no
/// clock, no randomness. Every bootstrap value that lands in YAML, a shell script or PowerShell
/// is encoded or quoted here, so no label, URL or name can add a line or a command.
namespace garm_edge::userdata {

/// A bootstrap that cannot become user-data (bad base64, a CA bundle that is not PEM, no tool
/// for the guest's OS and architecture, ...). The message names the field.
class UserDataError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// The callback and metadata base URLs the guest is told to use. In relay mode they point at the
/// agent's guest-facing service; in direct mode they are garm's own from the bootstrap.
struct GuestEndpoints {
  std::string callback_url;
  std::string metadata_url;
  /// Where the guest downloads its runner archive from, in place of the tool's own URL; empty:
  /// from the tool's URL (no cache).
  std::string runner_archive_url = "";
  /// Where garm-agent opens its WebSocket (the relay's `/agent`); empty: garm's own.
  std::string agent_url = "";
  /// The cached archive's sha256, with runner_archive_url: a cold Linux guest fetches it early.
  std::string runner_archive_sha256 = "";
};

/// The runner archive a cold guest fetches from the agent's cache as soon as its network is up,
/// while cloud-init goes on; empty: none (the install script downloads it).
struct RunnerPrefetch {
  std::string url;
  std::string sha256;
};

/// A cache disk the guest mounts before the runner starts (docs/caches.md).
struct CacheMount {
  std::string serial;  // the disk is /dev/disk/by-id/virtio-<serial>
  std::string path;    // checked by the agent's config: absolute, plain characters
};

/// An empty disk the guest formats (ext4) on its first boot and mounts, writable by every
/// user (mode 1777), before the runner starts (docs/extra-specs.md).
struct ScratchMount {
  std::string serial;  // the disk is /dev/disk/by-id/virtio-<serial>
  std::string path;    // absolute, plain characters (wire::is_plain_guest_path)
};

/// What the agent gave the guest beyond its root disk and first NIC.
struct GuestDevices {
  std::vector<CacheMount> caches = {};
  std::vector<ScratchMount> scratch = {};
  /// Further NICs, by MAC: brought up with DHCP, their routes behind the first NIC's.
  std::vector<std::string> extra_nic_macs = {};
};

/// What a cache builder runs (docs/caches.md).
struct CacheBuilderValues {
  std::string script;      // the operator's refresh script
  std::string filesystem;  // ext4 or xfs: made on a first generation's empty disk
  std::string mount;       // where the script finds the cache (also $GARM_EDGE_CACHE_PATH)
};

/// `#cloud-config` for a cache builder: no runner, no garm; it runs `values.script` as root
/// with the cache mounted, writes its status to its status disk and powers off.
std::string render_cache_builder(const CacheBuilderValues& values);

/// garm's own URLs that a script garm rendered may hold, each replaced by its GuestEndpoints
/// counterpart; an empty one is left alone.
struct GarmUrls {
  std::string callback_url;
  std::string metadata_url;
  std::string runner_download_url;  // the tool's download_url
  /// GHES's temp_download_token: blanked where the download URL is replaced, so it is not
  /// sent to the agent.
  std::string runner_download_token = "";
  /// garm's agent URL (controller-wide, learned from what garm rendered).
  std::string agent_url = "";
};

/// The three NoCloud documents, served as meta-data, user-data and vendor-data.
struct Seed {
  std::string meta_data;
  std::string user_data;
  std::string vendor_data;  // may be empty; it is still served (a 404 costs cloud-init 10 s)
};

struct SeedRequest {
  std::string instance_id;  // cloud-init's instance-id: unique per created instance
  std::string hostname;     // local-hostname (garm's instance name)
  GuestEndpoints endpoints;
  GuestDevices devices = {};
  /// The host's registry mirror as guests reach it ("http://<address>:<port>"); empty: none.
  std::string mirror_url = "";
};

/// meta-data, user-data (cloud-config for Linux, cloudbase-init PowerShell for Windows) and
/// vendor-data for one instance.
Seed render_seed(const wire::BootstrapInstance& bootstrap, const SeedRequest& request);

/// NoCloud meta-data: instance-id and local-hostname, as YAML.
std::string render_meta_data(std::string_view instance_id, std::string_view hostname);

/// The script the guest runs to become a runner: garm's `runner_install_template` (base64,
/// garm's wrapper) with garm's URLs replaced by `endpoints`, or the built-in installer when
/// the bootstrap has none.
std::string install_script(const wire::BootstrapInstance& bootstrap,
                           const GuestEndpoints& endpoints);

/// `#cloud-config` user-data as garm-provider-common's GetCloudInitConfig builds it, running
/// `install_script` as the runner user.
std::string render_linux_cloud_config(const wire::BootstrapInstance& bootstrap,
                                      std::string_view install_script,
                                      const RunnerPrefetch& prefetch = {},
                                      const GuestDevices& devices = {},
                                      const std::string& mirror_url = "");

/// Early in boot: Docker's, podman's and containerd's mirror settings for docker.io pointing at
/// `mirror_url` (http), for whichever of them the image has; an image's own daemon.json is kept
/// (the mirror added to it). A cloud-init bootcmd entry.
nlohmann::ordered_json registry_mirror_bootcmd(const std::string& mirror_url);

/// `#ps1_sysnative` user-data for cloudbase-init that performs the same steps.
std::string render_windows_user_data(const wire::BootstrapInstance& bootstrap,
                                     std::string_view install_script);

/// The built-in installers, used when garm sent no `runner_install_template`: pick the tool for
/// the guest's OS and arch, download it, verify `sha256_checksum`, register with JIT
/// credentials or a registration token from the metadata endpoints, install the service, and
/// report each step, then `idle` (or `failed` with the reason), through the callback endpoint.
std::string builtin_linux_install_script(const wire::BootstrapInstance& bootstrap,
                                         const GuestEndpoints& endpoints);
std::string builtin_windows_install_script(const wire::BootstrapInstance& bootstrap,
                                           const GuestEndpoints& endpoints);

/// garm-provider-common's util.GetTools: the first tool whose os and architecture match the
/// guest's (garm or GitHub spelling: linux/linux, windows/win, amd64/x64, arm64/arm64, arm/arm).
/// Throws UserDataError when there is none.
const wire::RunnerApplicationDownload& select_tool(const wire::BootstrapInstance& bootstrap);

/// Replaces garm's callback and metadata URLs (with or without a trailing slash) and the
/// runner's download URL by the guest endpoints in a script garm rendered. Used on the wrapper
/// here and on the install script the relay passes back.
std::string rewrite_garm_urls(std::string_view text, const GarmUrls& garm,
                              const GuestEndpoints& endpoints);

/// The URLs of `bootstrap` that rewrite_garm_urls replaces for `endpoints`: the tool's download
/// URL only when the endpoints have a runner archive URL.
GarmUrls garm_urls_of(const wire::BootstrapInstance& bootstrap, const GuestEndpoints& endpoints);

/// garm's callback URL without trailing slashes and without a trailing `/status`: the base that
/// `/status` and `/system-info/` are appended to (garm's scripts strip it the same way).
std::string callback_base(std::string_view callback_url);

/// What a warm guest's generic script needs: where the agent is, its own token (not garm's),
/// and the runner archive to unpack ahead of time (empty: none).
struct WarmGuestValues {
  std::string agent_url;
  std::string token;
  std::string archive_url;
  std::string archive_sha256;
};

/// The install script of a warm guest's seed (run as the runner user, like every install
/// script): unpack the runner archive from the agent's cache (bytes only: nothing of it runs
/// before the guest is bound), report ready to the agent, wait for the assignment and run it
/// as root.
std::string warm_guest_script(const WarmGuestValues& values);

/// The last line of every assignment: a guest runs only one it received whole.
inline constexpr std::string_view kAssignmentEnd = "# end of garm-edge assignment";

/// The assignment a warm guest runs as root once it is bound to garm's instance: what
/// cloud-init does for a cold guest from the bootstrap (hostname, apt proxy, extra packages,
/// CA bundle, SSH keys, pre-install scripts), then `install_script` as the runner user. A
/// runner unpacked while warming stays only if its archive is `wanted_runner_sha256`, the one
/// garm asks for (empty: none is kept); only then do its dependencies get installed. A failing
/// step reports `failed` to garm through `endpoints`' callback URL with garm's token.
std::string render_linux_assignment(const wire::BootstrapInstance& bootstrap,
                                    const GuestEndpoints& endpoints,
                                    std::string_view install_script,
                                    std::string_view wanted_runner_sha256);

/// The assignment as the agent hands it out: with the agent's clock (Unix seconds) on its
/// second line, read when it is served, and `fresh_entropy` (random, new for each answer) on
/// its third. A guest restored from a saved state steps its clock to it, renews its DHCP lease
/// when it was more than a few seconds behind, and reseeds its CRNG with the entropy mixed in.
std::string assignment_at(std::string_view assignment, std::chrono::system_clock::time_point now,
                          std::string_view fresh_entropy);

/// Quoting for the places values cross into.
std::string shell_quote(std::string_view value);       // POSIX sh single quotes
std::string powershell_quote(std::string_view value);  // PowerShell single-quoted string
/// Block-style YAML where every string is a double-quoted scalar with YAML escapes.
std::string to_yaml(const nlohmann::ordered_json& document);

}  // namespace garm_edge::userdata
