#pragma once

#include <mbedtls/ctr_drbg.h>

namespace garm_edge::net {

/// The DRBG behind random_bytes(), for net's own mbedTLS calls that take an f_rng/p_rng pair
/// (TLS, key generation, certificate writing). Everyone else uses random_bytes(). With
/// Debian's MBEDTLS_THREADING_C, mbedtls_ctr_drbg_random may be called from any thread.
mbedtls_ctr_drbg_context& random_generator();

}  // namespace garm_edge::net
