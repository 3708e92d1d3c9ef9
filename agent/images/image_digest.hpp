#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>

namespace garm_edge::agent {

/// The digest that proves an image: SHA-256 or SHA-512, lower-case hex.
struct ImageDigest {
  enum class Algorithm { sha256, sha512 };
  Algorithm algorithm = Algorithm::sha256;
  std::string hex;

  /// "sha256:…" or "sha512:…".
  std::string text() const;
  /// The first 16 hex digits: enough to tell versions of one image apart in a file name.
  std::string short_hex() const { return hex.substr(0, 16); }
  bool operator==(const ImageDigest&) const = default;
};

/// The digest `file_name` has in a checksum file as the Debian and Ubuntu cloud images publish
/// them: GNU lines ("<hex>  <name>", "<hex> *<name>") or BSD lines ("SHA512 (<name>) = <hex>").
/// The algorithm follows from the digest's length. Nothing when the file does not list it.
std::optional<ImageDigest> digest_in_checksum_file(std::string_view text,
                                                   std::string_view file_name);

/// Incremental SHA-256 or SHA-512 of a download (nettle: the CPU's SHA extensions where it has
/// them).
class StreamingDigest {
 public:
  explicit StreamingDigest(ImageDigest::Algorithm algorithm);
  ~StreamingDigest();
  StreamingDigest(const StreamingDigest&) = delete;
  StreamingDigest& operator=(const StreamingDigest&) = delete;

  void update(std::string_view data);
  ImageDigest finish();

 private:
  struct State;
  ImageDigest::Algorithm algorithm_;
  std::unique_ptr<State> state_;
};

}  // namespace garm_edge::agent
