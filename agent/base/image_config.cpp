#include "agent/base/image_config.hpp"

#include "agent/base/config_sections.hpp"
#include "common/hex.hpp"
#include "wire/error.hpp"
#include "wire/validate.hpp"

namespace garm_edge::agent {

namespace {

using TableReader = TomlTableReader;

void check_pull_url(TableReader& in, std::string_view key, const std::string& url) {
  if (!url.starts_with("https://") && !url.starts_with("http://")) {
    in.fail(in.node(key), std::string(key) + " must be an https:// or http:// URL");
  }
  try {
    net::parse_upstream_url(std::string_view(url).substr(0, url.find_first_of("?#")));
  } catch (const std::exception& e) {
    in.fail(in.node(key), std::string(key) + ": " + e.what());
  }
}

std::optional<ImageSourceConfig> read_image_source(TableReader& in) {
  const auto url = in.string("source");
  const auto sha256 = in.string("sha256");
  const auto checksums = in.string("checksums");
  const auto format = in.string("source_format");
  if (!url) {
    if (sha256 || checksums || format) {
      in.fail(nullptr, "sha256, checksums and source_format belong to a source: set source");
    }
    return std::nullopt;
  }
  ImageSourceConfig source{.url = *url,
                           .sha256 = sha256.value_or(""),
                           .checksums_url = checksums.value_or(""),
                           .format = "qcow2",
                           .xz = false};
  check_pull_url(in, "source", source.url);
  const auto file = source.file_name();
  source.xz = file.ends_with(".xz");
  const auto inner = source.xz ? file.substr(0, file.size() - 3) : file;
  source.format = format.value_or(inner.ends_with(".raw") ? "raw" : "qcow2");
  if (source.format != "qcow2" && source.format != "raw") {
    in.fail(in.node("source_format"), "source_format must be qcow2 or raw");
  }
  if (file.empty()) {
    in.fail(in.node("source"), "source must name a file (a checksum file lists it by name)");
  }
  if (source.sha256.empty() == source.checksums_url.empty()) {
    in.fail(nullptr, "a source needs exactly one of sha256 or checksums (a SHA256SUMS file)");
  }
  if (!source.sha256.empty() && !is_lower_hex(source.sha256, 64)) {
    in.fail(in.node("sha256"), "sha256 must be 64 lower-case hex digits");
  }
  if (!source.checksums_url.empty()) {
    check_pull_url(in, "checksums", source.checksums_url);
    // The digest is what proves the image: over plain HTTP anyone on the path chooses it.
    if (!source.checksums_url.starts_with("https://")) {
      in.fail(in.node("checksums"),
              "checksums must be an https:// URL: over http:// anyone on the path chooses the "
              "digest the image is checked against (or pin sha256 here)");
    }
  }
  return source;
}

}  // namespace

void read_pull_section(TableReader& root, AgentConfig& config) {
  const auto* table = root.table("pull");
  if (table == nullptr) {
    return;
  }
  TableReader in(*table, root.source(), "[pull]");
  auto& pull = config.pull;
  pull.directory = in.absolute_path("directory", false);
  pull.quota_bytes = in.integer<std::uint64_t>("quota_gib", 0, 1U << 20U).value_or(0) << 30U;
  pull.bytes_per_second = in.integer<std::uint64_t>("rate_mib_per_second", 0, 1U << 20U).value_or(0)
                          << 20U;
  pull.proxies = {.http_proxy = in.string("http_proxy").value_or(""),
                  .https_proxy = in.string("https_proxy").value_or(""),
                  .no_proxy = in.string("no_proxy").value_or("")};
  for (const auto& [key, proxy] : {std::pair{"http_proxy", pull.proxies.http_proxy},
                                   std::pair{"https_proxy", pull.proxies.https_proxy}}) {
    try {
      if (!proxy.empty()) {
        net::proxy_for(net::parse_upstream_url("http://example.invalid"),
                       {.http_proxy = proxy, .https_proxy = "", .no_proxy = ""});
      }
    } catch (const std::exception& e) {
      in.fail(in.node(key), std::string(key) + ": " + e.what());
    }
  }
  pull.ca_bundle = in.absolute_path("ca_bundle", false);
  pull.recheck = std::chrono::hours(in.integer<long>("recheck_hours", 1, 24 * 365).value_or(6));
  pull.timeout =
      std::chrono::minutes(in.integer<long>("timeout_minutes", 1, 24 * 60).value_or(120));
  pull.stall = std::chrono::seconds(in.integer<long>("stall_seconds", 5, 3600).value_or(60));
  in.reject_unknown_keys();
}

ImageConfig read_image(const toml::table& table, const std::string& source, std::size_t index) {
  TableReader in(table, source, "[[images]] #" + std::to_string(index + 1));
  ImageConfig image;
  image.name = in.required_string("name");
  image.base_volume = in.string("base_volume").value_or("");
  image.base_path = in.string("base_path").value_or("");
  image.source = read_image_source(in);
  image.base_format = in.string("base_format").value_or(image.base_format);
  image.os_type = enum_or_fail(in, "os_type", wire::OsType::linux);
  image.os_name = in.string("os_name").value_or("");
  image.os_version = in.string("os_version").value_or("");
  image.arch = enum_or_fail(in, "arch", wire::OsArch::amd64);
  try {
    wire::validate_resource_name(image.name, "name");
  } catch (const wire::WireError& e) {
    in.fail(in.node("name"), e.what());
  }
  if (!image.base_volume.empty() && !image.base_path.empty()) {
    in.fail(nullptr, "image \"" + image.name + "\" has both base_volume and base_path: keep one");
  }
  if (image.base_volume.empty() && image.base_path.empty() && !image.source) {
    in.fail(nullptr, "image \"" + image.name +
                         "\" needs a base_volume, a base_path or a source to pull it from");
  }
  if (!image.base_path.empty() && image.base_path.front() != '/') {
    in.fail(in.node("base_path"), "base_path must be an absolute path");
  }
  if (!image.base_volume.empty() && image.base_volume.find('/') != std::string::npos) {
    in.fail(in.node("base_volume"), "base_volume is a volume name in storage_pool, not a path");
  }
  if (image.base_format != "qcow2" && image.base_format != "raw") {
    in.fail(in.node("base_format"), "base_format must be qcow2 or raw");
  }
  if (image.arch == wire::OsArch::i386) {
    in.fail(in.node("arch"), "arch i386 is not supported; use amd64, arm64 or arm");
  }
  in.reject_unknown_keys();
  return image;
}

std::string ImageSourceConfig::file_name() const {
  const auto path = std::string_view(url).substr(0, url.find_first_of("?#"));
  const auto slash = path.rfind('/');
  const auto scheme_end = path.find("://");
  if (slash == std::string_view::npos || scheme_end == std::string_view::npos ||
      slash < scheme_end + 3 || path.find('/', scheme_end + 3) == std::string_view::npos) {
    return "";
  }
  return std::string(path.substr(slash + 1));
}

}  // namespace garm_edge::agent
