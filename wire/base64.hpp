#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace garm_edge::wire {

/// Standard base64 with padding, as Go's encoding/json writes a []byte.
std::string base64_encode(std::string_view bytes);

/// Strict standard base64 with padding, as Go's encoding/json reads a []byte ('\r' and '\n' are
/// skipped). Returns nothing when the text is not valid base64.
std::optional<std::string> base64_decode(std::string_view text);

}  // namespace garm_edge::wire
