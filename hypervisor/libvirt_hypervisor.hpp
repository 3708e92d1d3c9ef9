#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "hypervisor/call_runner.hpp"
#include "hypervisor/guest_arch.hpp"
#include "hypervisor/hypervisor.hpp"
#include "hypervisor/libvirt_options.hpp"

namespace garm_edge::hypervisor {

namespace libvirt {
class Session;
}

/// Hypervisor over the libvirt C API. Every operation runs on a worker with a deadline; the
/// connection is shared and reopened on the next call after the daemon goes away.
class LibvirtHypervisor final : public Hypervisor {
 public:
  /// Connects at once so a wrong URI fails at startup. Throws HypervisorError.
  explicit LibvirtHypervisor(LibvirtOptions options);
  ~LibvirtHypervisor() override;

  std::string domain_xml(const DomainSpec& spec) const override;
  Domain define(const DomainSpec& spec) override;
  void start(std::string_view uuid) override;
  void shutdown(std::string_view uuid, std::chrono::milliseconds grace) override;
  bool destroy(std::string_view uuid) override;
  bool undefine(std::string_view uuid) override;
  void save(std::string_view uuid, const std::string& path) override;
  void restore(const std::string& path) override;
  std::optional<Domain> find_by_uuid(std::string_view uuid) override;
  std::optional<Domain> find_by_name(std::string_view name) override;
  std::vector<Domain> list(const Tags& filter) override;
  std::vector<std::string> disk_paths(std::string_view uuid) override;
  void set_tags(std::string_view uuid, const Tags& tags) override;
  Volume create_overlay(const VolumeSpec& spec) override;
  std::optional<Volume> find_volume(std::string_view pool, std::string_view name) override;
  bool delete_volume(std::string_view pool, std::string_view name) override;
  std::vector<std::string> list_volumes(std::string_view pool) override;
  std::string pool_path(std::string_view pool) override;
  HostCapacity capacity() override;
  HypervisorHealth health() override;
  NetworkInfo network(std::string_view name) override;
  void add_dhcp_host(std::string_view network, const DhcpHost& host) override;
  bool remove_dhcp_host(std::string_view network, const DhcpHost& host) override;
  bool has_filter(std::string_view name) override;
  void define_source_ip_filter(std::string_view name) override;

  VirtType virt_type_for(GuestArch arch) const;

 private:
  template <class Fn>
  auto call(const std::string& what, Fn fn);
  template <class Fn>
  auto call_within(std::chrono::milliseconds deadline, const std::string& what, Fn fn);

  LibvirtOptions options_;
  std::map<GuestArch, VirtType> virt_types_;
  bool nested_virtualization_ = false;
  std::shared_ptr<libvirt::Session> session_;
  CallRunner runner_;
  /// Reopens a lost connection in the background and keeps the health answer fresh.
  class ConnectionMonitor;
  std::unique_ptr<ConnectionMonitor> monitor_;
};

}  // namespace garm_edge::hypervisor
