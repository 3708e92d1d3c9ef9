#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/unique_fd.hpp"

namespace garm_edge::net {

/// A body sent from an open file, read from offset 0 for `size` bytes, so that a large
/// download never sits in memory. The descriptor keeps the file readable even if its name is
/// removed meanwhile.
struct FileBody {
  UniqueFd fd;
  std::uint64_t size = 0;
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;
  /// When set, the body is this file's content and `body` is ignored.
  std::shared_ptr<FileBody> file = nullptr;
};

std::string_view reason_phrase(int status);
/// The status line, headers (Content-Length, Connection) and body (not a file body's).
std::string serialize(const HttpResponse& response, bool keep_alive);

}  // namespace garm_edge::net
