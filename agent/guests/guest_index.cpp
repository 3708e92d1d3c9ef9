#include "agent/guests/guest_index.hpp"

#include "net/secret_token.hpp"

namespace garm_edge::agent {

void GuestIndex::put(const InstanceRecord& record) {
  if (!record.guest) {
    return remove(record.domain_name);
  }
  const auto& guest = *record.guest;
  std::lock_guard lock(mutex_);
  entries_[record.domain_name] =
      Entry{.domain_name = record.domain_name,
            .controller_id = record.controller_id,
            .seed_token_hash = guest.seed_token_hash,
            .bearer_token_hash = guest.bearer_token_hash,
            .ip = guest.ip,
            .closed = guest.closed,
            .os_name = guest.os_name,
            .os_version = guest.os_version,
            .runner_status = guest.runner_status,
            .last_message = guest.messages.empty() ? std::string() : guest.messages.back().message,
            .warm_token_hash =
                record.warm && !record.warm->delivered ? record.warm->token_hash : std::string(),
            .no_garm = (record.warm && record.warm->state != WarmState::bound) ||
                       record.controller_id == kCacheBuilderControllerId};
}

void GuestIndex::remove(std::string_view domain_name) {
  std::lock_guard lock(mutex_);
  if (const auto it = entries_.find(domain_name); it != entries_.end()) {
    entries_.erase(it);
  }
}

std::optional<GuestIndex::Entry> GuestIndex::get(std::string_view domain_name) const {
  std::lock_guard lock(mutex_);
  if (const auto it = entries_.find(domain_name); it != entries_.end()) {
    return it->second;
  }
  return std::nullopt;
}

bool GuestIndex::holds_address(std::string_view ip) const {
  return at_address(ip).has_value();
}

std::set<std::string> GuestIndex::addresses() const {
  std::lock_guard lock(mutex_);
  std::set<std::string> taken;
  for (const auto& [name, entry] : entries_) {
    if (!entry.ip.empty()) {
      taken.insert(entry.ip);
    }
  }
  return taken;
}

std::optional<GuestIndex::Entry> GuestIndex::by_seed_token(std::string_view token_hash,
                                                           std::string_view source_ip) const {
  return find(&Entry::seed_token_hash, token_hash, source_ip);
}

std::optional<GuestIndex::Entry> GuestIndex::by_bearer_token(std::string_view token_hash,
                                                             std::string_view source_ip) const {
  return find(&Entry::bearer_token_hash, token_hash, source_ip);
}

std::optional<GuestIndex::Entry> GuestIndex::find(std::string Entry::*hash,
                                                  std::string_view token_hash,
                                                  std::string_view source_ip) const {
  std::lock_guard lock(mutex_);
  std::optional<Entry> found;
  for (const auto& [name, entry] : entries_) {
    // No early exit: the time taken must not depend on which entry (if any) matches.
    const bool token_matches = net::constant_time_equal(entry.*hash, token_hash);
    if (token_matches && !found) {
      found = entry;
    }
  }
  if (!found || found->closed || found->ip.empty() || found->ip != source_ip) {
    return std::nullopt;
  }
  return found;
}

std::optional<GuestIndex::Entry> GuestIndex::by_warm_token(std::string_view token_hash,
                                                           std::string_view source_ip) const {
  return find(&Entry::warm_token_hash, token_hash, source_ip);
}

std::optional<GuestIndex::Entry> GuestIndex::by_address(std::string_view source_ip) const {
  auto entry = at_address(source_ip);
  return entry && !entry->closed ? entry : std::nullopt;
}

std::string GuestIndex::controller_at(std::string_view ip) const {
  const auto entry = at_address(ip);
  return entry ? entry->controller_id : std::string();
}

std::optional<GuestIndex::Entry> GuestIndex::instance_at(std::string_view source_ip) const {
  auto entry = at_address(source_ip);
  return entry && !entry->no_garm ? entry : std::nullopt;
}

std::optional<GuestIndex::Entry> GuestIndex::at_address(std::string_view source_ip) const {
  std::lock_guard lock(mutex_);
  for (const auto& [name, entry] : entries_) {
    if (!entry.ip.empty() && entry.ip == source_ip) {
      return entry;
    }
  }
  return std::nullopt;
}

}  // namespace garm_edge::agent
