#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "agent/base/config.hpp"
#include "agent/guests/guest_access.hpp"
#include "agent/guests/guest_attachments.hpp"
#include "agent/guests/guest_index.hpp"
#include "agent/instances/cache_generations.hpp"
#include "agent/instances/image_bases.hpp"
#include "agent/instances/instance_service.hpp"
#include "agent/instances/instance_store.hpp"
#include "common/temp_dir.hpp"
#include "common/unique_fd.hpp"
#include "hypervisor/libvirt_hypervisor.hpp"

namespace garm_edge::testing {

inline const std::string kController = "9dcf590a-1192-4a9c-b3e4-e0902974c2c0";
inline const std::string kOtherController = "5a3e2b1c-0d9f-4e8a-b7c6-d5e4f3a2b1c0";
inline const std::string kPool = "0f1e2d3c-4b5a-4968-8776-a5b4c3d2e1f0";
inline const std::string kOtherPool = "1a2b3c4d-5e6f-4a7b-8c9d-0e1f2a3b4c5d";
inline const std::string kAgentId = "test-agent";
/// garm-provider-edge as built beside these tests.
inline const std::string kProvider = GARM_PROVIDER_EDGE_BIN;
inline const auto kControllerId = agent::ControllerId::parse(kController);
inline const auto kOtherControllerId = agent::ControllerId::parse(kOtherController);

// What the control API parses from a request, for tests that call the service directly.
inline agent::ControllerId cid(std::string_view text) {
  return agent::ControllerId::parse(text);
}
inline agent::InstanceRef instance_ref(std::string_view text) {
  return agent::InstanceRef::parse(text);
}
inline agent::PoolId pool_id(std::string_view text) {
  return agent::PoolId::parse(text);
}

/// `test:///<abs path>` of a fixture in tests/data. Every connection to such a URI gets its
/// own fresh copy of the fixture, so tests never see each other's domains.
std::string fixture_uri(const std::string& fixture);

/// A Debian 12 amd64 image whose base is `base` (a volume name, or an absolute path).
agent::ImageConfig debian_image(const std::string& name, const std::string& base);

/// Listings carry no addresses (see hypervisor::Domain::addresses); compare them without.
wire::ProviderInstance without_addresses(wire::ProviderInstance instance);
std::vector<wire::ProviderInstance> listed(const std::vector<wire::ProviderInstance>& instances);

wire::BootstrapInstance bootstrap_for(const std::string& name, const std::string& pool = kPool);

/// A blocking TCP connection to 127.0.0.1:`port` that says nothing; -1 inside when it failed.
UniqueFd connect_loopback(std::uint16_t port, const std::string& source = "127.0.0.1");
/// Sends a TLS 1.2 ClientHello the agent accepts and waits for the server's first answer: a
/// handshake the server has taken up and that then stalls. False if no answer came.
bool send_client_hello_and_wait(int fd);
/// Lets this process hold `descriptors` open files (for floods of connections).
void raise_descriptor_limit(std::size_t descriptors);

class CapturingLogger final : public agent::Logger {
 public:
  void log(agent::Level level, std::string_view message) override;
  std::vector<std::string> lines() const;

 private:
  mutable std::mutex mutex_;
  std::vector<std::string> lines_;
};

/// One host: a libvirt connection on a fixture and a state directory. Services built from it
/// play the part of agent processes; a second service over the same host is an agent after a
/// restart.
/// Images as if agent/images pulled "debian-12": `base` once it is ready, `error` after a failed
/// pull; counts the pulls asked for.
class FakeImageBases final : public agent::ImageBases {
 public:
  std::optional<agent::ImageBase> base;
  std::string error;

  bool pulls(const std::string& image) const override { return image == "debian-12"; }
  std::optional<agent::ImageBase> ready(const std::string&) const override { return base; }
  std::optional<agent::ImagePullState> state(const std::string& image) const override {
    agent::ImagePullState state;
    state.name = image;
    state.error = error;
    state.has_base = base.has_value();
    return state;
  }
  std::vector<agent::ImagePullState> states() const override { return {*state("debian-12")}; }
  int pulls_asked = 0;
  bool pull(const std::string&) override { return ++pulls_asked == 1; }
  void remove_unused(const std::function<bool(const std::string&)>&) override {}
};

/// Caches as if agent/caches refreshed them: "docker" at generation 3, "tools" at 1 (while
/// `tools_ready`), both of kController; counts the refreshes asked for.
class FakeCacheGenerations final : public agent::CacheGenerations {
 public:
  static constexpr const char* kDockerGeneration = "/srv/caches/docker/gen-3.qcow2";
  bool tools_ready = true;
  int refreshes_asked = 0;

  std::optional<agent::CacheGeneration> current(const std::string& cache) const override {
    if (cache == "docker") {
      return agent::CacheGeneration{.cache = cache, .number = 3, .path = kDockerGeneration};
    }
    if (cache == "tools" && tools_ready) {
      return agent::CacheGeneration{
          .cache = cache, .number = 1, .path = "/srv/caches/tools/gen-1.qcow2"};
    }
    return std::nullopt;
  }
  void remove_unused(const std::function<bool(const std::string&)>&) override {}
  std::vector<agent::CacheStatus> statuses() const override {
    return {{.name = "docker",
             .controller = kController,
             .generation = 3,
             .made_at = "2026-11-28T06:00:00Z",
             .refreshing = refreshes_asked > 0,
             .error = ""},
            {.name = "tools",
             .controller = kController,
             .generation = tools_ready ? 1U : 0U,
             .made_at = "",
             .refreshing = false,
             .error = tools_ready ? "" : "the refresh script exited with 1: no network"}};
  }
  bool refresh(const std::string&) override { return ++refreshes_asked == 1; }
};

class Host {
 public:
  explicit Host(const std::string& fixture,
                const std::function<void(agent::AgentConfig&)>& adjust = {});

  std::unique_ptr<agent::InstanceService> service(hypervisor::Hypervisor& hypervisor,
                                                  agent::InstanceStore& store);
  std::unique_ptr<agent::InstanceService> service() { return service(hypervisor, store); }

  /// No domain, no overlay volume and no record for the instance: nothing was leaked.
  bool holds_nothing_of(const std::string& controller, const std::string& name);
  std::size_t tagged_domain_count();

  TempDir state;
  agent::AgentConfig config;
  hypervisor::LibvirtHypervisor hypervisor;
  agent::FileInstanceStore store;
  agent::SystemClock clock;
  CapturingLogger log;
};

/// Turns `config`'s guest side on for guests at `addresses` ("first-last" on the fixtures'
/// edge-net), each address resting an hour once given back: for the whole test.
void enable_guest_addresses(agent::AgentConfig& config, const std::string& addresses);

/// The guest side of an agent with `[guests]`: its address range, reservations and index, but
/// no guest service listening. It must outlive the services it serves.
struct ServedGuests {
  ServedGuests(const agent::AgentConfig& config, hypervisor::Hypervisor& hypervisor,
               agent::Logger& log);
  void serve(agent::InstanceService& service) { service.serve_guests(attachments); }

  agent::GuestIndex index;
  agent::GuestAccess access;
  agent::GuestAttachments attachments{access, index, nullptr};
};

/// Shared by the fault-injecting decorators: once tripped, every later call fails, as if the
/// agent process had been killed at that point.
struct CrashSwitch {
  std::atomic<bool> dead{false};
};

/// Wraps a real hypervisor and fails chosen operations: `fail_on` throws instead of running the
/// named operation; `fail_after` runs it, then throws (as when a call takes effect but its
/// answer is lost or late); `crash_after` runs it, then kills everything after it.
class FaultyHypervisor final : public hypervisor::Hypervisor {
 public:
  FaultyHypervisor(hypervisor::Hypervisor& inner, CrashSwitch& crash)
      : inner_(inner), crash_(crash) {}

  void fail_on(std::string operation) { fail_on_ = std::move(operation); }
  void fail_after(std::string operation) { fail_after_ = std::move(operation); }
  void crash_after(std::string operation) { crash_after_ = std::move(operation); }
  /// Called with each operation's name before it runs (for counting, sleeping, ...).
  /// Applied to every domain find_by_uuid and find_by_name return (to fake a state).
  std::function<void(hypervisor::Domain&)> rewrite_found;
  std::function<void(const std::string&)> before;
  /// Sees each domain spec handed to define.
  std::function<void(const hypervisor::DomainSpec&)> defining;
  std::function<void(const std::string&)> after;

  std::string domain_xml(const hypervisor::DomainSpec& spec) const override {
    return inner_.domain_xml(spec);
  }
  hypervisor::Domain define(const hypervisor::DomainSpec& spec) override;
  void start(std::string_view uuid) override;
  void shutdown(std::string_view uuid, std::chrono::milliseconds grace) override;
  bool destroy(std::string_view uuid) override;
  bool undefine(std::string_view uuid) override;
  void save(std::string_view uuid, const std::string& path) override;
  void restore(const std::string& path) override;
  std::optional<hypervisor::Domain> find_by_uuid(std::string_view uuid) override;
  std::optional<hypervisor::Domain> find_by_name(std::string_view name) override;
  std::vector<hypervisor::Domain> list(const hypervisor::Tags& filter) override;
  std::vector<std::string> disk_paths(std::string_view uuid) override;
  void set_tags(std::string_view uuid, const hypervisor::Tags& tags) override;
  hypervisor::Volume create_overlay(const hypervisor::VolumeSpec& spec) override;
  std::optional<hypervisor::Volume> find_volume(std::string_view pool,
                                                std::string_view name) override;
  bool delete_volume(std::string_view pool, std::string_view name) override;
  std::vector<std::string> list_volumes(std::string_view pool) override;
  std::string pool_path(std::string_view pool) override;
  hypervisor::HostCapacity capacity() override;
  hypervisor::HypervisorHealth health() override;
  hypervisor::NetworkInfo network(std::string_view name) override;
  void add_dhcp_host(std::string_view network, const hypervisor::DhcpHost& host) override;
  bool remove_dhcp_host(std::string_view network, const hypervisor::DhcpHost& host) override;
  bool has_filter(std::string_view name) override;
  void define_source_ip_filter(std::string_view name) override;

 private:
  template <class Fn>
  auto intercept(const std::string& operation, Fn fn);
  void after_success(const std::string& operation);
  std::optional<hypervisor::Domain> rewritten(std::optional<hypervisor::Domain> found) const;

  hypervisor::Hypervisor& inner_;
  CrashSwitch& crash_;
  std::string fail_on_;
  std::string fail_after_;
  std::string crash_after_;
};

/// Wraps a store the same way; operations are "put:<intent>", "remove", "get", "contains",
/// "list".
class FaultyStore final : public agent::InstanceStore {
 public:
  FaultyStore(agent::InstanceStore& inner, CrashSwitch& crash) : inner_(inner), crash_(crash) {}

  void fail_on(std::string operation) { fail_on_ = std::move(operation); }
  void crash_after(std::string operation) { crash_after_ = std::move(operation); }

  void put(const agent::InstanceRecord& record) override;
  std::optional<agent::InstanceRecord> get(std::string_view domain_name) override;
  bool contains(std::string_view domain_name) override;
  void remove(std::string_view domain_name) override;
  std::vector<agent::InstanceRecord> list() override;
  std::vector<std::string> unreadable() override { return inner_.unreadable(); }
  const std::string& state_id() const override { return inner_.state_id(); }

 private:
  template <class Fn>
  auto intercept(const std::string& operation, Fn fn);

  agent::InstanceStore& inner_;
  CrashSwitch& crash_;
  std::string fail_on_;
  std::string crash_after_;
};

}  // namespace garm_edge::testing
