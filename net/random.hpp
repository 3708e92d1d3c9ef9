#pragma once

#include <mbedtls/ctr_drbg.h>

namespace garm_edge::net {

/// The process's CTR-DRBG, seeded once from the platform entropy source. With Debian's
/// MBEDTLS_THREADING_C, mbedtls_ctr_drbg_random may be called from any thread.
mbedtls_ctr_drbg_context& random_generator();

}  // namespace garm_edge::net
