#include "agent/instances/event_log.hpp"

#include "common/text.hpp"

namespace garm_edge::agent {
namespace {

/// A logfmt value: quoted, with quotes and backslashes escaped, control characters replaced.
std::string quoted(std::string_view value) {
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
  log_.info("event=" + entry.event + " instance=" + quoted(entry.instance) +
            " controller=" + quoted(entry.controller_id) + " detail=" + quoted(entry.detail));
  std::lock_guard lock(mutex_);
  events_.push_back(std::move(entry));
  while (events_.size() > capacity_) {
    events_.pop_front();
  }
}

std::vector<InstanceEvent> EventLog::recent(std::string_view controller_id,
                                            std::string_view instance) const {
  std::lock_guard lock(mutex_);
  std::vector<InstanceEvent> matching;
  for (const auto& event : events_) {
    if (event.controller_id == controller_id && (instance.empty() || event.instance == instance)) {
      matching.push_back(event);
    }
  }
  return matching;
}

}  // namespace garm_edge::agent
