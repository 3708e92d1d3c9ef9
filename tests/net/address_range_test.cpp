#include "net/address_range.hpp"

#include <stdexcept>

#include <catch2/catch.hpp>

using garm_edge::net::AddressRange;

namespace {

bool in(const std::string& range, const std::string& address) {
  return AddressRange::parse(range).contains(asio::ip::make_address(address));
}

}  // namespace

TEST_CASE("address ranges match IPv4, IPv6 and IPv4 peers on dual-stack sockets", "[net][cidr]") {
  CHECK(in("10.0.0.0/8", "10.255.1.2"));
  CHECK_FALSE(in("10.0.0.0/8", "11.0.0.1"));
  CHECK(in("192.0.2.5", "192.0.2.5"));  // one address
  CHECK_FALSE(in("192.0.2.5", "192.0.2.6"));
  CHECK(in("0.0.0.0/0", "203.0.113.9"));
  CHECK(in("192.0.2.0/25", "::ffff:192.0.2.100"));  // the peer as a dual-stack socket shows it
  CHECK_FALSE(in("192.0.2.0/25", "::ffff:192.0.2.200"));
  CHECK(in("2001:db8::/32", "2001:db8:ffff::1"));
  CHECK_FALSE(in("2001:db8::/32", "2001:db9::1"));
  CHECK_FALSE(in("2001:db8::/32", "10.0.0.1"));
  // A range written IPv4-mapped is the IPv4 range it maps, whatever form the peer has.
  CHECK(in("::ffff:10.0.0.5", "10.0.0.5"));
  CHECK(in("::ffff:10.0.0.0/120", "::ffff:10.0.0.77"));
  CHECK_FALSE(in("::ffff:10.0.0.0/120", "10.0.1.1"));
  CHECK(AddressRange::parse("::ffff:10.0.0.0/120").str() == "10.0.0.0/24");
}

TEST_CASE("address ranges refuse what they would have to guess at", "[net][cidr]") {
  CHECK_THROWS_AS(AddressRange::parse("10.0.0.1/24"), std::invalid_argument);  // host bits
  CHECK_THROWS_AS(AddressRange::parse("10.0.0.0/33"), std::invalid_argument);
  CHECK_THROWS_AS(AddressRange::parse("10.0.0.0/"), std::invalid_argument);
  CHECK_THROWS_AS(AddressRange::parse("10.0.0.0/8x"), std::invalid_argument);
  CHECK_THROWS_AS(AddressRange::parse("::ffff:0:0/95"), std::invalid_argument);
  CHECK_THROWS_AS(AddressRange::parse("garm.example"), std::invalid_argument);
  CHECK_THROWS_AS(AddressRange::parse(""), std::invalid_argument);
}
