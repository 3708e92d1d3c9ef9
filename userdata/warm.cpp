// Warm guests: the generic script a guest booted ahead of demand runs from its seed, and the
// assignment it runs once the agent binds it to garm's instance, which does as root what
// cloud-init does for a cold guest from garm's bootstrap.

#include <cstdio>
#include <string>

#include "common/text.hpp"
#include "userdata/internal.hpp"
#include "wire/base64.hpp"

namespace garm_edge::userdata {
namespace {

using detail::assign_shell;
using detail::write_file;

constexpr std::string_view kWarmBody = R"bash(
auth_header() { printf 'Authorization: Bearer %s\n' "$WARM_TOKEN"; }

# The generic part: the runner archive from the agent's cache, unpacked where garm's install
# script looks for it ("using cached runner"). Without it, the install script downloads it.
# Bytes only: nothing of the archive runs before the guest is bound to garm's instance (its
# installdependencies.sh runs in the assignment, as root, once the archive is the one asked for).
if [ -n "$ARCHIVE_URL" ] && [ ! -x "$HOME/actions-runner/config.sh" ] &&
  fetch_runner_archive "$ARCHIVE_URL" "$ARCHIVE_SHA256" "$HOME/actions-runner"; then
  printf '%s\n' "$ARCHIVE_SHA256" > "$HOME/.garm-edge-runner-archive"
fi

until curl -fsS -o /dev/null -X POST --header @<(auth_header) --url "$AGENT_URL/warm/ready"; do
  sleep 2
done
assignment=$(mktemp)  # 0600: it will hold garm's secrets
# Only a whole one: curl must succeed and the script must end with its last line. The agent
# holds each ask until the guest is bound (or 30 s pass), through a save too: a restored guest
# gets its assignment on the connection it has, starting nothing. Keepalive probes find within
# seconds of a restore a connection the agent lost meanwhile (it restarted).
until code=$(curl -fsS --max-time 90 --keepalive-time 2 -o "$assignment" -w '%{http_code}' \
  --header @<(auth_header) --url "$AGENT_URL/warm/assignment?wait=30") && [ "$code" = 200 ] &&
  [ "$(tail -n 1 "$assignment")" = "$ASSIGNMENT_END" ]; do
  sleep 1
done
exec sudo /bin/bash "$assignment"
)bash";

/// A guest restored from its saved state slept for as long as it was saved: its clock is that
/// far behind (GitHub refuses a runner's tokens on a stale clock), and its DHCP lease may have
/// run out. AGENT_TIME is the agent's clock when it served the assignment. Its CRNG state is
/// as old as the save: it is reseeded with AGENT_ENTROPY (fresh bytes of the agent's, mixed in,
/// never replacing) whether or not its kernel has the vmgenid driver, which Debian 12's cloud
/// kernel has not.
constexpr std::string_view kAfterSleep = R"bash(renew_dhcp_lease() {
  local dev
  dev=$(ip -4 route show default | awk '{print $5; exit}')
  [ -n "$dev" ] || return 0
  if command -v networkctl >/dev/null && systemctl -q is-active systemd-networkd; then
    networkctl renew "$dev"
  elif command -v dhclient >/dev/null; then
    # Without releasing the lease: the new client asks for the same (reserved) address, which
    # the guest keeps meanwhile, so nothing waits for the answer (-nw).
    dhclient -x -pf "/run/dhclient.$dev.pid" 2>/dev/null || true
    dhclient -4 -nw -pf "/run/dhclient.$dev.pid" -lf "/var/lib/dhcp/dhclient.$dev.leases" "$dev"
  fi
}
if [ -n "${AGENT_TIME:-}" ]; then
  # The agent's time then, plus what passed here since (sudo and bash start slowly under TCG).
  agent_now=$(awk -v a="$AGENT_TIME" -v r="${RECEIVED_AT:-}" -v n="$(date -u +%s.%N)" \
    'BEGIN { printf "%.3f", a + (r == "" ? 0 : n - r) }')
  behind=$(( ${agent_now%.*} - $(date -u +%s) ))
  date -u -s "@$agent_now" >/dev/null || true
  if [ "${behind#-}" -gt 5 ]; then
    renew_dhcp_lease || echo "garm-edge: the DHCP lease was not renewed" >&2
  fi
fi
if [ -n "${AGENT_ENTROPY:-}" ]; then
  printf '%s' "$AGENT_ENTROPY" > /dev/urandom || true
  # RNDRESEEDCRNG: the CRNG reseeds from the input pool now, not at its next interval (perl:
  # Essential in Debian, and quicker to start than python3 on a guest just restored).
  if perl -e 'open(my $f, ">", "/dev/urandom") or exit 1; ioctl($f, 0x5207, 0) or exit 1' 2>/dev/null; then
    echo "garm-edge: CRNG reseeded with the agent's entropy" > /dev/kmsg || true
  fi
fi
)bash";

/// Reports a failed step to garm (through the agent's relay) before the script stops.
constexpr std::string_view kFailureTrap = R"bash(report_failure() {
  curl -fsS --retry 3 --retry-delay 2 -o /dev/null -X POST -H 'Content-Type: application/json' \
    --header @<(printf 'Authorization: Bearer %s\n' "$BEARER_TOKEN") \
    -d "{\"status\": \"failed\", \"message\": \"the warm guest's assignment failed at line $1\"}" \
    --url "$CALLBACK_URL/status" || true
}
trap 'report_failure $LINENO' ERR
)bash";

void add_ssh_keys(std::string& script, const wire::BootstrapInstance& bootstrap) {
  const auto keys = detail::checked_ssh_keys(bootstrap);
  if (keys.empty()) {
    return;
  }
  std::string lines;
  for (const auto& key : keys) {
    lines += key + "\n";
  }
  script += "install -d -m 0700 -o runner -g runner /home/runner/.ssh\n";
  write_file(script, "/home/runner/.ssh/authorized_keys.garm-edge", lines, "0600");
  script +=
      "cat /home/runner/.ssh/authorized_keys.garm-edge >> /home/runner/.ssh/authorized_keys\n"
      "rm -f /home/runner/.ssh/authorized_keys.garm-edge\n"
      "chown runner:runner /home/runner/.ssh/authorized_keys\n"
      "chmod 0600 /home/runner/.ssh/authorized_keys\n";
}

void add_proxy_and_packages(std::string& script, const wire::BootstrapInstance& bootstrap) {
  const auto& proxy = detail::checked_proxy_config(bootstrap);
  if (!proxy.http_proxy.empty() || !proxy.https_proxy.empty()) {
    script += "sh -c " + shell_quote(detail::kAptProxyScript) + " garm-edge-apt-proxy " +
              shell_quote(detail::kAptProxyConfig) + " " + shell_quote(proxy.http_proxy) + " " +
              shell_quote(proxy.https_proxy) + "\n";
  }
  const auto options =
      detail::effective_user_data_options(bootstrap, detail::parse_extra_specs(bootstrap));
  const auto packages = options.extra_packages.value_or(std::vector<std::string>{});
  if (packages.empty()) {
    return;
  }  // A guest that waited for hours may meet apt-daily holding the lock: wait for it.
  script +=
      "DEBIAN_FRONTEND=noninteractive apt-get -q -o DPkg::Lock::Timeout=600 update >/dev/null\n"
      "DEBIAN_FRONTEND=noninteractive apt-get -q -o DPkg::Lock::Timeout=600 install -y";
  for (const auto& name : packages) {
    if (name.empty() || name.front() == '-') {
      throw UserDataError("extra_packages: \"" + name.substr(0, 64) + "\" is not a package name");
    }
    script += " " + shell_quote(name);
  }
  script += " >/dev/null\n";
}

void add_pre_install_scripts(std::string& script, const wire::BootstrapInstance& bootstrap) {
  const auto specs = detail::parse_extra_specs(bootstrap);
  if (specs.pre_install_scripts.empty()) {
    return;
  }
  script += "install -d -m 0700 /garm-pre-install\n";
  for (const auto& [name, content] : specs.pre_install_scripts) {
    const auto path = "/garm-pre-install/" + name;
    write_file(script, path, content, "0755");
    script += shell_quote(path) + "\n";
  }
  script += "rm -rf /garm-pre-install\n";
}

}  // namespace

std::string warm_guest_script(const WarmGuestValues& values) {
  std::string script =
      "#!/bin/bash\n"
      "# garm-edge warm guest: the generic part, then wait for an assignment from the agent.\n"
      "set -uo pipefail\n";
  assign_shell(script, "AGENT_URL", detail::without_trailing_slashes(values.agent_url));
  assign_shell(script, "WARM_TOKEN", values.token);
  assign_shell(script, "ARCHIVE_URL", values.archive_url);
  assign_shell(script, "ARCHIVE_SHA256", values.archive_sha256);
  assign_shell(script, "ASSIGNMENT_END", kAssignmentEnd);
  script += detail::kFetchRunnerArchive;
  script += kWarmBody;
  return script;
}

std::string render_linux_assignment(const wire::BootstrapInstance& bootstrap,
                                    const GuestEndpoints& endpoints,
                                    std::string_view install_script,
                                    std::string_view wanted_runner_sha256) {
  std::string script =
      "#!/bin/bash\n"
      "# garm-edge: this warm guest is now garm's instance; run once, as root.\n"
      "set -Eeuo pipefail  # -E: the ERR trap reports failures inside functions too\n"
      "# When it arrived (curl wrote it), on the guest's clock: AGENT_TIME is that moment.\n"
      "RECEIVED_AT=$(stat -c %.9Y \"$0\" 2>/dev/null || true)\n"
      "rm -f \"$0\"  # it holds garm's token\n"
      "umask 022\n";
  assign_shell(script, "CALLBACK_URL", callback_base(endpoints.callback_url));
  assign_shell(script, "BEARER_TOKEN", bootstrap.instance_token);
  script += kAfterSleep;
  script += kFailureTrap;
  const auto name = shell_quote(bootstrap.name);
  script += "hostnamectl set-hostname " + name + " 2>/dev/null || true\n";
  // sudo looks the host name up: keep /etc/hosts in step, as cloud-init's update_etc_hosts.
  script +=
      "{ grep -v '^127\\.0\\.1\\.1[[:space:]]' /etc/hosts || true; printf '127.0.1.1 %s\\n' " +
      name + "; } > /etc/hosts.garm-edge && mv /etc/hosts.garm-edge /etc/hosts\n";
  add_proxy_and_packages(script, bootstrap);
  script += detail::ca_certificates_steps(bootstrap);
  add_ssh_keys(script, bootstrap);
  add_pre_install_scripts(script, bootstrap);
  // A runner unpacked while warming is kept only if it is the one garm asks for; only then,
  // bound, does anything of it run: its dependencies, as the install script would have
  // installed them after unpacking (it skips that for a runner it finds unpacked).
  script += "if [ \"$(cat /home/runner/.garm-edge-runner-archive 2>/dev/null || true)\" != " +
            shell_quote(wanted_runner_sha256.empty() ? "none" : wanted_runner_sha256) +
            " ]; then rm -rf /home/runner/actions-runner; fi\n";
  script += std::string(detail::kKeptRunnerDependencies);
  write_file(script, "/install_runner.sh", install_script, "0755");
  script += "su -l -c /install_runner.sh runner\nrm -f /install_runner.sh\n";
  script += std::string(kAssignmentEnd) + "\n";
  return script;
}

std::string assignment_at(std::string_view assignment, std::chrono::system_clock::time_point now,
                          std::string_view fresh_entropy) {
  const auto millis =
      std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count();
  char time_line[64];
  std::snprintf(time_line, sizeof time_line, "AGENT_TIME=%lld.%03lld\n",
                static_cast<long long>(millis / 1000), static_cast<long long>(millis % 1000));
  std::string lines = time_line;
  assign_shell(lines, "AGENT_ENTROPY", fresh_entropy);
  const auto first_line = assignment.find('\n');
  if (first_line == std::string_view::npos) {
    return std::string(assignment);
  }
  return concat({assignment.substr(0, first_line + 1), lines, assignment.substr(first_line + 1)});
}

}  // namespace garm_edge::userdata
