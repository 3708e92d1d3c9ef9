#include "agent/guests/guest_attachments.hpp"

namespace garm_edge::agent {

std::optional<GuestPlan> GuestAttachments::plan(const InstanceRecord& record,
                                                const wire::BootstrapInstance& bootstrap) {
  return access_.plan(record, bootstrap);
}

GuestBinding GuestAttachments::bind(const InstanceRecord& warm,
                                    const wire::BootstrapInstance& bootstrap) {
  auto binding = access_.bind(warm, bootstrap);
  if (archives_ != nullptr && binding.guest.runner_archive) {
    archives_->prefetch(archive_source_of(binding.guest), warm.domain_name, warm.warm->controller);
  }
  return binding;
}

void GuestAttachments::assign_address(
    GuestPlan& plan, const std::function<InstanceRecord(const GuestPlan&)>& persist) {
  std::string domain_name;
  std::string controller;
  {
    std::lock_guard lock(address_mutex_);
    access_.assign_address(plan, index_.addresses());
    const auto recorded = persist(plan);
    domain_name = recorded.domain_name;
    controller = recorded.controller_id;
    index_.put(recorded);
  }
  if (archives_ != nullptr && plan.record.runner_archive) {
    archives_->prefetch(archive_source_of(plan.record), domain_name, controller);
  }
}

std::optional<AddressCount> GuestAttachments::addresses() {
  std::lock_guard lock(address_mutex_);  // no create is between choosing and recording
  return access_.count_addresses(index_.addresses());
}

void GuestAttachments::reserve(const GuestRecord& guest) {
  access_.reserve(guest);
}

void GuestAttachments::admit(const InstanceRecord& record) {
  index_.put(record);
}

void GuestAttachments::revoke(std::string_view domain_name) {
  index_.remove(domain_name);
  if (sockets_ != nullptr) {
    sockets_->close_instance(domain_name);
  }
  if (archives_ != nullptr) {
    archives_->release(std::string(domain_name));  // its download stops unless another wants it
  }
}

void GuestAttachments::release(const GuestRecord& guest) {
  access_.release(guest);
}

std::size_t GuestAttachments::release_unheld(
    const std::function<std::set<std::string>()>& recorded) {
  std::lock_guard lock(address_mutex_);  // no create is between choosing and recording
  auto held = index_.addresses();
  held.merge(recorded());
  return access_.release_unheld(held);
}

std::optional<GuestView> GuestAttachments::view(std::string_view domain_name) const {
  const auto entry = index_.get(domain_name);
  if (!entry) {
    return std::nullopt;
  }
  return GuestView{.ip = entry->ip,
                   .os_name = entry->os_name,
                   .os_version = entry->os_version,
                   .runner_status = entry->runner_status,
                   .last_message = entry->last_message};
}

}  // namespace garm_edge::agent
