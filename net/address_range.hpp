#pragma once

#include <string>
#include <string_view>
#include <vector>

#include <asio/ip/address.hpp>

namespace garm_edge::net {

/// An IPv4 or IPv6 network in CIDR form ("10.0.0.0/24", "2001:db8::/32", or one address).
struct AddressRange {
  asio::ip::address network;
  unsigned prefix = 0;

  /// Throws std::invalid_argument on anything but an address with an optional /prefix that
  /// fits it; host bits must be zero, so "10.0.0.1/24" is refused rather than guessed at.
  static AddressRange parse(std::string_view text);
  /// IPv4 peers on a dual-stack socket (::ffff:a.b.c.d) match IPv4 ranges.
  bool contains(const asio::ip::address& address) const;
  std::string str() const;
};

/// Whether `address` is in any of `ranges`; an empty list allows everyone.
bool allowed(const std::vector<AddressRange>& ranges, const asio::ip::address& address);

}  // namespace garm_edge::net
