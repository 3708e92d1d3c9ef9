#include "agent/images/image_digest.hpp"

#include <algorithm>
#include <array>
#include <cstdint>
#include <nettle/sha2.h>

#include "common/hex.hpp"

namespace garm_edge::agent {
namespace {

std::optional<ImageDigest> digest_of_hex(std::string_view hex) {
  std::string lower(hex);
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](char c) { return c >= 'A' && c <= 'F' ? static_cast<char>(c + 32) : c; });
  if (!is_lower_hex(lower, lower.size())) {
    return std::nullopt;
  }
  if (lower.size() == 64) {
    return ImageDigest{.algorithm = ImageDigest::Algorithm::sha256, .hex = lower};
  }
  if (lower.size() == 128) {
    return ImageDigest{.algorithm = ImageDigest::Algorithm::sha512, .hex = lower};
  }
  return std::nullopt;
}

std::string_view trimmed(std::string_view line) {
  while (!line.empty() && (line.back() == '\r' || line.back() == ' ' || line.back() == '\t')) {
    line.remove_suffix(1);
  }
  while (!line.empty() && (line.front() == ' ' || line.front() == '\t')) {
    line.remove_prefix(1);
  }
  return line;
}

/// "SHA256 (name) = hex"
std::optional<ImageDigest> bsd_line(std::string_view line, std::string_view file_name) {
  const auto open = line.find(" (");
  const auto close = line.rfind(") = ");
  if (open == std::string_view::npos || close == std::string_view::npos || close < open) {
    return std::nullopt;
  }
  if (line.substr(open + 2, close - open - 2) != file_name) {
    return std::nullopt;
  }
  return digest_of_hex(line.substr(close + 4));
}

/// "hex  name" or "hex *name" (binary mode)
std::optional<ImageDigest> gnu_line(std::string_view line, std::string_view file_name) {
  const auto space = line.find(' ');
  if (space == std::string_view::npos) {
    return std::nullopt;
  }
  auto name = line.substr(space + 1);
  if (!name.empty() && (name.front() == ' ' || name.front() == '*')) {
    name.remove_prefix(1);
  }
  if (name.starts_with("./")) {
    name.remove_prefix(2);
  }
  return name == file_name ? digest_of_hex(line.substr(0, space)) : std::nullopt;
}

}  // namespace

std::string ImageDigest::text() const {
  return std::string(algorithm == Algorithm::sha256 ? "sha256:" : "sha512:") + hex;
}

std::optional<ImageDigest> digest_in_checksum_file(std::string_view text,
                                                   std::string_view file_name) {
  if (file_name.empty()) {
    return std::nullopt;
  }
  while (!text.empty()) {
    const auto end = std::min(text.find('\n'), text.size());
    const auto line = trimmed(text.substr(0, end));
    text.remove_prefix(std::min(end + 1, text.size()));
    if (line.empty() || line.front() == '#') {
      continue;
    }
    if (auto digest = line.starts_with("SHA") && line.find(" (") != std::string_view::npos
                          ? bsd_line(line, file_name)
                          : gnu_line(line, file_name)) {
      return digest;
    }
  }
  return std::nullopt;
}

struct StreamingDigest::State {
  sha256_ctx sha256{};
  sha512_ctx sha512{};
};

StreamingDigest::StreamingDigest(ImageDigest::Algorithm algorithm)
    : algorithm_(algorithm), state_(std::make_unique<State>()) {
  sha256_init(&state_->sha256);
  sha512_init(&state_->sha512);
}

StreamingDigest::~StreamingDigest() = default;

void StreamingDigest::update(std::string_view data) {
  const auto* bytes = reinterpret_cast<const std::uint8_t*>(data.data());
  if (algorithm_ == ImageDigest::Algorithm::sha256) {
    sha256_update(&state_->sha256, data.size(), bytes);
  } else {
    sha512_update(&state_->sha512, data.size(), bytes);
  }
}

ImageDigest StreamingDigest::finish() {
  std::array<unsigned char, SHA512_DIGEST_SIZE> digest{};
  if (algorithm_ == ImageDigest::Algorithm::sha256) {
    sha256_digest(&state_->sha256, SHA256_DIGEST_SIZE, digest.data());
    return {.algorithm = algorithm_, .hex = to_hex(std::span(digest).first(SHA256_DIGEST_SIZE))};
  }
  sha512_digest(&state_->sha512, SHA512_DIGEST_SIZE, digest.data());
  return {.algorithm = algorithm_, .hex = to_hex(digest)};
}

}  // namespace garm_edge::agent
