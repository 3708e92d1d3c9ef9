#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "wire/enums.hpp"

namespace garm_edge::wire {

/// One entry of garm's `tools` list (go-github RunnerApplicationDownload; every field omitempty).
struct RunnerApplicationDownload {
  std::optional<std::string> os;
  std::optional<std::string> architecture;
  std::optional<std::string> download_url;
  std::optional<std::string> filename;
  std::optional<std::string> temp_download_token;
  std::optional<std::string> sha256_checksum;

  bool operator==(const RunnerApplicationDownload&) const = default;
};

struct UserDataOptions {
  bool disable_updates_on_boot = false;
  std::optional<std::vector<std::string>> extra_packages;
  bool enable_boot_debug = false;

  bool operator==(const UserDataOptions&) const = default;
};

struct ProxyConfig {
  std::string http_proxy;
  std::string https_proxy;
  std::string no_proxy;

  bool operator==(const ProxyConfig&) const = default;
};

/// garm-provider-common params.BootstrapInstance: what garm writes to CreateInstance's stdin.
/// Optional members are the Go nil slices and []byte values that garm serializes as `null`.
struct BootstrapInstance {
  std::string name;
  std::optional<std::vector<RunnerApplicationDownload>> tools;
  std::string repo_url;
  std::string callback_url;
  std::string metadata_url;
  std::string instance_token;
  std::optional<std::vector<std::string>> ssh_keys;
  /// A json.RawMessage with omitempty: absent when garm sent none, else the object as sent.
  std::optional<nlohmann::json> extra_specs;
  std::string github_runner_group;
  /// The decoded PEM bundle (a Go []byte, base64 on the wire).
  std::optional<std::string> ca_cert_bundle;
  std::optional<OsArch> arch;
  std::optional<OsType> os_type;
  std::string flavor;
  std::string image;
  std::optional<std::vector<std::string>> labels;
  std::string pool_id;
  UserDataOptions user_data_options;
  bool jit_config_enabled = false;
  ProxyConfig proxy_config;

  bool operator==(const BootstrapInstance&) const = default;
};

/// Parses a BootstrapInstance from garm's JSON. Throws WireError naming the offending field.
BootstrapInstance parse_bootstrap_instance(std::string_view json_text);
BootstrapInstance bootstrap_instance_from_json(const nlohmann::json& document);

/// Serializes exactly as garm does: declaration order, Go's null/omitempty rules.
nlohmann::ordered_json to_json(const BootstrapInstance& bootstrap);
nlohmann::ordered_json to_json(const RunnerApplicationDownload& tool);
/// One entry of `tools`; `path` names it in errors. Throws WireError.
RunnerApplicationDownload tool_from_json(const nlohmann::json& value, const std::string& path);

}  // namespace garm_edge::wire
