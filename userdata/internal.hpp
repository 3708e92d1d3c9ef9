#pragma once

// Helpers shared by the userdata sources; not part of the library's interface.

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "userdata/userdata.hpp"
#include "wire/bootstrap.hpp"

namespace garm_edge::userdata::detail {

/// The extra_specs keys that shape user-data, decoded and type-checked. garm's own keys
/// (garm-provider-common cloudconfig.GetSpecs) and garm-edge's (as garm-provider-lxd reads them).
struct ExtraSpecs {
  std::optional<std::string> runner_install_template;      // decoded script
  std::map<std::string, std::string> pre_install_scripts;  // file name -> decoded script
  std::map<std::string, std::string> extra_context;        // for custom templates only
  std::optional<bool> enable_boot_debug;                   // garm-edge's own
  std::optional<bool> disable_updates;                     // garm-edge's own
  std::vector<std::string> extra_packages;                 // garm-edge's own
};

/// Throws UserDataError naming the offending `extra_specs.*` field.
ExtraSpecs parse_extra_specs(const wire::BootstrapInstance& bootstrap);

/// user_data_options with garm-edge's extra specs applied on top (they are per pool, garm's
/// options per controller): extra packages are appended, booleans set when the spec says so.
wire::UserDataOptions effective_user_data_options(const wire::BootstrapInstance& bootstrap,
                                                  const ExtraSpecs& specs);

/// Base URLs without trailing slashes (the callback base: userdata.hpp).
std::string without_trailing_slashes(std::string_view url);

/// The PEM certificates of a CA bundle, each `-----BEGIN CERTIFICATE-----` ... `END` block.
/// Throws UserDataError when there is none or a block is not closed.
std::vector<std::string> pem_certificates(std::string_view bundle);

/// The base64 body of one PEM certificate block (line breaks removed).
std::string pem_body(std::string_view certificate);

/// A PowerShell expression evaluating to `value`: a single-quoted literal for ASCII text, else
/// UTF-8 decoded from base64. Windows PowerShell 5.1 reads a BOM-less script in the ANSI code
/// page, where bytes of a UTF-8 sequence can turn into quote characters; ASCII cannot.
std::string powershell_string(std::string_view value);

/// The bootstrap's proxy settings. Throws UserDataError unless each is plain text without quotes
/// or backslashes: they land in apt's quoted strings and in the runner's one-per-line .env.
const wire::ProxyConfig& checked_proxy_config(const wire::BootstrapInstance& bootstrap);

/// The labels joined with ",", as the runner's --labels option takes them.
std::string joined_labels(const wire::BootstrapInstance& bootstrap);

/// Throws UserDataError unless both guest endpoints are http(s) URLs: they become curl and
/// Invoke-WebRequest arguments, where anything else could read as an option or a local file.
void check_endpoint_urls(const GuestEndpoints& endpoints);

/// The bootstrap's ssh keys. Throws UserDataError for one with a line break or another control
/// character: each key becomes one line of an authorized_keys file, so it could add more keys.
std::vector<std::string> checked_ssh_keys(const wire::BootstrapInstance& bootstrap);

/// A GitHub runner download's sha256 in lower case; empty when garm sent none. Throws
/// UserDataError when it is not 64 hex digits.
std::string normalized_sha256(const wire::RunnerApplicationDownload& tool);

/// The tool's download URL; throws UserDataError when it has none.
std::string required_download_url(const wire::RunnerApplicationDownload& tool);

/// `NAME='value'` as a line of a bash script.
void assign_shell(std::string& script, std::string_view name, std::string_view value);

/// Shell lines that write `content` to `path` through base64, so no byte of it is ever shell
/// syntax, and set its mode.
void write_file(std::string& script, std::string_view path, std::string_view content,
                std::string_view mode);

/// Shell lines (bash, as root) that make the bootstrap's CA bundle trusted the way
/// update-ca-certificates would, adding to the bundle instead of rebuilding it; empty without
/// a bundle.
std::string ca_certificates_steps(const wire::BootstrapInstance& bootstrap);

/// The kept runner's dependencies, as root, now that the guest is garm's instance. A failure
/// is no failure of the assignment, as for the install script's own attempt.
inline constexpr std::string_view kKeptRunnerDependencies =
    "if [ -x /home/runner/actions-runner/bin/installdependencies.sh ]; then\n"
    "  (cd /home/runner/actions-runner && ./bin/installdependencies.sh) || true\n"
    "fi\n";

/// bash: fetch_runner_archive URL SHA256 DIRECTORY downloads the runner archive, verifies it
/// and unpacks it into DIRECTORY; on any failure nothing is left and it returns 1. It gives up
/// within 15 minutes (a try ends within 10, and none starts after 5). The archive waits
/// beside DIRECTORY, not in /tmp, which may be a tmpfs in the guest's memory.
inline constexpr std::string_view kFetchRunnerArchive = R"bash(fetch_runner_archive() {
  local archive
  archive=$(mktemp -p "$(dirname "$3")")
  if curl -fsS --retry 10 --retry-delay 2 --retry-connrefused --max-time 600 \
    --retry-max-time 300 -o "$archive" --url "$1" &&
    printf '%s  %s\n' "$2" "$archive" | sha256sum --check --status &&
    mkdir -p "$3" && tar -xzf "$archive" -C "$3"; then
    rm -f "$archive"
    return 0
  fi
  rm -rf "$3" "$archive"
  return 1
}
)bash";

inline constexpr std::string_view kAptProxyConfig = "/etc/apt/apt.conf.d/95garm-edge-proxy";

/// Writes apt's proxy settings (file, http proxy, https proxy as $1-$3). The values arrive as
/// positional parameters, so the shell never parses them; printf's %s copies them into apt's
/// quoted strings, and checked_proxy_config has refused the quotes and backslashes those
/// cannot hold.
inline constexpr std::string_view kAptProxyScript = R"sh(set -eu
[ -d "${1%/*}" ] || exit 0
umask 022
{
  if [ -n "$2" ]; then printf 'Acquire::http::Proxy "%s";\n' "$2"; fi
  if [ -n "$3" ]; then printf 'Acquire::https::Proxy "%s";\n' "$3"; fi
} > "$1"
)sh";

}  // namespace garm_edge::userdata::detail
