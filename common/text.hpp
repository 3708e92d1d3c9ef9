#pragma once

#include <initializer_list>
#include <string>
#include <string_view>

namespace garm_edge {

/// Valid UTF-8 without C0/C1 control characters, DEL, U+FFFE or U+FFFF: safe to put in XML,
/// logs and names.
bool is_plain_text(std::string_view value);

/// A short rendering of untrusted text for an error message or a log line: valid UTF-8 on one
/// line (line breaks and tabs become spaces, other control characters and invalid bytes '?'),
/// cut at `max_bytes` on a character boundary.
std::string printable_excerpt(std::string_view value, std::size_t max_bytes = 64);

/// `value` with ASCII letters in lower case (UUIDs and hex digests compare that way).
std::string ascii_lower(std::string_view value);

/// The parts one after the other: one call where a chain of `+` would make a temporary each.
std::string concat(std::initializer_list<std::string_view> parts);

/// strerror(errno), read before anything else can change errno.
std::string errno_text();

}  // namespace garm_edge
