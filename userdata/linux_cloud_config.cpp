// #cloud-config user-data, shaped like garm-provider-common's GetCloudInitConfig (same keys,
// same order, same default user) so garm's install scripts find the guest they expect.

#include <algorithm>
#include <string>

#include "userdata/internal.hpp"
#include "wire/base64.hpp"

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

ordered_json ca_certs(const std::string& bundle) {
  std::string certificates;
  for (const auto& certificate : detail::pem_certificates(bundle)) {
    certificates += certificate + "\n";
  }
  // cloud-init 22.4's schema spells it ca_certs/remove_defaults; ca-certs is deprecated.
  return {{"remove_defaults", false}, {"trusted", ordered_json::array({certificates})}};
}

ordered_json proxy_bootcmd(const wire::ProxyConfig& proxy) {
  if (proxy.http_proxy.empty() && proxy.https_proxy.empty()) {
    return ordered_json::array();
  }
  return ordered_json::array(
      {ordered_json::array({"sh", "-c", detail::kAptProxyScript, "garm-edge-apt-proxy",
                            detail::kAptProxyConfig, proxy.http_proxy, proxy.https_proxy})});
}

void set_unless_empty(ordered_json& config, const char* key, ordered_json value) {
  if (!value.empty()) {
    config[key] = std::move(value);
  }
}

}  // namespace

std::string render_linux_cloud_config(const wire::BootstrapInstance& bootstrap,
                                      std::string_view install_script) {
  const auto specs = detail::parse_extra_specs(bootstrap);
  const auto options = detail::effective_user_data_options(bootstrap, specs);

  Commands commands;
  add_pre_install_scripts(commands, specs.pre_install_scripts);
  add_install_script(commands, install_script);

  ordered_json config;
  config["users"] = ordered_json::array({"default"});
  config["package_upgrade"] = !options.disable_updates_on_boot;
  set_unless_empty(config, "packages", packages(options));
  set_unless_empty(config, "ssh_authorized_keys", detail::checked_ssh_keys(bootstrap));
  config["system_info"] = system_info();
  config["runcmd"] = std::move(commands.runcmd);
  config["write_files"] = std::move(commands.write_files);
  if (bootstrap.ca_cert_bundle && !bootstrap.ca_cert_bundle->empty()) {  // Go: len() > 0
    config["ca_certs"] = ca_certs(*bootstrap.ca_cert_bundle);
  }
  set_unless_empty(config, "bootcmd", proxy_bootcmd(detail::checked_proxy_config(bootstrap)));
  return "#cloud-config\n" + to_yaml(config);
}

}  // namespace garm_edge::userdata
