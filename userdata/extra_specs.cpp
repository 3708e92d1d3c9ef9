// The pool's extra_specs as user-data reads them. garm hands them over as an opaque object, so
// every type is checked here and a wrong one names its field.

#include <string>

#include "common/text.hpp"
#include "userdata/internal.hpp"
#include "wire/base64.hpp"

namespace garm_edge::userdata::detail {
namespace {

using nlohmann::json;

constexpr std::size_t kMaxFileNameBytes = 255;

std::string field_name(std::string_view key) {
  return "extra_specs." + std::string(key);
}

std::string decoded_base64(const json& value, const std::string& field) {
  if (!value.is_string()) {
    throw UserDataError(field + ": must be a base64 string");
  }
  auto decoded = wire::base64_decode(value.get_ref<const std::string&>());
  if (!decoded) {
    throw UserDataError(field + ": is not valid base64");
  }
  return std::move(*decoded);
}

/// Names become `/garm-pre-install/<name>`, so one must stay a single file in that directory.
void check_pre_install_name(const std::string& name) {
  const auto field = field_name("pre_install_scripts") + "[" + printable_excerpt(name) + "]";
  if (name.empty() || name.size() > kMaxFileNameBytes) {
    throw UserDataError(field + ": a script name must be 1 to 255 bytes");
  }
  if (!is_plain_text(name) || name.find('/') != std::string::npos ||
      name.find('\\') != std::string::npos || name.find("..") != std::string::npos || name == ".") {
    throw UserDataError(field +
                        ": a script name must be a plain file name (no '/', '\\', '..' or control "
                        "characters)");
  }
}

std::map<std::string, std::string> pre_install_scripts(const json& value) {
  const auto field = field_name("pre_install_scripts");
  if (!value.is_object()) {
    throw UserDataError(field + ": must be an object of name -> base64 script");
  }
  std::map<std::string, std::string> scripts;  // sorted by name, as garm-provider-common runs them
  for (const auto& [name, script] : value.items()) {
    check_pre_install_name(name);
    scripts.emplace(name, decoded_base64(script, field + "." + name));
  }
  return scripts;
}

std::map<std::string, std::string> string_map(const json& value, const std::string& field) {
  if (!value.is_object()) {
    throw UserDataError(field + ": must be an object of strings");
  }
  std::map<std::string, std::string> out;
  for (const auto& [key, item] : value.items()) {
    if (!item.is_string()) {
      throw UserDataError(field + "." + key + ": must be a string");
    }
    out.emplace(key, item.get<std::string>());
  }
  return out;
}

std::vector<std::string> string_list(const json& value, const std::string& field) {
  if (!value.is_array()) {
    throw UserDataError(field + ": must be an array of strings");
  }
  std::vector<std::string> out;
  for (const auto& item : value) {
    if (!item.is_string()) {
      throw UserDataError(field + ": must be an array of strings");
    }
    out.push_back(item.get<std::string>());
  }
  return out;
}

bool boolean(const json& value, const std::string& field) {
  if (!value.is_boolean()) {
    throw UserDataError(field + ": must be true or false");
  }
  return value.get<bool>();
}

void read_spec(ExtraSpecs& specs, const std::string& key, const json& value) {
  const auto field = field_name(key);
  if (key == "runner_install_template") {
    auto script = decoded_base64(value, field);
    if (!script.empty()) {  // Go reads an empty []byte as "no template"
      specs.runner_install_template = std::move(script);
    }
  } else if (key == "pre_install_scripts") {
    specs.pre_install_scripts = pre_install_scripts(value);
  } else if (key == "extra_context") {
    specs.extra_context = string_map(value, field);
  } else if (key == "enable_boot_debug") {
    specs.enable_boot_debug = boolean(value, field);
  } else if (key == "disable_updates") {
    specs.disable_updates = boolean(value, field);
  } else if (key == "extra_packages") {
    specs.extra_packages = string_list(value, field);
  }
  // Other keys belong to other consumers; wire::validate_extra_spec_keys polices their names.
}

}  // namespace

ExtraSpecs parse_extra_specs(const wire::BootstrapInstance& bootstrap) {
  ExtraSpecs specs;
  if (!bootstrap.extra_specs || bootstrap.extra_specs->is_null()) {
    return specs;
  }
  if (!bootstrap.extra_specs->is_object()) {
    throw UserDataError("extra_specs: must be a JSON object");
  }
  for (const auto& [key, value] : bootstrap.extra_specs->items()) {
    if (!value.is_null()) {  // Go's json leaves a field at its zero value for null
      read_spec(specs, key, value);
    }
  }
  return specs;
}

wire::UserDataOptions effective_user_data_options(const wire::BootstrapInstance& bootstrap,
                                                  const ExtraSpecs& specs) {
  auto options = bootstrap.user_data_options;
  if (specs.disable_updates) {
    options.disable_updates_on_boot = *specs.disable_updates;
  }
  if (specs.enable_boot_debug) {
    options.enable_boot_debug = *specs.enable_boot_debug;
  }
  if (!specs.extra_packages.empty()) {
    auto packages = options.extra_packages.value_or(std::vector<std::string>{});
    packages.insert(packages.end(), specs.extra_packages.begin(), specs.extra_packages.end());
    options.extra_packages = std::move(packages);
  }
  return options;
}

}  // namespace garm_edge::userdata::detail
