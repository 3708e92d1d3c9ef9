#include "net/random.hpp"

#include <mutex>
#include <stdexcept>
#include <string_view>

#include <mbedtls/entropy.h>

#include "net/drbg.hpp"
#include "net/tls_config.hpp"

namespace garm_edge::net {

mbedtls_ctr_drbg_context& random_generator() {
  static mbedtls_entropy_context entropy;
  static mbedtls_ctr_drbg_context drbg;
  static std::once_flag once;
  std::call_once(once, [] {
    mbedtls_entropy_init(&entropy);
    mbedtls_ctr_drbg_init(&drbg);
    constexpr std::string_view kPersonalization = "garm-edge";
    if (mbedtls_ctr_drbg_seed(&drbg, mbedtls_entropy_func, &entropy,
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
