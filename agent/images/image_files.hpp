#pragma once

#include <cstdint>
#include <filesystem>
#include <initializer_list>
#include <string>
#include <string_view>

namespace garm_edge::agent {

/// Bases and downloads are "garm-image-<image>-<16 hex>…": never an instance overlay's
/// "garm-edge-…" name, which reconcile removes when no record claims it.
inline constexpr std::string_view kImageFilePrefix = "garm-image-";

/// "<image>-<16 hex>" followed by one of `suffixes`: a file of that image, not of another image
/// whose name starts the same ("noble" and "noble-arm64").
bool is_image_file_of(std::string_view file, const std::string& image,
                      std::initializer_list<std::string_view> suffixes);

/// The bytes of the regular files under `directory` whose names start with `prefix` (or with
/// "." and `prefix`: temp files).
std::uint64_t bytes_under(const std::filesystem::path& directory, std::string_view prefix);

/// "400 MiB".
std::string mib(std::uint64_t bytes);

/// A URL as messages show it: a query may hold a signature or a token, and messages reach
/// every controller through the capacity answer.
std::string shown_url(const std::string& url);

}  // namespace garm_edge::agent
