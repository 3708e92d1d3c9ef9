#pragma once

// [[images]] and [pull] of agent.toml (read in image_config.cpp).

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>

#include "net/http_client.hpp"
#include "wire/enums.hpp"

namespace garm_edge::agent {

/// Where the agent pulls an image from (docs/images.md): a URL and the digest that proves it.
struct ImageSourceConfig {
  std::string url;               // https:// or http://: a qcow2 or raw image, maybe xz-compressed
  std::string sha256;            // 64 lower-case hex digits; empty when checksums_url is set
  std::string checksums_url;     // a SHA256SUMS/SHA512SUMS-style file that lists the URL's file
  std::string format = "qcow2";  // of the image inside the compression, never probed
  bool xz = false;               // the URL's file name ends in ".xz"

  /// The last part of the URL's path: the name a checksum file lists.
  std::string file_name() const;
  bool operator==(const ImageSourceConfig&) const = default;
};

/// A base image guests boot from. The agent never writes to it: every guest gets a qcow2
/// overlay backed by it.
struct ImageConfig {
  std::string name;
  /// At least one of these: a volume in the agent's storage pool or an absolute file path
  /// (at most one of the two), or a source the agent pulls. With a local base and a source,
  /// the local base serves until the pulled one is ready.
  std::string base_volume;
  std::string base_path;
  std::string base_format = "qcow2";
  wire::OsType os_type = wire::OsType::linux;
  std::string os_name;
  std::string os_version;
  wire::OsArch arch = wire::OsArch::amd64;
  std::optional<ImageSourceConfig> source;
};

/// How images with a `source` are pulled: one pull per image at a time, the bases kept in
/// `directory`.
struct PullConfig {
  std::filesystem::path directory;  // empty: beside state_dir, "<state_dir>-images"
  /// What pulled bases and downloads under way may take together; 0: the disk's free space.
  std::uint64_t quota_bytes = 0;
  std::uint64_t bytes_per_second = 0;  // 0: as fast as the network allows
  net::ProxySettings proxies;
  std::filesystem::path ca_bundle;  // PEM file trusted besides the system's CAs
  /// How often a checksum file is fetched again to find a new version.
  std::chrono::seconds recheck{std::chrono::hours(6)};
  /// One pull: the download, its verification and the conversion.
  std::chrono::seconds timeout{std::chrono::hours(2)};
  /// A source that sends no byte for this long is given up (and retried a minute later).
  std::chrono::seconds stall{60};
};

}  // namespace garm_edge::agent
