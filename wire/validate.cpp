#include "wire/validate.hpp"

#include <algorithm>
#include <cctype>

#include "common/hex.hpp"
#include "common/text.hpp"
#include "wire/error.hpp"

namespace garm_edge::wire {
namespace {

bool is_alnum(char c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

/// Levels of arrays and objects, the value itself counted; stops counting past `limit`.
std::size_t depth_of(const nlohmann::json& value, std::size_t limit) {
  if (!value.is_structured() || limit == 0) {
    return value.is_structured() ? 1 : 0;
  }
  std::size_t deepest = 0;
  for (const auto& child : value) {
    deepest = std::max(deepest, depth_of(child, limit - 1));
  }
  return deepest + 1;
}

std::string length_problem(std::size_t size, std::size_t limit) {
  return "is " + std::to_string(size) + " bytes long; the limit is " + std::to_string(limit);
}

}  // namespace

bool is_http_url(std::string_view url) {
  const auto has_scheme = [url](std::string_view scheme) {  // schemes are case-insensitive
    return url.size() > scheme.size() &&
           std::equal(scheme.begin(), scheme.end(), url.begin(), [](char a, char b) {
             return a == std::tolower(static_cast<unsigned char>(b));
           });
  };
  return has_scheme("https://") || has_scheme("http://");
}

bool is_uuid(std::string_view value) {
  if (value.size() != 36) {
    return false;
  }
  for (std::size_t i = 0; i < value.size(); ++i) {
    const bool dash_position = i == 8 || i == 13 || i == 18 || i == 23;
    if (dash_position ? value[i] != '-' : !is_hex_digit(value[i])) {
      return false;
    }
  }
  return true;
}

void validate_instance_name(std::string_view name, const std::string& field) {
  if (name.empty()) {
    throw WireError(field, "must not be empty");
  }
  if (name.size() > Limits::kMaxInstanceName) {
    throw WireError(field, length_problem(name.size(), Limits::kMaxInstanceName));
  }
  if (!is_alnum(name.front())) {
    throw WireError(field, "must start with a letter or digit");
  }
  for (char c : name) {
    if (!is_alnum(c) && c != '-' && c != '_' && c != '.') {
      throw WireError(field, "may contain only letters, digits, '-', '_' and '.'");
    }
  }
  if (name.find("..") != std::string_view::npos) {
    throw WireError(field, "must not contain \"..\"");
  }
}

void validate_uuid(std::string_view value, const std::string& field) {
  if (!is_uuid(value)) {
    throw WireError(field, "must be a UUID (8-4-4-4-12 hexadecimal digits)");
  }
}

void validate_pool_id(std::string_view value, const std::string& field) {
  if (is_uuid(value)) {
    return;
  }
  constexpr std::size_t kUuidWithDash = 37;
  const bool pseudo_id = value.size() > kUuidWithDash &&
                         value[value.size() - kUuidWithDash] == '-' &&
                         is_uuid(value.substr(value.size() - 36));
  if (!pseudo_id) {
    throw WireError(field, "must be a pool UUID or a scale set ID \"<name>-<uuid>\"");
  }
  const auto prefix = value.substr(0, value.size() - kUuidWithDash);
  if (prefix.size() > Limits::kMaxPoolIdPrefix) {
    throw WireError(field,
                    "scale set name " + length_problem(prefix.size(), Limits::kMaxPoolIdPrefix));
  }
  if (!is_plain_text(prefix)) {
    throw WireError(field, "scale set name must be UTF-8 text without control characters");
  }
}

void validate_resource_name(std::string_view value, const std::string& field) {
  if (value.empty()) {
    throw WireError(field, "must not be empty");
  }
  if (value.size() > Limits::kMaxResourceName) {
    throw WireError(field, length_problem(value.size(), Limits::kMaxResourceName));
  }
  for (char c : value) {
    if (!is_alnum(c) && c != '-' && c != '_' && c != '.' && c != ':' && c != '@' && c != '+') {
      throw WireError(field, "may contain only letters, digits and - _ . : @ +");
    }
  }
  if (value.find("..") != std::string_view::npos || value.front() == '.') {
    throw WireError(field, "must not start with '.' or contain \"..\"");
  }
}

void validate_labels(const std::optional<std::vector<std::string>>& labels) {
  if (!labels) {
    return;
  }
  if (labels->size() > Limits::kMaxLabels) {
    throw WireError("labels", "has " + std::to_string(labels->size()) + " entries; the limit is " +
                                  std::to_string(Limits::kMaxLabels));
  }
  for (std::size_t i = 0; i < labels->size(); ++i) {
    const auto& label = (*labels)[i];
    const auto field = "labels[" + std::to_string(i) + "]";
    if (label.empty() || label.size() > Limits::kMaxLabelLength) {
      throw WireError(field, "must be 1 to " + std::to_string(Limits::kMaxLabelLength) + " bytes");
    }
    if (!is_plain_text(label) || label.find(',') != std::string::npos) {
      throw WireError(field, "must be UTF-8 text without control characters or commas");
    }
  }
}

void validate_extra_specs(const std::optional<nlohmann::json>& extra_specs) {
  if (!extra_specs) {
    return;
  }
  if (!extra_specs->is_object()) {
    throw WireError("extra_specs", "must be a JSON object");
  }
  const auto size = extra_specs->dump().size();
  if (size > Limits::kMaxExtraSpecsBytes) {
    throw WireError("extra_specs", length_problem(size, Limits::kMaxExtraSpecsBytes));
  }
  if (depth_of(*extra_specs, Limits::kMaxExtraSpecsDepth) > Limits::kMaxExtraSpecsDepth) {
    throw WireError("extra_specs", "is nested deeper than " +
                                       std::to_string(Limits::kMaxExtraSpecsDepth) + " levels");
  }
}

void validate_text(std::string_view value, const std::string& field) {
  if (!is_plain_text(value)) {
    throw WireError(field, "must be one line of UTF-8 text without control characters");
  }
}

void validate_http_url(std::string_view value, const std::string& field) {
  validate_text(value, field);
  if (value.empty()) {
    return;
  }
  if (!is_http_url(value)) {
    throw WireError(field, "must be an http:// or https:// URL");
  }
}

namespace {

void validate_text_list(const std::optional<std::vector<std::string>>& values,
                        const std::string& field) {
  for (std::size_t i = 0; values && i < values->size(); ++i) {
    validate_text((*values)[i], field + "[" + std::to_string(i) + "]");
  }
}

void validate_tools(const std::optional<std::vector<RunnerApplicationDownload>>& tools) {
  for (std::size_t i = 0; tools && i < tools->size(); ++i) {
    const auto& tool = (*tools)[i];
    const auto field = "tools[" + std::to_string(i) + "].";
    validate_text(tool.os.value_or(""), field + "os");
    validate_text(tool.architecture.value_or(""), field + "architecture");
    validate_http_url(tool.download_url.value_or(""), field + "download_url");
    validate_text(tool.filename.value_or(""), field + "filename");
    validate_text(tool.temp_download_token.value_or(""), field + "temp_download_token");
    validate_text(tool.sha256_checksum.value_or(""), field + "sha256_checksum");
  }
}

}  // namespace

void validate_bootstrap(const BootstrapInstance& bootstrap) {
  validate_instance_name(bootstrap.name);
  // What garm never sends: control characters in any of its strings, URLs of other schemes.
  validate_http_url(bootstrap.repo_url, "repo_url");
  validate_http_url(bootstrap.callback_url, "callback-url");
  validate_http_url(bootstrap.metadata_url, "metadata-url");
  validate_text(bootstrap.instance_token, "instance-token");
  validate_text_list(bootstrap.ssh_keys, "ssh-keys");
  validate_text(bootstrap.github_runner_group, "github-runner-group");
  validate_text(bootstrap.proxy_config.http_proxy, "proxy_config.http_proxy");
  validate_text(bootstrap.proxy_config.https_proxy, "proxy_config.https_proxy");
  validate_text(bootstrap.proxy_config.no_proxy, "proxy_config.no_proxy");
  validate_text_list(bootstrap.user_data_options.extra_packages,
                     "user_data_options.extra_packages");
  validate_tools(bootstrap.tools);
  validate_pool_id(bootstrap.pool_id);
  validate_resource_name(bootstrap.image, "image");
  validate_resource_name(bootstrap.flavor, "flavor");
  validate_labels(bootstrap.labels);
  validate_extra_specs(bootstrap.extra_specs);
}

bool is_agent_name(std::string_view name) {
  return !name.empty() && name.size() <= 64 && is_alnum(name.front()) &&
         std::all_of(name.begin(), name.end(),
                     [](char c) { return is_alnum(c) || c == '.' || c == '_' || c == '-'; }) &&
         name.find("..") == std::string_view::npos;
}

}  // namespace garm_edge::wire
