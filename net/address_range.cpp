#include "net/address_range.hpp"

#include <algorithm>
#include <array>
#include <charconv>
#include <stdexcept>

namespace garm_edge::net {
namespace {

asio::ip::address unmapped(const asio::ip::address& address) {
  if (address.is_v6() && address.to_v6().is_v4_mapped()) {
    return asio::ip::make_address_v4(asio::ip::v4_mapped, address.to_v6());
  }
  return address;
}

template <std::size_t N>
bool same_prefix(const std::array<unsigned char, N>& a, const std::array<unsigned char, N>& b,
                 unsigned prefix) {
  const auto whole = prefix / 8;
  if (!std::equal(a.begin(), a.begin() + whole, b.begin())) {
    return false;
  }
  const auto rest = prefix % 8;
  if (rest == 0) {
    return true;
  }
  const auto mask = static_cast<unsigned char>(0xFFU << (8 - rest));
  return (a[whole] & mask) == (b[whole] & mask);
}

template <std::size_t N>
bool without_host_bits(std::array<unsigned char, N> bytes, unsigned prefix) {
  const auto original = bytes;
  for (std::size_t bit = prefix; bit < N * 8; ++bit) {
    bytes[bit / 8] = static_cast<unsigned char>(bytes[bit / 8] & ~(0x80U >> (bit % 8)));
  }
  return bytes == original;
}

}  // namespace

AddressRange AddressRange::parse(std::string_view text) {
  const auto slash = text.find('/');
  asio::error_code error;
  const auto network = asio::ip::make_address(std::string(text.substr(0, slash)), error);
  if (error) {
    throw std::invalid_argument("\"" + std::string(text) + "\" is not an address or CIDR range");
  }
  const unsigned bits = network.is_v4() ? 32 : 128;
  unsigned prefix = bits;
  if (slash != std::string_view::npos) {
    const auto digits = text.substr(slash + 1);
    const auto [end, failed] =
        std::from_chars(digits.data(), digits.data() + digits.size(), prefix);
    if (digits.empty() || failed != std::errc{} || end != digits.data() + digits.size() ||
        prefix > bits) {
      throw std::invalid_argument("\"" + std::string(text) + "\" has no valid prefix length");
    }
  }
  const bool host_bits_zero = network.is_v4()
                                  ? without_host_bits(network.to_v4().to_bytes(), prefix)
                                  : without_host_bits(network.to_v6().to_bytes(), prefix);
  if (!host_bits_zero) {
    throw std::invalid_argument("\"" + std::string(text) +
                                "\" has host bits set: write the network address");
  }
  if (network.is_v6() && network.to_v6().is_v4_mapped()) {
    // ::ffff:a.b.c.d/N is the IPv4 range a.b.c.d/(N-96): peers are matched unmapped.
    if (prefix < 96) {
      throw std::invalid_argument("\"" + std::string(text) +
                                  "\" reaches beyond the IPv4-mapped range: write it as IPv4");
    }
    return AddressRange{.network = unmapped(network), .prefix = prefix - 96};
  }
  const AddressRange range{.network = network, .prefix = prefix};
  return range;
}

bool AddressRange::contains(const asio::ip::address& address) const {
  const auto peer = unmapped(address);
  if (peer.is_v4() != network.is_v4()) {
    return false;
  }
  return peer.is_v4() ? same_prefix(peer.to_v4().to_bytes(), network.to_v4().to_bytes(), prefix)
                      : same_prefix(peer.to_v6().to_bytes(), network.to_v6().to_bytes(), prefix);
}

std::string AddressRange::str() const {
  return network.to_string() + "/" + std::to_string(prefix);
}

bool allowed(const std::vector<AddressRange>& ranges, const asio::ip::address& address) {
  return ranges.empty() || std::any_of(ranges.begin(), ranges.end(),
                                       [&](const auto& range) { return range.contains(address); });
}

}  // namespace garm_edge::net
