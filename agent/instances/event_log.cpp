#include "agent/instances/event_log.hpp"

#include <algorithm>

#include "common/text.hpp"

namespace garm_edge::agent {
namespace {

/// A logfmt value: quoted, with quotes and backslashes escaped, control characters replaced.
std::string logfmt_quoted(std::string_view value) {
  std::string out = "\"";
  for (const char c : printable_excerpt(value, 512)) {
    if (c == '"' || c == '\\') {
      out += '\\';
    }
    out += c;
  }
  return out + "\"";
}

}  // namespace

void EventLog::record(std::string_view event, std::string_view instance,
                      std::string_view controller_id, std::string_view detail) {
  InstanceEvent entry{.time = format_rfc3339(clock_.now()),
                      .event = std::string(event),
                      .instance = printable_excerpt(instance, 128),
                      .controller_id = std::string(controller_id),
                      .detail = printable_excerpt(detail, 512)};
  log_.info("event=" + entry.event + " instance=" + logfmt_quoted(entry.instance) + " controller=" +
            logfmt_quoted(entry.controller_id) + " detail=" + logfmt_quoted(entry.detail));
  std::lock_guard lock(mutex_);
  auto& ring = ring_for(entry.controller_id);
  ring.events.push_back(std::move(entry));
  while (ring.events.size() > limits_.per_controller) {
    ring.events.pop_front();
  }
}

EventLog::Ring& EventLog::ring_for(const std::string& controller_id) {
  auto found = rings_.find(controller_id);
  if (found == rings_.end()) {
    if (!limits_.named.contains(controller_id)) {
      evict_unnamed_beyond(limits_.max_controllers - 1);
    }
    found = rings_.emplace(controller_id, Ring{}).first;
  }
  found->second.last_written = ++writes_;
  return found->second;
}

void EventLog::evict_unnamed_beyond(std::size_t kept) {
  while (true) {
    auto oldest = rings_.end();
    std::size_t unnamed = 0;
    for (auto it = rings_.begin(); it != rings_.end(); ++it) {
      if (limits_.named.contains(it->first)) {
        continue;
      }
      ++unnamed;
      if (oldest == rings_.end() || it->second.last_written < oldest->second.last_written) {
        oldest = it;
      }
    }
    if (unnamed <= kept) {
      return;
    }
    rings_.erase(oldest);
  }
}

std::vector<InstanceEvent> EventLog::recent(std::string_view controller_id,
                                            std::string_view instance) const {
  std::lock_guard lock(mutex_);
  std::vector<InstanceEvent> matching;
  const auto ring = rings_.find(controller_id);
  if (ring == rings_.end()) {
    return matching;
  }
  for (const auto& event : ring->second.events) {
    if (instance.empty() || event.instance == instance) {
      matching.push_back(event);
    }
  }
  return matching;
}

}  // namespace garm_edge::agent
