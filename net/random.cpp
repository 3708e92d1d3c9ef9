#include "net/random.hpp"

#include <cerrno>
#include <cstddef>
#include <mutex>
#include <stdexcept>
#include <string_view>
#include <sys/random.h>

#include <mbedtls/entropy.h>

#include "net/drbg.hpp"
#include "net/tls_config.hpp"

namespace garm_edge::net {

namespace {

/// The kernel's CSPRNG, the one entropy source: mbedTLS's default entropy context also runs
/// HAVEGE in Debian's build, a tenth of a short-lived provider process's instructions.
int kernel_entropy(void*, unsigned char* output, std::size_t length) {
  std::size_t filled = 0;
  while (filled < length) {
    const ssize_t got = ::getrandom(output + filled, length - filled, 0);
    if (got < 0 && errno == EINTR) {
      continue;
    }
    if (got <= 0) {
      return MBEDTLS_ERR_ENTROPY_SOURCE_FAILED;
    }
    filled += static_cast<std::size_t>(got);
  }
  return 0;
}

}  // namespace

mbedtls_ctr_drbg_context& random_generator() {
  static mbedtls_ctr_drbg_context drbg;
  static std::once_flag once;
  std::call_once(once, [] {
    mbedtls_ctr_drbg_init(&drbg);
    constexpr std::string_view kPersonalization = "garm-edge";
    if (mbedtls_ctr_drbg_seed(&drbg, kernel_entropy, nullptr,
                              reinterpret_cast<const unsigned char*>(kPersonalization.data()),
                              kPersonalization.size()) != 0) {
      throw TlsError("cannot seed the random generator from the platform entropy");
    }
  });
  return drbg;
}

void random_bytes(std::span<unsigned char> bytes) {
  if (mbedtls_ctr_drbg_random(&random_generator(), bytes.data(), bytes.size()) != 0) {
    throw TlsError("the random generator failed");
  }
}

}  // namespace garm_edge::net
