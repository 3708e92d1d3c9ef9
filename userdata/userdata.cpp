// The seed as a whole, the install script choice, tool selection and URL rewriting.

#include "userdata/userdata.hpp"

#include <algorithm>
#include <array>
#include <cctype>

#include "userdata/internal.hpp"

namespace garm_edge::userdata {
namespace {

/// garm-provider-common util.GetTools' names: GitHub's spelling first, garm's second.
struct ToolNames {
  std::string_view github;
  std::string_view garm;
};

ToolNames os_names(const std::optional<wire::OsType>& os_type) {
  if (os_type == wire::OsType::linux) {
    return {"linux", "linux"};
  }
  if (os_type == wire::OsType::windows) {
    return {"win", "windows"};
  }
  throw UserDataError("os_type: must be linux or windows to pick a runner download");
}

ToolNames arch_names(const std::optional<wire::OsArch>& arch) {
  if (arch == wire::OsArch::amd64) {
    return {"x64", "amd64"};
  }
  if (arch == wire::OsArch::arm64) {
    return {"arm64", "arm64"};
  }
  if (arch == wire::OsArch::arm) {
    return {"arm", "arm"};
  }
  throw UserDataError("arch: must be amd64, arm64 or arm to pick a runner download");
}

bool matches(const std::optional<std::string>& value, ToolNames names) {
  return value && (*value == names.github || *value == names.garm);
}

/// A URL continues past `end` when the next character could still belong to its last host or
/// path segment ("https://garm:80" must not match inside "https://garm:8000/...").
bool continues_url(std::string_view text, std::size_t end) {
  if (end >= text.size()) {
    return false;
  }
  const auto c = static_cast<unsigned char>(text[end]);
  return std::isalnum(c) != 0 || c == '-' || c == '.' || c == '_' || c == '~' || c == '%';
}

struct UrlReplacement {
  std::string from;
  std::string to;
};

}  // namespace

const wire::RunnerApplicationDownload& select_tool(const wire::BootstrapInstance& bootstrap) {
  const auto os = os_names(bootstrap.os_type);
  const auto arch = arch_names(bootstrap.arch);
  if (bootstrap.tools) {
    for (const auto& tool : *bootstrap.tools) {
      if (matches(tool.os, os) && matches(tool.architecture, arch)) {
        return tool;
      }
    }
  }
  throw UserDataError("tools: no runner download for os " + std::string(os.garm) + " and arch " +
                      std::string(arch.garm));
}

GarmUrls garm_urls_of(const wire::BootstrapInstance& bootstrap, const GuestEndpoints& endpoints) {
  if (endpoints.runner_archive_url.empty()) {
    return {.callback_url = bootstrap.callback_url,
            .metadata_url = bootstrap.metadata_url,
            .runner_download_url = "",
            .runner_download_token = ""};
  }
  const auto& tool = select_tool(bootstrap);
  return {.callback_url = bootstrap.callback_url,
          .metadata_url = bootstrap.metadata_url,
          .runner_download_url = tool.download_url.value_or(""),
          .runner_download_token = tool.temp_download_token.value_or("")};
}

std::string rewrite_garm_urls(std::string_view text, const GarmUrls& garm,
                              const GuestEndpoints& endpoints) {
  const bool cached = !endpoints.runner_archive_url.empty();
  std::array<UrlReplacement, 5> replacements = {
      UrlReplacement{detail::without_trailing_slashes(garm.callback_url),
                     detail::without_trailing_slashes(endpoints.callback_url)},
      UrlReplacement{detail::without_trailing_slashes(garm.metadata_url),
                     detail::without_trailing_slashes(endpoints.metadata_url)},
      UrlReplacement{cached ? garm.runner_download_url : "", endpoints.runner_archive_url},
      UrlReplacement{cached ? garm.runner_download_token : "", ""},
      UrlReplacement{endpoints.agent_url.empty() ? "" : garm.agent_url, endpoints.agent_url}};
  // The longer URL is tried first at each position, so one that is a prefix of another (a
  // callback URL of "https://garm" and metadata of "https://garm/md") never takes its match.
  std::stable_sort(replacements.begin(), replacements.end(),
                   [](const auto& a, const auto& b) { return a.from.size() > b.from.size(); });
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size();) {
    const auto* match = static_cast<const UrlReplacement*>(nullptr);
    for (const auto& replacement : replacements) {
      if (!replacement.from.empty() && text.substr(i).starts_with(replacement.from) &&
          !continues_url(text, i + replacement.from.size())) {
        match = &replacement;
        break;
      }
    }
    if (match != nullptr) {
      out += match->to;
      i += match->from.size();
    } else {
      out += text[i++];
    }
  }
  return out;
}

std::string install_script(const wire::BootstrapInstance& bootstrap,
                           const GuestEndpoints& endpoints) {
  const auto specs = detail::parse_extra_specs(bootstrap);
  if (specs.runner_install_template) {
    return rewrite_garm_urls(*specs.runner_install_template, garm_urls_of(bootstrap, endpoints),
                             endpoints);
  }
  if (bootstrap.os_type == wire::OsType::windows) {
    return builtin_windows_install_script(bootstrap, endpoints);
  }
  if (bootstrap.os_type == wire::OsType::linux) {
    return builtin_linux_install_script(bootstrap, endpoints);
  }
  throw UserDataError("os_type: must be linux or windows");
}

std::string render_meta_data(std::string_view instance_id, std::string_view hostname) {
  nlohmann::ordered_json meta_data;
  meta_data["instance-id"] = std::string(instance_id);
  meta_data["local-hostname"] = std::string(hostname);
  return to_yaml(meta_data);
}

Seed render_seed(const wire::BootstrapInstance& bootstrap, const SeedRequest& request) {
  Seed seed;
  seed.meta_data = render_meta_data(request.instance_id, request.hostname);
  const auto script = install_script(bootstrap, request.endpoints);
  seed.user_data =
      bootstrap.os_type == wire::OsType::windows
          ? render_windows_user_data(bootstrap, script)
          : render_linux_cloud_config(bootstrap, script,
                                      {.url = request.endpoints.runner_archive_url,
                                       .sha256 = request.endpoints.runner_archive_sha256},
                                      request.devices, request.mirror_url);
  // Empty vendor-data is valid and costs nothing; a missing one costs cloud-init 10 s of retries.
  seed.vendor_data = "";
  return seed;
}

}  // namespace garm_edge::userdata
