#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace garm_edge::hub {

/// Who a token lets a host become: the operator's choice, never the joiner's. An exact name may
/// come with the DNS names and addresses garm reaches the host by; a pattern ("lab-board-*") or
/// no name at all makes hub-only hosts, whose certificates carry no DNS or IP name.
struct HostNames {
  std::string name = {};
  std::string name_pattern = {};  // '*' matches any run of name characters
  std::vector<std::string> dns_names = {};
  std::vector<std::string> ip_addresses = {};

  bool fixes_name() const { return !name.empty(); }
  bool admits(std::string_view host) const;
  /// "host r1", "hosts lab-board-*", "any host": for messages and `token list`.
  std::string describe() const;
};

/// Throws Refused unless `host` is something an operator may put in a token: names of name
/// characters, a pattern instead of a name, DNS names and addresses only with a fixed name.
void check_host_names(const HostNames& host);

}  // namespace garm_edge::hub
