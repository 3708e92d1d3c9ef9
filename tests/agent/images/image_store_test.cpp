// Image pulls against a real HTTPS server (the fake garm's /downloads/, with Range and a
// connection cut halfway), real qemu-img and xz.

#include "agent/images/image_store.hpp"

#include <fstream>
#include <future>
#include <limits>
#include <sys/stat.h>

#include <catch2/catch.hpp>

#include "agent/images/pulled_images.hpp"
#include "agent/instances/identifiers.hpp"
#include "common/temp_dir.hpp"
#include "net/secret_token.hpp"
#include "support/fake_garm.hpp"
#include "support/quiet_logger.hpp"
#include "support/run_command.hpp"

using namespace garm_edge;
using namespace garm_edge::agent;
using namespace garm_edge::testing;

namespace {

std::string sha256_of(const std::filesystem::path& file) {
  const auto out = run_command("sha256sum '" + file.string() + "'");
  return out.output.substr(0, 64);
}

/// A raw disk of `mib` MiB of random bytes (no format inside), or that disk converted.
std::filesystem::path make_image(const std::filesystem::path& dir, const std::string& name,
                                 unsigned mib) {
  const auto raw = name.ends_with(".qcow2") ? dir / (name + ".tmp") : dir / name;
  REQUIRE(run_command("head -c " + std::to_string(mib << 20U) + " /dev/urandom > '" + raw.string() +
                      "'")
              .exit_code == 0);
  if (name.ends_with(".qcow2")) {
    const auto qcow2 = dir / name;
    REQUIRE(run_command("qemu-img convert -f raw -O qcow2 '" + raw.string() + "' '" +
                        qcow2.string() + "' && rm '" + raw.string() + "'")
                .exit_code == 0);
    return qcow2;
  }
  return raw;
}

PullConfig trusting(const TestPki& pki) {
  PullConfig pull;
  pull.ca_bundle = pki.ca_certificate;
  return pull;
}

std::size_t downloads_in(const FakeGarm& server, const std::string& file) {
  std::size_t count = 0;
  for (const auto& request : server.requests()) {
    count += request["path"] == "/downloads/" + file ? 1U : 0U;
  }
  return count;
}

ImageConfig image_from(const std::string& url, const std::string& sha256,
                       const std::string& checksums = "") {
  ImageConfig image;
  image.name = "debian-12";
  ImageSourceConfig source{.url = url, .sha256 = sha256, .checksums_url = checksums};
  const auto file = source.file_name();
  source.xz = file.ends_with(".xz");
  source.format = file.find(".raw") != std::string::npos ? "raw" : "qcow2";
  image.source = source;
  return image;
}

/// Lets a test set the room the quota leaves, and fill the disk after the first look.
class SettableDisk final : public PullDisk {
 public:
  std::atomic<std::uint64_t> bytes{std::uint64_t{1} << 40U};
  static constexpr auto kSame = std::numeric_limits<std::uint64_t>::max();
  std::atomic<std::uint64_t> bytes_later{kSame};  // after the first look; kSame: `bytes`
  std::uint64_t room(const std::filesystem::path&) const override {
    return looks_++ == 0 || bytes_later == kSame ? bytes.load() : bytes_later.load();
  }
  void reset() { looks_ = 0; }

 private:
  mutable std::atomic<int> looks_{0};
};

struct PullHost {
  TempDir served{"image-server"};
  TempDir state{"image-state"};
  FakeGarm server{FakeGarmOptions{.downloads = served.path()}};
  PullConfig pull = trusting(server.pki());
  HttpImageFetcher fetcher{pull};
  HostImageTools tools{std::chrono::seconds(60)};
  SettableDisk disk;
  QuietLogger log;

  std::filesystem::path bases() const { return state.path() / "bases"; }
  std::string url(const std::string& file) const {
    return server.base_url() + "/downloads/" + file;
  }
  std::unique_ptr<ImageStore> store(const ImageConfig& image,
                                    std::chrono::seconds retired_grace = {}) {
    return std::make_unique<ImageStore>(
        std::vector<ImageConfig>{image},
        ImageStoreOptions{
            .state_dir = state.path(), .base_dir = bases(), .retired_grace = retired_grace},
        fetcher, tools, disk, log);
  }
  std::size_t downloads_of(const std::string& file) const { return downloads_in(server, file); }
  std::vector<std::string> files_in(const std::filesystem::path& dir) const {
    std::vector<std::string> names;
    std::error_code ec;
    for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
      names.push_back(entry.path().filename().string());
    }
    return names;
  }
};

ImagePullState pulled(ImageStore& store) {
  return store.pull_now("debian-12", nullptr);
}

std::string qemu_img_info(const std::string& path) {
  return run_command("qemu-img info --output=json -f qcow2 '" + path + "'").output;
}

}  // namespace

TEST_CASE("a qcow2 image is pulled, verified and kept as a read-only qcow2 base", "[images]") {
  PullHost host;
  const auto file = make_image(host.served.path(), "debian.qcow2", 2);
  auto store = host.store(image_from(host.url("debian.qcow2"), sha256_of(file)));
  CHECK_FALSE(store->ready("debian-12"));
  const auto state = pulled(*store);
  CHECK(state.phase == ImagePullState::Phase::ready);
  CHECK(state.digest == "sha256:" + sha256_of(file));
  const auto base = store->ready("debian-12");
  REQUIRE(base);
  CHECK(base->format == "qcow2");
  CHECK(std::filesystem::path(base->path).parent_path() == host.bases());
  struct stat facts {};
  REQUIRE(::stat(base->path.c_str(), &facts) == 0);
  CHECK((facts.st_mode & 0777) == 0444);
  CHECK_THAT(qemu_img_info(base->path), Catch::Contains("\"format\": \"qcow2\""));
  // Never a name reconcile takes for an instance's overlay (and removes without a record).
  CHECK_FALSE(agent::domain_name_of_volume(std::filesystem::path(base->path).filename().string()));
  CHECK(host.files_in(host.state.path() / "images" / "downloads").empty());
  // Another store on the same state (the agent after a restart) has it ready at once.
  auto again = host.store(image_from(host.url("debian.qcow2"), sha256_of(file)));
  CHECK(again->ready("debian-12"));
}

TEST_CASE("the digest comes from a checksum file, matched by the file's name", "[images]") {
  PullHost host;
  const auto file = make_image(host.served.path(), "disk.raw", 1);
  const auto sha512 = run_command("sha512sum '" + file.string() + "'").output.substr(0, 128);
  std::ofstream(host.served.path() / "SHA512SUMS") << std::string(128, 'a') << "  other.raw\n"
                                                   << sha512 << "  disk.raw\n";
  std::ofstream(host.served.path() / "BSD") << "SHA512 (disk.raw) = " << sha512 << "\n";
  std::ofstream(host.served.path() / "MISSING") << sha512 << "  renamed.raw\n";

  SECTION("GNU style") {
    auto store = host.store(image_from(host.url("disk.raw"), "", host.url("SHA512SUMS")));
    CHECK(pulled(*store).digest == "sha512:" + sha512);
  }
  SECTION("BSD style") {
    auto store = host.store(image_from(host.url("disk.raw"), "", host.url("BSD")));
    CHECK(pulled(*store).digest == "sha512:" + sha512);
  }
  SECTION("a checksum file without the name is refused and nothing is downloaded") {
    auto store = host.store(image_from(host.url("disk.raw"), "", host.url("MISSING")));
    CHECK_THROWS_WITH(pulled(*store), Catch::Contains("does not list disk.raw"));
    CHECK(host.downloads_of("disk.raw") == 0);
    CHECK_FALSE(store->ready("debian-12"));
    CHECK(host.files_in(host.bases()).empty());
  }
}

TEST_CASE("a download whose digest is wrong is refused and leaves nothing", "[images]") {
  PullHost host;
  make_image(host.served.path(), "debian.qcow2", 1);
  auto store = host.store(image_from(host.url("debian.qcow2"), std::string(64, '0')));
  CHECK_THROWS_WITH(pulled(*store), Catch::Contains("is not the sha256:0000"));
  CHECK_FALSE(store->ready("debian-12"));
  CHECK(store->state("debian-12")->phase == ImagePullState::Phase::failed);
  CHECK(host.files_in(host.bases()).empty());
  CHECK(host.files_in(host.state.path() / "images" / "downloads").empty());
}

TEST_CASE("a source refused before its first byte leaves no part file behind", "[images]") {
  PullHost host;
  auto store = host.store(image_from(host.url("no-such.qcow2"), std::string(64, 'a')));
  CHECK_THROWS(pulled(*store));
  CHECK(store->state("debian-12")->phase == ImagePullState::Phase::failed);
  CHECK(host.files_in(host.state.path() / "images" / "downloads").empty());
}

TEST_CASE("partial downloads go with their image: removed, or dropped from the config",
          "[images]") {
  PullHost host;
  const auto file = make_image(host.served.path(), "debian.qcow2", 1);
  const auto config = image_from(host.url("debian.qcow2"), sha256_of(file));
  host.store(config);
  const auto downloads = host.state.path() / "images" / "downloads";
  std::ofstream(downloads / "garm-image-debian-12-0123456789abcdef.part") << "half";
  std::ofstream(downloads / "garm-image-retired-0123456789abcdef.part") << "half";
  std::ofstream(downloads / "garm-image-retired-0123456789abcdef.unpacked") << "half";
  // The agent started again without the retired image: its partials no longer count.
  auto store = host.store(config);
  CHECK(host.files_in(downloads) ==
        std::vector<std::string>{"garm-image-debian-12-0123456789abcdef.part"});
  store->remove("debian-12", [](const std::string&) { return false; });
  CHECK(host.files_in(downloads).empty());
}

TEST_CASE("a download cut halfway resumes where it stopped, in another process too", "[images]") {
  PullHost host;
  const auto file = make_image(host.served.path(), "debian.qcow2", 8);
  const auto size = std::filesystem::file_size(file);
  std::ofstream(file.string() + ".cut") << size / 2;
  const auto image = image_from(host.url("debian.qcow2"), sha256_of(file));
  {
    auto store = host.store(image);
    CHECK_THROWS(pulled(*store));
    CHECK_FALSE(store->ready("debian-12"));
  }
  auto restarted = host.store(image);  // as after the agent's restart
  CHECK(pulled(*restarted).phase == ImagePullState::Phase::ready);
  const auto requests = host.server.requests();
  REQUIRE(requests.size() == 2);
  CHECK(requests.back()["headers"]["Range"] == "bytes=" + std::to_string(size / 2) + "-");
  const auto metrics = restarted->render_metrics();
  const std::string counter = "\ngarm_edge_image_pulled_bytes_total ";
  const auto at = metrics.find(counter);
  REQUIRE(at != std::string::npos);
  // The second process fetched only the rest: with the first half, the file once.
  CHECK(std::stoull(metrics.substr(at + counter.size())) == size - size / 2);
}

TEST_CASE("an xz-compressed raw image is unpacked and converted", "[images]") {
  PullHost host;
  const auto raw = make_image(host.served.path(), "disk.raw", 2);
  REQUIRE(run_command("xz -0 -T1 '" + raw.string() + "'").exit_code == 0);
  const auto xz = raw.string() + ".xz";
  auto store = host.store(image_from(host.url("disk.raw.xz"), sha256_of(xz)));
  pulled(*store);
  const auto base = store->ready("debian-12");
  REQUIRE(base);
  CHECK_THAT(qemu_img_info(base->path), Catch::Contains("\"virtual-size\": 2097152"));
}

TEST_CASE("an image that names a backing file is refused: it could read the host's files",
          "[images]") {
  PullHost host;
  const auto backed = host.served.path() / "backed.qcow2";
  REQUIRE(run_command("qemu-img create -q -f qcow2 -F raw -b /etc/hostname -u '" + backed.string() +
                      "' 1M")
              .exit_code == 0);
  auto store = host.store(image_from(host.url("backed.qcow2"), sha256_of(backed)));
  CHECK_THROWS_WITH(pulled(*store), Catch::Contains("names another file (/etc/hostname)"));
  CHECK(host.files_in(host.bases()).empty());
}

TEST_CASE("no room for the image: refused cleanly, and pulled once there is room", "[images]") {
  PullHost host;
  const auto file = make_image(host.served.path(), "debian.qcow2", 4);
  auto store = host.store(image_from(host.url("debian.qcow2"), sha256_of(file)));
  host.disk.bytes = 1 << 20;
  CHECK_THROWS_WITH(pulled(*store), Catch::Contains("no room for the image"));
  CHECK(host.files_in(host.state.path() / "images" / "downloads").empty());
  CHECK(host.files_in(host.bases()).empty());
  host.disk.bytes = std::uint64_t{1} << 40U;
  CHECK(pulled(*store).phase == ImagePullState::Phase::ready);
}

TEST_CASE("a disk that fills up in the middle of a pull: refused cleanly, then pulled",
          "[images]") {
  PullHost host;
  const auto file = make_image(host.served.path(), "debian.qcow2", 24);
  auto store = host.store(image_from(host.url("debian.qcow2"), sha256_of(file)));
  host.disk.bytes_later = 0;  // room at the start, none at the next look (8 MiB in)
  CHECK_THROWS_WITH(pulled(*store),
                    Catch::Contains("the disk (or [pull] quota_gib) is full after"));
  CHECK(host.files_in(host.state.path() / "images" / "downloads").empty());
  CHECK(host.files_in(host.bases()).empty());
  host.disk.bytes_later = SettableDisk::kSame;
  host.disk.reset();
  CHECK(pulled(*store).phase == ImagePullState::Phase::ready);
}

TEST_CASE("what an image unpacks or converts to is checked against the room first", "[images]") {
  PullHost host;
  SECTION("an xz file of 64 MiB of zeros, a few KiB downloaded") {
    const auto raw = host.served.path() / "zeros.raw";
    REQUIRE(run_command("head -c 64M /dev/zero > '" + raw.string() + "' && xz -0 -T1 '" +
                        raw.string() + "'")
                .exit_code == 0);
    const auto xz = raw.string() + ".xz";
    auto store = host.store(image_from(host.url("zeros.raw.xz"), sha256_of(xz)));
    host.disk.bytes = 16U << 20U;
    CHECK_THROWS_WITH(pulled(*store),
                      Catch::Contains("no room for the unpacked image: it needs 64 MiB"));
  }
  SECTION("a compressed qcow2 that grows when converted") {
    const auto text = host.served.path() / "text.raw";
    const auto qcow2 = host.served.path() / "small.qcow2";
    REQUIRE(run_command("yes garm-edge | head -c 32M > '" + text.string() +
                        "' && qemu-img convert -c -f raw -O qcow2 '" + text.string() + "' '" +
                        qcow2.string() + "'")
                .exit_code == 0);
    REQUIRE(std::filesystem::file_size(qcow2) < (4U << 20U));
    auto store = host.store(image_from(host.url("small.qcow2"), sha256_of(qcow2)));
    host.disk.bytes = 8U << 20U;
    CHECK_THROWS_WITH(pulled(*store),
                      Catch::Contains("no room for the converted base: it needs 32 MiB"));
  }
  CHECK(host.files_in(host.state.path() / "images" / "downloads").empty());
  CHECK(host.files_in(host.bases()).empty());
  host.disk.bytes = std::uint64_t{1} << 40U;
}

/// The host's tools, with the first conversion held until the test lets it go (the others go
/// on at once).
class GatedTools final : public ImageTools {
 public:
  explicit GatedTools(ImageTools& real) : real_(real), released_(release_.get_future().share()) {}
  std::future<void> converting() { return entered_.get_future(); }
  void let_go() {
    if (!let_go_once_.exchange(true)) {
      release_.set_value();
    }
  }

  std::uint64_t unpacked_size(const std::filesystem::path& file,
                              const std::atomic<bool>& stop) override {
    return real_.unpacked_size(file, stop);
  }
  void decompress_xz(const std::filesystem::path& from, const std::filesystem::path& to,
                     std::uint64_t limit, const std::atomic<bool>& stop) override {
    real_.decompress_xz(from, to, limit, stop);
  }
  ImageFacts inspect(const std::filesystem::path& file, const std::string& format,
                     const std::atomic<bool>& stop) override {
    return real_.inspect(file, format, stop);
  }
  std::uint64_t converted_size(const std::filesystem::path& file, const std::string& format,
                               const std::atomic<bool>& stop) override {
    return real_.converted_size(file, format, stop);
  }
  void convert_to_qcow2(const std::filesystem::path& from, const std::string& format,
                        const std::filesystem::path& to, const std::atomic<bool>& stop) override {
    if (!entered_once_.exchange(true)) {
      entered_.set_value();
      released_.wait();
    }
    real_.convert_to_qcow2(from, format, to, stop);
  }

 private:
  ImageTools& real_;
  std::promise<void> entered_;
  std::atomic<bool> entered_once_{false};
  std::promise<void> release_;
  std::atomic<bool> let_go_once_{false};
  std::shared_future<void> released_;
};

/// Lets the gate go when the test ends, however it ends: a pull held there would never finish.
struct LetGoAtExit {
  GatedTools& tools;
  ~LetGoAtExit() { tools.let_go(); }
};

TEST_CASE("two pulls never count the same free bytes: the room one converts into is held",
          "[images]") {
  PullHost host;
  std::vector<ImageConfig> images;
  for (const std::string name : {"first", "second"}) {
    // 32 MiB of text in a compressed qcow2 of under 4 MiB: its base is 32 MiB.
    const auto text = host.served.path() / (name + ".raw");
    const auto qcow2 = host.served.path() / (name + ".qcow2");
    REQUIRE(run_command("yes garm-edge-" + name + " | head -c 32M > '" + text.string() +
                        "' && qemu-img convert -c -f raw -O qcow2 '" + text.string() + "' '" +
                        qcow2.string() + "'")
                .exit_code == 0);
    images.push_back(image_from(host.url(name + ".qcow2"), sha256_of(qcow2)));
    images.back().name = name;
  }
  GatedTools tools(host.tools);
  ImageStore store(images,
                   ImageStoreOptions{.state_dir = host.state.path(), .base_dir = host.bases()},
                   host.fetcher, tools, host.disk, host.log);
  host.disk.bytes = 48U << 20U;  // room for one base, not for two

  auto converting = tools.converting();
  auto first = std::async(std::launch::async, [&] { return store.pull_now("first", nullptr); });
  const LetGoAtExit let_go_at_exit{tools};
  REQUIRE(converting.wait_for(std::chrono::seconds(60)) == std::future_status::ready);
  // The first pull converts into 32 of the 48 MiB: the second finds 16 left, not 48.
  CHECK_THROWS_WITH(store.pull_now("second", nullptr),
                    Catch::Contains("no room for the converted base: it needs 32 MiB") &&
                        Catch::Contains("MiB held by other pulls"));
  tools.let_go();
  CHECK(first.get().phase == ImagePullState::Phase::ready);
  // Its hold ended with its conversion (a real disk now counts the base's bytes itself).
  CHECK(store.pull_now("second", nullptr).phase == ImagePullState::Phase::ready);
}

TEST_CASE("a download holds the size its server announced: another pull does not count it free",
          "[images]") {
  PullHost host;
  const auto first_file = make_image(host.served.path(), "first.raw", 4);
  const auto second_file = make_image(host.served.path(), "second.raw", 4);
  // The first image from a slow server, the second from the fast one: one fetcher trusts both.
  FakeGarm slow{FakeGarmOptions{.downloads = host.served.path(), .download_rate = 1U << 20U}};
  PullConfig both;
  both.ca_bundle = host.state.path() / "both-cas.pem";
  {
    std::ofstream bundle(both.ca_bundle);
    for (const auto& ca : {slow.pki().ca_certificate, host.server.pki().ca_certificate}) {
      bundle << std::ifstream(ca).rdbuf();
    }
  }
  HttpImageFetcher fetcher{both};
  auto first = image_from(slow.base_url() + "/downloads/first.raw", sha256_of(first_file));
  first.name = "first";
  auto second = image_from(host.url("second.raw"), sha256_of(second_file));
  second.name = "second";
  ImageStore store({first, second},
                   ImageStoreOptions{.state_dir = host.state.path(), .base_dir = host.bases()},
                   fetcher, host.tools, host.disk, host.log);
  host.disk.bytes = 6U << 20U;  // room for one 4 MiB download, not for two

  auto pulling = std::async(std::launch::async, [&] { return store.pull_now("first", nullptr); });
  for (int i = 0; i < 500 && store.state("first")->bytes == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  REQUIRE(store.state("first")->bytes > 0);
  // At 1 MiB/s the first download still has over 2 of its 4 MiB to come.
  CHECK_THROWS_WITH(
      store.pull_now("second", nullptr),
      Catch::Contains("no room for the image") && Catch::Contains("MiB held by other pulls"));
  CHECK(pulling.get().phase == ImagePullState::Phase::ready);
  CHECK(store.pull_now("second", nullptr).phase == ImagePullState::Phase::ready);
}

TEST_CASE("xz stops at the size its index promised: what its data holds beyond is refused",
          "[images]") {
  TempDir dir("xz-limit");
  const auto raw = dir.path() / "two.raw";
  REQUIRE(run_command("head -c 2M /dev/urandom > '" + raw.string() + "' && xz -0 -T1 '" +
                      raw.string() + "'")
              .exit_code == 0);
  HostImageTools tools{std::chrono::seconds(60)};
  const std::atomic<bool> stop{false};
  const auto xz = dir.path() / "two.raw.xz";
  CHECK(tools.unpacked_size(xz, stop) == 2U << 20U);
  CHECK_THROWS_AS(tools.decompress_xz(xz, dir.path() / "out", 1U << 20U, stop), ImagePullError);
  CHECK(std::filesystem::file_size(dir.path() / "out") <= 1U << 20U);
  tools.decompress_xz(xz, dir.path() / "out", 2U << 20U, stop);
  CHECK(std::filesystem::file_size(dir.path() / "out") == 2U << 20U);
}

TEST_CASE("a new version replaces the base, the old one stays while a guest backs onto it",
          "[images]") {
  PullHost host;
  const auto file = make_image(host.served.path(), "debian.qcow2", 1);
  const auto sums = host.served.path() / "SHA256SUMS";
  std::ofstream(sums) << sha256_of(file) << "  debian.qcow2\n";
  auto store = host.store(image_from(host.url("debian.qcow2"), "", host.url("SHA256SUMS")));
  pulled(*store);
  const auto old_base = store->ready("debian-12")->path;

  make_image(host.served.path(), "debian.qcow2", 1);  // the publisher's next build
  std::ofstream(sums) << sha256_of(file) << "  debian.qcow2\n";
  pulled(*store);
  const auto new_base = store->ready("debian-12")->path;
  CHECK(new_base != old_base);
  // With the agent's grace, a base replaced moments ago stays even when no record names it:
  // a create may have chosen it just before the swap.
  {
    auto careful = host.store(image_from(host.url("debian.qcow2"), "", host.url("SHA256SUMS")),
                              std::chrono::hours(1));
    careful->remove_unused([](const std::string&) { return false; });
    CHECK(std::filesystem::exists(old_base));
  }
  bool guest_up = true;
  // As InstanceService::base_in_use asks: a record from before base_path was kept makes any
  // pulled base count, which asks the store (it must not take its own lock again).
  const auto in_use = [&](const std::string& path) {
    return store->pulls("debian-12") && guest_up && path == old_base;
  };
  store->remove_unused(in_use);
  CHECK(std::filesystem::exists(old_base));
  guest_up = false;
  store->remove_unused(in_use);
  CHECK_FALSE(std::filesystem::exists(old_base));
  CHECK(std::filesystem::exists(new_base));
}

TEST_CASE("twenty asks for one image while it is pulled make one download", "[images]") {
  PullHost host;
  const auto file = make_image(host.served.path(), "debian.qcow2", 4);
  FakeGarm slow{FakeGarmOptions{.downloads = host.served.path(), .download_rate = 8U << 20U}};
  HttpImageFetcher fetcher{trusting(slow.pki())};
  ImageStore store({image_from(slow.base_url() + "/downloads/debian.qcow2", sha256_of(file))},
                   ImageStoreOptions{.state_dir = host.state.path(), .base_dir = host.bases()},
                   fetcher, host.tools, host.disk, host.log);
  store.tick();
  std::vector<std::future<bool>> asks;
  for (int i = 0; i < 20; ++i) {
    asks.push_back(std::async(std::launch::async, [&] {
      store.tick();
      return store.pull("debian-12");
    }));
  }
  for (auto& ask : asks) {
    CHECK_FALSE(ask.get());  // one is under way already
  }
  for (int i = 0; i < 200 && !store.ready("debian-12"); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  REQUIRE(store.ready("debian-12"));
  CHECK(downloads_in(slow, "debian.qcow2") == 1);
}
