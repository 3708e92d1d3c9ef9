#include "hypervisor/hypervisor.hpp"

namespace garm_edge::hypervisor {

Tags::Tags(std::initializer_list<std::pair<std::string, std::string>> entries)
    : entries_(entries) {}

void Tags::set(std::string key, std::string value) {
  for (auto& [existing, current] : entries_) {
    if (existing == key) {
      current = std::move(value);
      return;
    }
  }
  entries_.emplace_back(std::move(key), std::move(value));
}

std::optional<std::string_view> Tags::get(std::string_view key) const {
  for (const auto& [existing, value] : entries_) {
    if (existing == key) {
      return value;
    }
  }
  return std::nullopt;
}

bool Tags::matches(const Tags& filter) const {
  for (const auto& [key, value] : filter.entries()) {
    const auto mine = get(key);
    if (!mine || *mine != value) {
      return false;
    }
  }
  return true;
}

}  // namespace garm_edge::hypervisor
