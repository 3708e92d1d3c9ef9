// The arithmetic of a shared host (docs/shares.md): quotas, reservations and the priority
// headroom, each alone and together, as admission and as the room placement is told of.
#include "agent/instances/shares.hpp"

#include <catch2/catch.hpp>

using namespace garm_edge;
using namespace garm_edge::agent;
using wire::Priority;

namespace {

const std::string kA = "aaaaaaaa-0000-4000-8000-000000000001";
const std::string kB = "bbbbbbbb-0000-4000-8000-000000000002";
const std::string kC = "cccccccc-0000-4000-8000-000000000003";

/// One small guest: 2 vCPUs, 2 GiB, one instance.
constexpr Resources kSmall{.vcpus = 2, .memory_mib = 2048, .instances = 1, .disk_gib = 0};
/// A host of 8 instances, 16 vCPUs, 16 GiB; disk not counted.
constexpr Resources kHost{.vcpus = 16, .memory_mib = 16384, .instances = 8, .disk_gib = 0};

Usage usage_of(const std::map<std::string, int>& smalls) {
  Usage usage;
  for (const auto& [controller, count] : smalls) {
    for (int i = 0; i < count; ++i) {
      usage.total += kSmall;
      usage.by_controller[controller] += kSmall;
    }
  }
  return usage;
}

std::optional<RefusalReason> refused(const SharesConfig& config, const Usage& usage,
                                     const std::string& controller,
                                     Priority priority = Priority::normal,
                                     const Resources& limit = kHost) {
  const auto refusal = HostShares(config, usage, limit, std::nullopt)
                           .admit(controller, priority, kSmall, {}, "host-1");
  return refusal ? std::optional(refusal->reason) : std::nullopt;
}

}  // namespace

TEST_CASE("shares: without [[quotas]] or [headroom] only the host's room counts", "[shares]") {
  const SharesConfig none;
  CHECK_FALSE(refused(none, usage_of({{kA, 7}}), kB));
  CHECK(refused(none, usage_of({{kA, 8}}), kB) == RefusalReason::capacity);
  const auto share = HostShares(none, usage_of({{kA, 3}}), kHost, std::nullopt).share_of(kA);
  CHECK(share.used == Resources{.vcpus = 6, .memory_mib = 6144, .instances = 3, .disk_gib = 0});
  CHECK(share.room.at(Priority::low).instances == 5);
  CHECK(share.room.at(Priority::high).vcpus == 10);
}

TEST_CASE("shares: a quota caps its controller only, and says what it holds", "[shares]") {
  SharesConfig config;
  config.quotas.push_back({.controller = kA, .max = {.instances = 3}, .reserved = {}});
  CHECK_FALSE(refused(config, usage_of({{kA, 2}}), kA));
  CHECK(refused(config, usage_of({{kA, 3}}), kA) == RefusalReason::quota);
  CHECK_FALSE(refused(config, usage_of({{kA, 3}, {kB, 4}}), kB));  // B is not A
  const auto refusal = HostShares(config, usage_of({{kA, 3}}), kHost, std::nullopt)
                           .admit(kA, Priority::normal, kSmall, {}, "host-1");
  REQUIRE(refusal);
  CHECK_THAT(refusal->message, Catch::Contains(kA) && Catch::Contains("host-1") &&
                                   Catch::Contains("holds 3 instances of at most 3 instances"));
  // A vCPU quota counts vCPUs: two smalls take 4 of 5.
  config.quotas[0].max = {.vcpus = 5};
  CHECK(refused(config, usage_of({{kA, 2}}), kA) == RefusalReason::quota);
  const auto share = HostShares(config, usage_of({{kA, 2}}), kHost, std::nullopt).share_of(kA);
  CHECK(share.room.at(Priority::normal).vcpus == 1);
  CHECK(share.instances_bounded);  // the host bounds instances
}

TEST_CASE("shares: a reservation keeps its unused part from other controllers", "[shares]") {
  SharesConfig config;
  config.quotas.push_back({.controller = kB, .max = {}, .reserved = {.instances = 2}});
  // A fills 6 of 8: the last 2 are B's.
  CHECK(refused(config, usage_of({{kA, 6}}), kA) == RefusalReason::reserved);
  CHECK_FALSE(refused(config, usage_of({{kA, 6}}), kB));
  CHECK_FALSE(refused(config, usage_of({{kA, 6}, {kB, 1}}), kB));
  // What B uses of its reservation is no longer kept: with B at 2, A may take the rest.
  CHECK_FALSE(refused(config, usage_of({{kA, 5}, {kB, 2}}), kA));
  CHECK(refused(config, usage_of({{kA, 6}, {kB, 2}}), kA) == RefusalReason::capacity);
  // A controller without a [[quotas]] entry (C) sees the same reservation.
  CHECK(refused(config, usage_of({{kA, 6}}), kC) == RefusalReason::reserved);
  const HostShares shares(config, usage_of({{kA, 4}}), kHost, std::nullopt);
  CHECK(shares.share_of(kA).room.at(Priority::normal).instances == 2);
  CHECK(shares.share_of(kB).room.at(Priority::normal).instances == 4);
}

TEST_CASE("shares: low priority leaves the headroom, high takes it, a reservation stays whole",
          "[shares]") {
  SharesConfig config;
  config.headroom.low = {.instances = 2};
  config.headroom.normal = {.instances = 1};
  const auto six = usage_of({{kA, 5}});  // 3 of 8 left
  CHECK_FALSE(refused(config, six, kA, Priority::low));
  CHECK(refused(config, usage_of({{kA, 6}}), kA, Priority::low) == RefusalReason::priority);
  CHECK_FALSE(refused(config, usage_of({{kA, 6}}), kA, Priority::normal));
  CHECK(refused(config, usage_of({{kA, 7}}), kA, Priority::normal) == RefusalReason::priority);
  CHECK_FALSE(refused(config, usage_of({{kA, 7}}), kA, Priority::high));
  // The operator caps a controller's priority: B's high is normal.
  config.quotas.push_back(
      {.controller = kB, .max = {}, .reserved = {}, .max_priority = Priority::normal});
  CHECK(refused(config, usage_of({{kA, 7}}), kB, Priority::high) == RefusalReason::priority);
  // A reservation is its controller's at any priority: the headroom applies beyond it.
  config.quotas[0].reserved = {.instances = 2};
  CHECK_FALSE(refused(config, usage_of({{kA, 6}}), kB, Priority::low));
  CHECK_FALSE(refused(config, usage_of({{kA, 6}, {kB, 1}}), kB, Priority::low));
  const auto refusal = HostShares(config, usage_of({{kA, 6}}), kHost, std::nullopt)
                           .admit(kA, Priority::low, kSmall, {}, "host-1");
  REQUIRE(refusal);
  CHECK(refusal->reason == RefusalReason::reserved);
}

TEST_CASE("shares: a warm guest counts for its controller and leaves one more free", "[shares]") {
  SharesConfig config;
  config.quotas.push_back({.controller = kA, .max = {.instances = 3}, .reserved = {}});
  const auto admit = [&](const Usage& usage) {
    const auto refusal = HostShares(config, usage, kHost, std::nullopt)
                             .admit(kA, Priority::low, kSmall, kSmall, "host-1");
    return refusal ? std::optional(refusal->reason) : std::nullopt;
  };
  // The room kept for a cold create is not A's to count: at 2 of 3 a warm guest may start.
  CHECK_FALSE(admit(usage_of({{kA, 2}})));
  CHECK(admit(usage_of({{kA, 3}})) == RefusalReason::quota);
  // ...but the host must have room for it and one more.
  CHECK(admit(usage_of({{kA, 1}, {kB, 6}})) == RefusalReason::capacity);
}

TEST_CASE("shares: instances unbounded by the host and the quota report no instance room",
          "[shares]") {
  SharesConfig config;
  const Resources unbounded{.vcpus = 16, .memory_mib = 16384, .instances = 0, .disk_gib = 0};
  auto share = HostShares(config, usage_of({{kA, 1}}), unbounded, std::nullopt).share_of(kA);
  CHECK_FALSE(share.instances_bounded);
  CHECK(share.room.at(Priority::normal).instances == 0);
  CHECK(share.room.at(Priority::normal).vcpus == 14);
  CHECK_FALSE(refused(config, usage_of({{kA, 7}}), kA, Priority::normal, unbounded));
  config.quotas.push_back({.controller = kA, .max = {.instances = 4}, .reserved = {}});
  share = HostShares(config, usage_of({{kA, 1}}), unbounded, std::nullopt).share_of(kA);
  CHECK(share.instances_bounded);
  CHECK(share.room.at(Priority::normal).instances == 3);
}

TEST_CASE("shares: reservations beyond the free room never make room out of nothing", "[shares]") {
  SharesConfig config;
  config.quotas.push_back({.controller = kA, .max = {}, .reserved = {.instances = 6}});
  config.quotas.push_back({.controller = kB, .max = {}, .reserved = {.instances = 6}});
  const HostShares shares(config, usage_of({{kC, 4}}), kHost, std::nullopt);
  CHECK(shares.share_of(kA).room.at(Priority::normal).instances == 4);  // only 4 are free
  CHECK(shares.share_of(kC).room.at(Priority::high).instances == 0);
  // Guest addresses bound the free room too.
  const HostShares few_addresses(config, usage_of({}), kHost, std::size_t{1});
  CHECK(few_addresses.share_of(kA).room.at(Priority::normal).instances == 1);
}
