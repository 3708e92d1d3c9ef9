#include "support/test_support.hpp"

#include <algorithm>
#include <arpa/inet.h>
#include <array>
#include <netinet/in.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>

#include "agent/daemon/demo.hpp"
#include "agent/instances/identifiers.hpp"

namespace garm_edge::testing {

using hypervisor::HypervisorError;

UniqueFd connect_loopback(std::uint16_t port, const std::string& source) {
  UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in from{};
  from.sin_family = AF_INET;
  if (fd.get() < 0 || ::inet_pton(AF_INET, source.c_str(), &from.sin_addr) != 1 ||
      ::bind(fd.get(), reinterpret_cast<const sockaddr*>(&from), sizeof from) != 0) {
    return UniqueFd();
  }
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(port);
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd.get(), reinterpret_cast<const sockaddr*>(&address), sizeof address) != 0) {
    return UniqueFd();
  }
  return fd;
}

bool send_client_hello_and_wait(int fd) {
  // TLS 1.2, ECDHE-ECDSA-AES128-GCM-SHA256 on P-256: what the agent's server accepts, so it
  // answers with its ServerHello ... CertificateRequest and then waits for the client's turn.
  std::vector<unsigned char> hello = {0x16, 0x03, 0x01, 0x00, 0x41,  // handshake record, 65 bytes
                                      0x01, 0x00, 0x00, 0x3d,        // ClientHello, 61 bytes
                                      0x03, 0x03};                   // TLS 1.2
  hello.insert(hello.end(), 32, 0x5a);                               // the client random
  const std::vector<unsigned char> rest = {
      0x00,                                                         // no session ID
      0x00, 0x02, 0xc0, 0x2b,                                       // one cipher suite
      0x01, 0x00,                                                   // no compression
      0x00, 0x12,                                                   // 18 bytes of extensions
      0x00, 0x0a, 0x00, 0x04, 0x00, 0x02, 0x00, 0x17,               // supported groups: P-256
      0x00, 0x0d, 0x00, 0x06, 0x00, 0x04, 0x04, 0x03, 0x05, 0x03};  // ECDSA, SHA-256 or -384
  hello.insert(hello.end(), rest.begin(), rest.end());
  if (::send(fd, hello.data(), hello.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(hello.size())) {
    return false;
  }
  pollfd ready{.fd = fd, .events = POLLIN, .revents = 0};
  std::array<char, 4096> answer{};
  return ::poll(&ready, 1, 10000) == 1 && ::recv(fd, answer.data(), answer.size(), 0) > 0;
}

void raise_descriptor_limit(std::size_t descriptors) {
  rlimit limit{};
  ::getrlimit(RLIMIT_NOFILE, &limit);
  if (limit.rlim_cur < descriptors) {
    limit.rlim_cur = std::min<rlim_t>(descriptors, limit.rlim_max);
    ::setrlimit(RLIMIT_NOFILE, &limit);
  }
}

std::string fixture_uri(const std::string& fixture) {
  return std::string("test://") + GARM_EDGE_TEST_DATA_DIR + "/" + fixture;
}

agent::ImageConfig debian_image(const std::string& name, const std::string& base) {
  const bool is_path = base.front() == '/';
  return agent::ImageConfig{.name = name,
                            .base_volume = is_path ? "" : base,
                            .base_path = is_path ? base : "",
                            .base_format = "qcow2",
                            .os_type = wire::OsType::linux,
                            .os_name = "debian",
                            .os_version = "12",
                            .arch = wire::OsArch::amd64,
                            .source = std::nullopt};
}

wire::ProviderInstance without_addresses(wire::ProviderInstance instance) {
  instance.addresses.clear();
  return instance;
}

std::vector<wire::ProviderInstance> listed(const std::vector<wire::ProviderInstance>& instances) {
  std::vector<wire::ProviderInstance> result;
  for (const auto& instance : instances) {
    result.push_back(without_addresses(instance));
  }
  return result;
}

wire::BootstrapInstance bootstrap_for(const std::string& name, const std::string& pool) {
  auto b = agent::demo_bootstrap(name, pool);  // image debian-12, flavor small
  b.callback_url = "https://garm.example.com/api/v1/callbacks";
  b.metadata_url = "https://garm.example.com/api/v1/metadata";
  b.instance_token = "secret-token-must-never-appear";
  b.extra_specs = nlohmann::json::object();
  b.tools = std::vector<wire::RunnerApplicationDownload>{
      {.os = "linux",
       .architecture = "x64",
       .download_url = "https://github.com/actions/runner/releases/download/v2.330.0/"
                       "actions-runner-linux-x64-2.330.0.tar.gz",
       .filename = "actions-runner-linux-x64-2.330.0.tar.gz",
       .temp_download_token = std::nullopt,
       .sha256_checksum = std::string(64, 'a')}};
  return b;
}

void CapturingLogger::log(agent::Level level, std::string_view message) {
  std::lock_guard lock(mutex_);
  lines_.push_back("<" + std::to_string(static_cast<int>(level)) + ">" + std::string(message));
}

std::vector<std::string> CapturingLogger::lines() const {
  std::lock_guard lock(mutex_);
  return lines_;
}

namespace {

agent::AgentConfig fixture_config(const std::string& fixture,
                                  const std::filesystem::path& state_dir,
                                  const std::function<void(agent::AgentConfig&)>& adjust) {
  agent::AgentConfig config;
  config.agent_id = kAgentId;
  config.state_dir = state_dir;
  config.libvirt.uri = fixture_uri(fixture);
  config.libvirt.call_timeout = std::chrono::seconds(10);
  config.storage_pool = "edge-pool";
  config.network = "edge-net";
  config.images.push_back(debian_image("debian-12", "debian-12.qcow2"));
  config.images.push_back({.name = "ubuntu-arm",
                           .base_volume = "",
                           .base_path = "/srv/images/noble-arm64.qcow2",
                           .base_format = "qcow2",
                           .os_type = wire::OsType::linux,
                           .os_name = "ubuntu",
                           .os_version = "24.04",
                           .arch = wire::OsArch::arm64,
                           .source = std::nullopt});
  config.flavors.push_back({.name = "small", .vcpus = 2, .memory_mib = 2048, .disk_gib = 20});
  // Tests create hundreds of instances on a fixture host of 8 CPUs and 32 GiB.
  config.capacity = {.cpu_overcommit = 1000,
                     .memory_overcommit = 1000,
                     .reserved_memory_mib = 0,
                     .max_instances = 0};
  if (adjust) {
    adjust(config);
  }
  return config;
}

}  // namespace

Host::Host(const std::string& fixture, const std::function<void(agent::AgentConfig&)>& adjust)
    : config(fixture_config(fixture, state.path() / "state", adjust)),
      hypervisor(config.libvirt),
      store(config.state_dir) {}

std::unique_ptr<agent::InstanceService> Host::service(hypervisor::Hypervisor& hv,
                                                      agent::InstanceStore& records) {
  return std::make_unique<agent::InstanceService>(config, hv, records, clock, log);
}

void enable_guest_addresses(agent::AgentConfig& config, const std::string& addresses) {
  config.guests.enabled = true;
  config.guests.addresses = addresses;
  config.guests.address_quarantine = std::chrono::hours(1);
  config.guests.anti_spoofing = agent::AntiSpoofing::off;  // the test driver has no nwfilters
}

ServedGuests::ServedGuests(const agent::AgentConfig& config, hypervisor::Hypervisor& hypervisor,
                           agent::Logger& log)
    : access(config, hypervisor, log) {
  access.start();
}

bool Host::holds_nothing_of(const std::string& controller, const std::string& name) {
  const auto domain_name = agent::domain_name_for(controller, name);
  return !hypervisor.find_by_name(domain_name) &&
         !hypervisor.find_volume(config.storage_pool, agent::volume_name_for(domain_name)) &&
         !store.get(domain_name);
}

std::size_t Host::tagged_domain_count() {
  return hypervisor.list({}).size();
}

// ---- FaultyHypervisor -----------------------------------------------------------------------

template <class Fn>
auto FaultyHypervisor::intercept(const std::string& operation, Fn fn) {
  if (crash_.dead) {
    throw HypervisorError(HypervisorError::Kind::unavailable, operation + ": the agent is dead");
  }
  if (operation == fail_on_) {
    throw HypervisorError(HypervisorError::Kind::failed, "injected failure in " + operation);
  }
  if (before) {
    before(operation);
  }
  if constexpr (std::is_void_v<decltype(fn())>) {
    fn();
    after_success(operation);
  } else {
    auto result = fn();
    after_success(operation);
    return result;
  }
}

std::optional<hypervisor::Domain> FaultyHypervisor::rewritten(
    std::optional<hypervisor::Domain> found) const {
  if (found && rewrite_found) {
    rewrite_found(*found);
  }
  return found;
}

void FaultyHypervisor::after_success(const std::string& operation) {
  if (after) {
    after(operation);
  }
  crash_.dead = crash_.dead || operation == crash_after_;
  if (operation == fail_after_) {
    throw HypervisorError(HypervisorError::Kind::timeout,
                          "injected failure after " + operation + " took effect");
  }
}

hypervisor::Domain FaultyHypervisor::define(const hypervisor::DomainSpec& spec) {
  if (defining) {
    defining(spec);
  }
  return intercept("define", [&] { return inner_.define(spec); });
}
void FaultyHypervisor::start(std::string_view uuid) {
  intercept("start", [&] { inner_.start(uuid); });
}
void FaultyHypervisor::shutdown(std::string_view uuid, std::chrono::milliseconds grace) {
  intercept("shutdown", [&] { inner_.shutdown(uuid, grace); });
}
bool FaultyHypervisor::destroy(std::string_view uuid) {
  return intercept("destroy", [&] { return inner_.destroy(uuid); });
}
bool FaultyHypervisor::undefine(std::string_view uuid) {
  return intercept("undefine", [&] { return inner_.undefine(uuid); });
}
void FaultyHypervisor::save(std::string_view uuid, const std::string& path) {
  intercept("save", [&] { inner_.save(uuid, path); });
}
void FaultyHypervisor::restore(const std::string& path) {
  intercept("restore", [&] { inner_.restore(path); });
}
std::optional<hypervisor::Domain> FaultyHypervisor::find_by_uuid(std::string_view uuid) {
  return intercept("find_by_uuid", [&] { return rewritten(inner_.find_by_uuid(uuid)); });
}
std::optional<hypervisor::Domain> FaultyHypervisor::find_by_name(std::string_view name) {
  return intercept("find_by_name", [&] { return rewritten(inner_.find_by_name(name)); });
}
std::vector<hypervisor::Domain> FaultyHypervisor::list(const hypervisor::Tags& filter) {
  return intercept("list", [&] { return inner_.list(filter); });
}
void FaultyHypervisor::set_tags(std::string_view uuid, const hypervisor::Tags& tags) {
  intercept("set_tags", [&] { inner_.set_tags(uuid, tags); });
}

std::vector<std::string> FaultyHypervisor::disk_paths(std::string_view uuid) {
  return intercept("disk_paths", [&] { return inner_.disk_paths(uuid); });
}
hypervisor::Volume FaultyHypervisor::create_overlay(const hypervisor::VolumeSpec& spec) {
  return intercept("create_overlay", [&] { return inner_.create_overlay(spec); });
}
std::optional<hypervisor::Volume> FaultyHypervisor::find_volume(std::string_view pool,
                                                                std::string_view name) {
  return intercept("find_volume", [&] { return inner_.find_volume(pool, name); });
}
bool FaultyHypervisor::delete_volume(std::string_view pool, std::string_view name) {
  return intercept("delete_volume", [&] { return inner_.delete_volume(pool, name); });
}
std::vector<std::string> FaultyHypervisor::list_volumes(std::string_view pool) {
  return intercept("list_volumes", [&] { return inner_.list_volumes(pool); });
}
std::string FaultyHypervisor::pool_path(std::string_view pool) {
  return intercept("pool_path", [&] { return inner_.pool_path(pool); });
}
hypervisor::HypervisorHealth FaultyHypervisor::health() {
  try {
    return intercept("health", [&] { return inner_.health(); });
  } catch (const std::exception& e) {
    return {.reachable = false, .detail = e.what()};
  }
}

hypervisor::HostCapacity FaultyHypervisor::capacity() {
  return intercept("capacity", [&] { return inner_.capacity(); });
}
hypervisor::NetworkInfo FaultyHypervisor::network(std::string_view name) {
  return intercept("network", [&] { return inner_.network(name); });
}
void FaultyHypervisor::add_dhcp_host(std::string_view network, const hypervisor::DhcpHost& host) {
  intercept("add_dhcp_host", [&] { inner_.add_dhcp_host(network, host); });
}
bool FaultyHypervisor::remove_dhcp_host(std::string_view network,
                                        const hypervisor::DhcpHost& host) {
  return intercept("remove_dhcp_host", [&] { return inner_.remove_dhcp_host(network, host); });
}
bool FaultyHypervisor::has_filter(std::string_view name) {
  return intercept("has_filter", [&] { return inner_.has_filter(name); });
}
void FaultyHypervisor::define_source_ip_filter(std::string_view name) {
  intercept("define_source_ip_filter", [&] { inner_.define_source_ip_filter(name); });
}

// ---- FaultyStore ----------------------------------------------------------------------------

template <class Fn>
auto FaultyStore::intercept(const std::string& operation, Fn fn) {
  if (crash_.dead) {
    throw agent::StoreError(operation + ": the agent is dead");
  }
  if (operation == fail_on_) {
    throw agent::StoreError("injected failure in " + operation);
  }
  if constexpr (std::is_void_v<decltype(fn())>) {
    fn();
    crash_.dead = crash_.dead || operation == crash_after_;
  } else {
    auto result = fn();
    crash_.dead = crash_.dead || operation == crash_after_;
    return result;
  }
}

void FaultyStore::put(const agent::InstanceRecord& record) {
  intercept("put:" + std::string(agent::to_string(record.intent)), [&] { inner_.put(record); });
}
std::optional<agent::InstanceRecord> FaultyStore::get(std::string_view domain_name) {
  return intercept("get", [&] { return inner_.get(domain_name); });
}
bool FaultyStore::contains(std::string_view domain_name) {
  return intercept("contains", [&] { return inner_.contains(domain_name); });
}
void FaultyStore::remove(std::string_view domain_name) {
  intercept("remove", [&] { inner_.remove(domain_name); });
}
std::vector<agent::InstanceRecord> FaultyStore::list() {
  return intercept("list", [&] { return inner_.list(); });
}

}  // namespace garm_edge::testing
