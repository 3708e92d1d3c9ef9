#include "hub/host_names.hpp"

#include <algorithm>
#include <arpa/inet.h>
#include <array>

#include "hub/hub_store.hpp"
#include "wire/validate.hpp"

namespace garm_edge::hub {
namespace {

/// '*' matches any run of characters. Greedy with one point to go back to: linear in the
/// pattern times the name, whatever the pattern (no backtracking a token holder could feed).
bool glob_matches(std::string_view pattern, std::string_view text) {
  std::size_t p = 0;
  std::size_t t = 0;
  std::size_t star = std::string_view::npos;
  std::size_t resume = 0;
  while (t < text.size()) {
    if (p < pattern.size() && pattern[p] == '*') {
      star = p++;
      resume = t;
    } else if (p < pattern.size() && pattern[p] == text[t]) {
      ++p;
      ++t;
    } else if (star != std::string_view::npos) {
      p = star + 1;
      t = ++resume;
    } else {
      return false;
    }
  }
  while (p < pattern.size() && pattern[p] == '*') {
    ++p;
  }
  return p == pattern.size();
}

bool is_pattern(std::string_view pattern) {
  std::string example(pattern);
  std::replace(example.begin(), example.end(), '*', 'x');
  return pattern.find('*') != std::string_view::npos && pattern.size() <= 64 &&
         is_agent_name(example) && pattern.find("**") == std::string_view::npos;
}

}  // namespace

void check_host_names(const HostNames& host) {
  if (host.fixes_name() && !is_agent_name(host.name)) {
    throw Refused("a host name must be 1-64 of [A-Za-z0-9._-], starting with a letter or digit");
  }
  if (!host.name_pattern.empty() && (host.fixes_name() || !is_pattern(host.name_pattern))) {
    throw Refused("a name pattern is a host name with '*' in it (lab-board-*), instead of a name");
  }
  if (!host.fixes_name() && (!host.dns_names.empty() || !host.ip_addresses.empty())) {
    throw Refused(
        "DNS names and addresses go with one host name (--name): hosts of a pattern or "
        "of any name are reached through the hub only");
  }
  for (const auto& address : host.ip_addresses) {
    std::array<unsigned char, 16> bytes{};
    if (::inet_pton(AF_INET, address.c_str(), bytes.data()) != 1 &&
        ::inet_pton(AF_INET6, address.c_str(), bytes.data()) != 1) {
      throw Refused("\"" + address.substr(0, 64) + "\" is not an IP address");
    }
  }
  for (const auto& name : host.dns_names) {
    if (name.empty() || name.size() > 253 ||
        name.find_first_not_of(
            "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-") !=
            std::string::npos) {
      throw Refused("\"" + name.substr(0, 64) + "\" is not a DNS name");
    }
  }
}

bool HostNames::admits(std::string_view host) const {
  if (fixes_name()) {
    return host == name;
  }
  return name_pattern.empty() || glob_matches(name_pattern, host);
}

std::string HostNames::describe() const {
  if (fixes_name()) {
    return "host " + name;
  }
  return name_pattern.empty() ? "any host" : "hosts " + name_pattern;
}

}  // namespace garm_edge::hub
