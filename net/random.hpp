#pragma once

#include <span>

namespace garm_edge::net {

/// Fills `bytes` from the process's one random source: mbedTLS's CTR-DRBG, seeded once from
/// the platform entropy source (getrandom). Safe from any thread. Throws std::runtime_error
/// when the generator fails.
void random_bytes(std::span<unsigned char> bytes);

}  // namespace garm_edge::net
