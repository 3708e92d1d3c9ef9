#include "common/durable_file.hpp"

#include <filesystem>
#include <fstream>
#include <sys/stat.h>

#include <catch2/catch.hpp>

#include "common/temp_dir.hpp"

namespace {

std::string contents_of(const std::filesystem::path& path) {
  std::ifstream in(path);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

mode_t mode_of(const std::filesystem::path& path) {
  struct stat facts {};
  REQUIRE(::stat(path.c_str(), &facts) == 0);
  return facts.st_mode & 07777;
}

}  // namespace

TEST_CASE("publish_file swaps a finished file in with its mode and leaves no temp file",
          "[durable_file]") {
  garm_edge::TempDir dir("publish");
  const auto target = dir.path() / "base.qcow2";
  const auto temp = dir.path() / ".base.qcow2.tmp";
  std::ofstream(target) << "old";
  std::ofstream(temp) << "new";

  garm_edge::publish_file(temp, target, 0444);

  CHECK(contents_of(target) == "new");
  CHECK(mode_of(target) == 0444);
  CHECK_FALSE(std::filesystem::exists(temp));
}

TEST_CASE("publish_file of a temp file that is not there changes nothing", "[durable_file]") {
  garm_edge::TempDir dir("publish");
  const auto target = dir.path() / "archive";
  std::ofstream(target) << "kept";

  CHECK_THROWS_AS(garm_edge::publish_file(dir.path() / "missing.part", target, 0600),
                  garm_edge::DurableFileError);
  CHECK(contents_of(target) == "kept");
}

TEST_CASE("write_atomically replaces a file whole, with its mode", "[durable_file]") {
  garm_edge::TempDir dir("publish");
  const auto target = dir.path() / "record.json";
  garm_edge::write_atomically(target, "{}\n", 0640);
  garm_edge::write_atomically(target, "{\"a\":1}\n", 0640);
  CHECK(contents_of(target) == "{\"a\":1}\n");
  CHECK(mode_of(target) == 0640);
  CHECK(std::distance(std::filesystem::directory_iterator(dir.path()),
                      std::filesystem::directory_iterator()) == 1);
}
