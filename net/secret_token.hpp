#pragma once

#include <string>
#include <string_view>

namespace garm_edge::net {

/// 32 bytes from the process's DRBG as unpadded base64url (43 characters): a capability for a
/// URL path.
std::string random_token();

/// Lower-case hex SHA-256: what the agent keeps instead of a token.
std::string sha256_hex(std::string_view data);

/// Compares without returning early, so the time taken says nothing about where two secrets
/// (or their hashes) differ.
bool constant_time_equal(std::string_view a, std::string_view b);

/// Is `text` a token random_token could have made (length and alphabet)?
bool looks_like_token(std::string_view text);

}  // namespace garm_edge::net
