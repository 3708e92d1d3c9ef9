// Image digests: checksum files as Debian and Ubuntu publish them, the streaming hashes, and
// the Content-Range a resumed download is checked against.
#include "agent/images/image_digest.hpp"

#include <catch2/catch.hpp>

#include "agent/images/image_fetcher.hpp"

using namespace garm_edge::agent;

TEST_CASE("a checksum file gives the digest of the source's file name, and of no other",
          "[images]") {
  const std::string a64(64, 'a');
  const std::string b128(128, 'b');
  const std::string file = "# comment\n" + std::string(64, 'c') +
                           "  debian-12-genericcloud-amd64.qcow2.bak\n" + a64 +
                           "  debian-12-genericcloud-amd64.qcow2\r\n" + b128 + " *noble.img\n" +
                           "SHA256 (fedora.qcow2) = " + std::string(64, 'D') + "\n";
  const auto debian = digest_in_checksum_file(file, "debian-12-genericcloud-amd64.qcow2");
  REQUIRE(debian);
  CHECK(debian->text() == "sha256:" + a64);
  CHECK(digest_in_checksum_file(file, "noble.img")->text() == "sha512:" + b128);
  CHECK(digest_in_checksum_file(file, "fedora.qcow2")->hex == std::string(64, 'd'));
  CHECK_FALSE(digest_in_checksum_file(file, "debian-12-genericcloud-amd64"));
  CHECK_FALSE(digest_in_checksum_file(file, ""));
  CHECK_FALSE(digest_in_checksum_file("abc  short.img\n", "short.img"));  // no digest length
  CHECK_FALSE(digest_in_checksum_file(std::string(64, 'z') + "  x.img\n", "x.img"));
}

TEST_CASE("streamed digests match the standard's vectors, in any split", "[images]") {
  StreamingDigest sha256(ImageDigest::Algorithm::sha256);
  sha256.update("a");
  sha256.update("bc");
  CHECK(sha256.finish().hex == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  StreamingDigest sha512(ImageDigest::Algorithm::sha512);
  sha512.update("abc");
  CHECK(sha512.finish().hex ==
        "ddaf35a193617abacc417349ae20413112e6fa4e89a97ea20a9eeee64b55d39a2192992a274fc1a836ba3c23a3"
        "feebbd454d4423643ce80e2a9ac94fa54ca49f");
}

TEST_CASE("a resumed answer's Content-Range is read strictly", "[images]") {
  CHECK(parse_content_range("bytes 100-999/1000")->first == 100);
  CHECK(parse_content_range("bytes 100-999/1000")->total == 1000U);
  CHECK_FALSE(parse_content_range("bytes 100-999/*")->total);
  CHECK_FALSE(parse_content_range("bytes 100-1000/1000"));  // past the end
  CHECK_FALSE(parse_content_range("bytes 999-100/1000"));
  CHECK_FALSE(parse_content_range("bytes */1000"));
  CHECK_FALSE(parse_content_range("items 1-2/3"));
  CHECK_FALSE(parse_content_range("bytes -5-10/20"));
}
