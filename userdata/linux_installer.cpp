// The built-in Linux installer: garm's GitHub Linux install flow (contract §3.5) as one bash
// script, plus a sha256 check of the runner archive that garm's own templates skip. Bootstrap
// values appear only in the assignment block at the top, each through shell_quote; the body
// below is fixed text that reads them as "$VAR".

#include <string>

#include "userdata/internal.hpp"

namespace garm_edge::userdata {
namespace {

constexpr std::string_view kHeader = R"bash(#!/bin/bash
# Installs a GitHub Actions runner for garm: garm-edge's built-in installer, used when garm sent
# no runner_install_template. Runs as the runner user, with passwordless sudo.
set -Eeuo pipefail
)bash";

/// Opens the values block. shellcheck's hints about quotes, backslashes and `$(...)` inside
/// single quotes describe exactly what quoting makes inert here, so they are off for the block.
constexpr std::string_view kBeginValues = R"bash(
# garm's values, each single-quoted: nothing in them is expanded or run.
# shellcheck disable=SC1003,SC1112,SC2016
{
)bash";

/// Closes the values block; everything after it is the same for every instance.
constexpr std::string_view kEndOfShellValues = "}\n# --- end of bootstrap values ---\n";

constexpr std::string_view kBody = R"bash(
RUNNER_DIR="$HOME/actions-runner"
CURRENT_STEP='starting'
WORK_DIR=''
JIT_SERVICE_NAME=''

# JSON string literal of $1: backslash, quote and control characters escaped. Messages can
# carry garm's values (the download URL), so nothing is sent unescaped.
json_string() {
  local LC_ALL=C value=$1
  local backslash="\\" quote='"'
  value=${value//"$backslash"/"$backslash$backslash"}
  value=${value//"$quote"/"$backslash$quote"}
  value=${value//$'\n'/"${backslash}n"}
  value=${value//$'\r'/"${backslash}r"}
  value=${value//$'\t'/"${backslash}t"}
  value=${value//[[:cntrl:]]/ }
  printf '"%s"' "$value"
}

json_number_or_null() {
  if [[ $1 =~ ^[0-9]+$ ]]; then printf '%s' "$1"; else printf 'null'; fi
}

# curl against garm's endpoints. The token goes in a header file, not on the command line,
# where any local user could read it.
curl_garm() {
  curl --silent --show-error --fail --retry 5 --retry-delay 5 --retry-connrefused \
    --header @<(printf 'Authorization: Bearer %s\n' "$BEARER_TOKEN") "$@"
}

send_status() {
  local status=$1 message=$2 agent_id=${3:-} body
  body=$(printf '{"status":%s,"message":%s,"agent_id":%s}' "$(json_string "$status")" \
    "$(json_string "$message")" "$(json_number_or_null "$agent_id")")
  echo "garm status $status: $message" >&2
  curl_garm -X POST -H 'Content-Type: application/json' --data-binary "$body" \
    --url "$CALLBACK_URL/status" >/dev/null || echo "could not report status $status to garm" >&2
}

report_step() {
  CURRENT_STEP=$1
  send_status installing "$1"
}

fail() {
  trap - ERR
  send_status failed "$1"
  exit 1
}

on_error() {
  local exit_code=$1 line=$2
  # In a command substitution only leave it; the caller's own trap reports the failure once.
  if [ "$BASHPID" != "$$" ]; then exit "$exit_code"; fi
  fail "runner installation failed while $CURRENT_STEP (exit code $exit_code at line $line)"
}

cleanup() {
  if [ -n "$WORK_DIR" ]; then rm -rf "$WORK_DIR"; fi
}

export_proxy_environment() {
  if [ -n "$HTTP_PROXY_URL" ]; then export http_proxy="$HTTP_PROXY_URL" HTTP_PROXY="$HTTP_PROXY_URL"; fi
  if [ -n "$HTTPS_PROXY_URL" ]; then export https_proxy="$HTTPS_PROXY_URL" HTTPS_PROXY="$HTTPS_PROXY_URL"; fi
  if [ -n "$NO_PROXY_LIST" ]; then export no_proxy="$NO_PROXY_LIST" NO_PROXY="$NO_PROXY_LIST"; fi
}

fetch_metadata() {
  curl_garm --url "$METADATA_URL/$1" --output "$2"
}

fetch_metadata_text() {
  curl_garm --url "$METADATA_URL/$1"
}

# Without --fail, so that an error's body (the agent's cache says why it has no archive) can
# be reported; curl still retries 5xx answers.
download_runner() {
  local archive=$1 code
  report_step "downloading tools from $DOWNLOAD_URL"
  local -a options=(--silent --show-error --location --retry 5 --retry-delay 5
    --retry-connrefused --output "$archive" --write-out '%{http_code}' --url "$DOWNLOAD_URL")
  if [ -n "$TEMP_DOWNLOAD_TOKEN" ]; then
    code=$(curl "${options[@]}" --header @<(printf 'Authorization: Bearer %s\n' "$TEMP_DOWNLOAD_TOKEN")) || code=000
  else
    code=$(curl "${options[@]}") || code=000
  fi
  if [ "$code" != 200 ]; then
    fail "downloading the runner from $DOWNLOAD_URL failed (HTTP $code): $(head -c 300 "$archive" 2>/dev/null | tr -cd '[:print:]')"
  fi
}

verify_checksum() {
  local archive=$1 actual
  if [ -z "$SHA256_CHECKSUM" ]; then
    report_step "garm sent no sha256_checksum for $DOWNLOAD_URL; the archive is not verified"
    return 0
  fi
  report_step "verifying the sha256 checksum of the runner archive"
  if ! printf '%s  %s\n' "$SHA256_CHECKSUM" "$archive" | sha256sum --check --status; then
    actual=$(sha256sum "$archive" | cut -d ' ' -f 1)
    fail "sha256 checksum mismatch for $DOWNLOAD_URL: expected $SHA256_CHECKSUM, got $actual"
  fi
}

install_dependencies() {
  local attempt
  for attempt in 1 2 3 4 5; do
    if sudo ./bin/installdependencies.sh; then return 0; fi
    send_status installing "installdependencies.sh failed (attempt $attempt of 5)"
    sleep 15
  done
  send_status installing "installdependencies.sh kept failing; continuing without it"
}

install_runner_files() {
  if [ -x "$RUNNER_DIR/config.sh" ]; then
    report_step "using cached runner found in $RUNNER_DIR"
    return 0
  fi
  local archive="$WORK_DIR/actions-runner.tar.gz"
  download_runner "$archive"
  verify_checksum "$archive"
  report_step "extracting runner"
  mkdir -p "$RUNNER_DIR"
  tar -xf "$archive" -C "$RUNNER_DIR"
  cd "$RUNNER_DIR"
  install_dependencies
}

configure_jit() {
  report_step "configuring runner with JIT credentials"
  fetch_metadata credentials/runner .runner
  fetch_metadata credentials/credentials .credentials
  fetch_metadata credentials/credentials_rsaparams .credentials_rsaparams
  chmod 0600 .runner .credentials .credentials_rsaparams
  JIT_SERVICE_NAME=$(fetch_metadata_text system/service-name)
  # The name becomes a path under /etc/systemd/system.
  if [[ ! $JIT_SERVICE_NAME =~ ^[A-Za-z0-9][A-Za-z0-9@._:-]*$ ]]; then
    fail "garm sent an unusable service name: $JIT_SERVICE_NAME"
  fi
  printf '%s.service\n' "$JIT_SERVICE_NAME" >.service
  fetch_metadata 'systemd/unit-file?runAsUser=runner' "$WORK_DIR/runner.service"
  cp ./bin/runsvc.sh ./runsvc.sh
  chmod 0755 ./runsvc.sh
  sudo install -m 0644 "$WORK_DIR/runner.service" "/etc/systemd/system/$JIT_SERVICE_NAME.service"
  if command -v restorecon >/dev/null; then
    sudo restorecon "/etc/systemd/system/$JIT_SERVICE_NAME.service" || true
  fi
  sudo systemctl daemon-reload
  sudo systemctl enable "$JIT_SERVICE_NAME.service"
}

configure_with_registration_token() {
  local token attempt
  report_step "configuring runner"
  token=$(fetch_metadata_text runner-registration-token/)
  local -a config_options=(--unattended --url "$REPO_URL" --token "$token" --name "$RUNNER_NAME"
    --labels "$RUNNER_LABELS" --no-default-labels --ephemeral)
  if [ -n "$RUNNER_GROUP" ]; then config_options+=(--runnergroup "$RUNNER_GROUP"); fi
  for attempt in 1 2 3; do
    if ./config.sh "${config_options[@]}"; then
      sudo ./svc.sh install runner
      return 0
    fi
    send_status installing "config.sh failed (attempt $attempt of 3)"
    ./config.sh remove --token "$token" || true
    sleep 10
  done
  fail "config.sh could not register the runner"
}

# The runner reads .env into its environment, so jobs use the proxy too.
write_proxy_environment() {
  if [ -n "$HTTP_PROXY_URL" ]; then printf '%s=%s\n' http_proxy "$HTTP_PROXY_URL" HTTP_PROXY "$HTTP_PROXY_URL" >>.env; fi
  if [ -n "$HTTPS_PROXY_URL" ]; then printf '%s=%s\n' https_proxy "$HTTPS_PROXY_URL" HTTPS_PROXY "$HTTPS_PROXY_URL" >>.env; fi
  if [ -n "$NO_PROXY_LIST" ]; then printf '%s=%s\n' no_proxy "$NO_PROXY_LIST" NO_PROXY "$NO_PROXY_LIST" >>.env; fi
}

start_runner_service() {
  report_step "starting runner service"
  if [ "$USE_JIT_CONFIG" = true ]; then
    sudo systemctl start "$JIT_SERVICE_NAME.service"
  else
    sudo ./svc.sh start
  fi
}

runner_agent_id() {
  if [ -f .runner ]; then
    sed -n '/"agentId"/{s/.*"agentId"[[:space:]]*:[[:space:]]*\([0-9][0-9]*\).*/\1/p;q;}' .runner
  fi
}

send_system_info() {
  local agent_id=$1 os_name='' os_version='' body
  if [ -r /etc/os-release ]; then
    # shellcheck source=/dev/null
    os_name=$(. /etc/os-release && printf '%s' "${NAME:-}")
    # shellcheck source=/dev/null
    os_version=$(. /etc/os-release && printf '%s' "${VERSION_ID:-}")
  fi
  body=$(printf '{"os_name":%s,"os_version":%s,"agent_id":%s}' "$(json_string "$os_name")" \
    "$(json_string "$os_version")" "$(json_number_or_null "$agent_id")")
  curl_garm -X POST -H 'Content-Type: application/json' --data-binary "$body" \
    --url "$CALLBACK_URL/system-info/" >/dev/null || echo "could not send system info to garm" >&2
}

main() {
  local agent_id
  trap 'on_error $? $LINENO' ERR
  trap cleanup EXIT
  export_proxy_environment
  WORK_DIR=$(mktemp -d)
  install_runner_files
  cd "$RUNNER_DIR"
  if [ "$USE_JIT_CONFIG" = true ]; then
    configure_jit
  else
    configure_with_registration_token
  fi
  write_proxy_environment
  start_runner_service
  agent_id=$(runner_agent_id)
  send_system_info "$agent_id"
  send_status idle "runner successfully installed" "$agent_id"
}

main "$@"
)bash";

void assign_in_function(std::string& script, std::string_view name, std::string_view value) {
  script.append("  ").append(name).append("=").append(shell_quote(value)).append("\n");
}

}  // namespace

std::string builtin_linux_install_script(const wire::BootstrapInstance& bootstrap,
                                         const GuestEndpoints& endpoints) {
  detail::check_endpoint_urls(endpoints);
  const auto& tool = select_tool(bootstrap);
  const auto& proxy = detail::checked_proxy_config(bootstrap);
  const auto options =
      detail::effective_user_data_options(bootstrap, detail::parse_extra_specs(bootstrap));

  std::string script(kHeader);
  if (options.enable_boot_debug) {
    script += "set -x  # enable_boot_debug: the trace shows the tokens below\n";
  }
  script += kBeginValues;
  assign_in_function(script, "CALLBACK_URL", callback_base(endpoints.callback_url));
  assign_in_function(script, "METADATA_URL",
                     detail::without_trailing_slashes(endpoints.metadata_url));
  assign_in_function(script, "BEARER_TOKEN", bootstrap.instance_token);
  assign_in_function(script, "REPO_URL", bootstrap.repo_url);
  assign_in_function(script, "RUNNER_NAME", bootstrap.name);
  assign_in_function(script, "RUNNER_LABELS", detail::joined_labels(bootstrap));
  assign_in_function(script, "RUNNER_GROUP", bootstrap.github_runner_group);
  // The agent's cache when it has one (the guest still verifies the checksum below).
  assign_in_function(script, "DOWNLOAD_URL",
                     endpoints.runner_archive_url.empty() ? detail::required_download_url(tool)
                                                          : endpoints.runner_archive_url);
  // GHES's token is for GHES: the agent's cache needs none.
  assign_in_function(
      script, "TEMP_DOWNLOAD_TOKEN",
      endpoints.runner_archive_url.empty() ? tool.temp_download_token.value_or("") : "");
  assign_in_function(script, "SHA256_CHECKSUM", detail::normalized_sha256(tool));
  assign_in_function(script, "USE_JIT_CONFIG", bootstrap.jit_config_enabled ? "true" : "false");
  assign_in_function(script, "HTTP_PROXY_URL", proxy.http_proxy);
  assign_in_function(script, "HTTPS_PROXY_URL", proxy.https_proxy);
  assign_in_function(script, "NO_PROXY_LIST", proxy.no_proxy);
  script += kEndOfShellValues;
  script += kBody;
  return script;
}

}  // namespace garm_edge::userdata
