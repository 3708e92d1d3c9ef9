#include "wire/bootstrap.hpp"

#include "wire/base64.hpp"
#include "wire/json_fields.hpp"

namespace garm_edge::wire {
namespace {

using ordered_json = nlohmann::ordered_json;

ordered_json nullable_list(const std::optional<std::vector<std::string>>& items) {
  return items ? ordered_json(*items) : ordered_json(nullptr);
}

std::optional<std::vector<RunnerApplicationDownload>> tools_from_json(const ObjectReader& in) {
  const auto* value = in.find("tools");
  if (value == nullptr || value->is_null()) {
    return std::nullopt;
  }
  if (!value->is_array()) {
    throw WireError("tools", std::string("expected an array, got ") + value->type_name());
  }
  std::vector<RunnerApplicationDownload> tools;
  for (std::size_t i = 0; i < value->size(); ++i) {
    tools.push_back(tool_from_json((*value)[i], "tools[" + std::to_string(i) + "]"));
  }
  return tools;
}

std::optional<nlohmann::json> extra_specs_from_json(const ObjectReader& in) {
  const auto* value = in.find("extra_specs");
  if (value == nullptr || value->is_null()) {
    return std::nullopt;
  }
  if (!value->is_object()) {
    throw WireError("extra_specs",
                    std::string("expected a JSON object, got ") + value->type_name());
  }
  return *value;
}

UserDataOptions user_data_options_from_json(const ObjectReader& in) {
  const auto* value = in.find("user_data_options");
  if (value == nullptr || value->is_null()) {
    return {};
  }
  const ObjectReader options(*value, "user_data_options");
  return UserDataOptions{
      .disable_updates_on_boot = options.boolean("disable_updates_on_boot"),
      .extra_packages = options.string_list("extra_packages"),
      .enable_boot_debug = options.boolean("enable_boot_debug"),
  };
}

ProxyConfig proxy_config_from_json(const ObjectReader& in) {
  const auto* value = in.find("proxy_config");
  if (value == nullptr || value->is_null()) {
    return {};
  }
  const ObjectReader proxy(*value, "proxy_config");
  return ProxyConfig{
      .http_proxy = proxy.string_or_empty("http_proxy"),
      .https_proxy = proxy.string_or_empty("https_proxy"),
      .no_proxy = proxy.string_or_empty("no_proxy"),
  };
}

}  // namespace

RunnerApplicationDownload tool_from_json(const nlohmann::json& value, const std::string& path) {
  const ObjectReader in(value, path);
  RunnerApplicationDownload tool;
  tool.os = in.optional_string("os");
  tool.architecture = in.optional_string("architecture");
  tool.download_url = in.optional_string("download_url");
  tool.filename = in.optional_string("filename");
  tool.temp_download_token = in.optional_string("temp_download_token");
  tool.sha256_checksum = in.optional_string("sha256_checksum");
  return tool;
}

BootstrapInstance bootstrap_instance_from_json(const nlohmann::json& document) {
  const ObjectReader in(document, "");
  BootstrapInstance b;
  b.name = in.required_string("name");
  b.tools = tools_from_json(in);
  b.repo_url = in.string_or_empty("repo_url");
  b.callback_url = in.string_or_empty("callback-url");
  b.metadata_url = in.string_or_empty("metadata-url");
  b.instance_token = in.string_or_empty("instance-token");
  b.ssh_keys = in.string_list("ssh-keys");
  b.extra_specs = extra_specs_from_json(in);
  b.github_runner_group = in.string_or_empty("github-runner-group");
  b.ca_cert_bundle = in.base64_bytes("ca-cert-bundle");
  b.arch = in.enum_value<OsArch>("arch");
  b.os_type = in.enum_value<OsType>("os_type");
  b.flavor = in.required_string("flavor");
  b.image = in.required_string("image");
  b.labels = in.string_list("labels");
  b.pool_id = in.required_string("pool_id");
  b.user_data_options = user_data_options_from_json(in);
  b.jit_config_enabled = in.boolean("jit_config_enabled");
  b.proxy_config = proxy_config_from_json(in);
  return b;
}

BootstrapInstance parse_bootstrap_instance(std::string_view json_text) {
  return bootstrap_instance_from_json(parse_json_text(json_text, "bootstrap instance"));
}

ordered_json to_json(const RunnerApplicationDownload& tool) {
  ordered_json out = ordered_json::object();
  const auto put = [&out](const char* key, const std::optional<std::string>& value) {
    if (value) {
      out[key] = *value;
    }
  };
  put("os", tool.os);
  put("architecture", tool.architecture);
  put("download_url", tool.download_url);
  put("filename", tool.filename);
  put("temp_download_token", tool.temp_download_token);
  put("sha256_checksum", tool.sha256_checksum);
  return out;
}

ordered_json to_json(const BootstrapInstance& b) {
  ordered_json out = ordered_json::object();
  out["name"] = b.name;
  if (b.tools) {
    ordered_json tools = ordered_json::array();
    for (const auto& tool : *b.tools) {
      tools.push_back(to_json(tool));
    }
    out["tools"] = tools;
  } else {
    out["tools"] = nullptr;
  }
  out["repo_url"] = b.repo_url;
  out["callback-url"] = b.callback_url;
  out["metadata-url"] = b.metadata_url;
  out["instance-token"] = b.instance_token;
  out["ssh-keys"] = nullable_list(b.ssh_keys);
  if (b.extra_specs) {
    out["extra_specs"] = ordered_json::parse(b.extra_specs->dump());
  }
  out["github-runner-group"] = b.github_runner_group;
  out["ca-cert-bundle"] =
      b.ca_cert_bundle ? ordered_json(base64_encode(*b.ca_cert_bundle)) : ordered_json(nullptr);
  out["arch"] = b.arch ? std::string(to_string(*b.arch)) : std::string();
  out["os_type"] = b.os_type ? std::string(to_string(*b.os_type)) : std::string();
  out["flavor"] = b.flavor;
  out["image"] = b.image;
  out["labels"] = nullable_list(b.labels);
  out["pool_id"] = b.pool_id;
  out["user_data_options"] = {
      {"disable_updates_on_boot", b.user_data_options.disable_updates_on_boot},
      {"extra_packages", nullable_list(b.user_data_options.extra_packages)},
      {"enable_boot_debug", b.user_data_options.enable_boot_debug},
  };
  out["jit_config_enabled"] = b.jit_config_enabled;
  out["proxy_config"] = {
      {"http_proxy", b.proxy_config.http_proxy},
      {"https_proxy", b.proxy_config.https_proxy},
      {"no_proxy", b.proxy_config.no_proxy},
  };
  return out;
}

}  // namespace garm_edge::wire
