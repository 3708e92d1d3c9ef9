#include "net/http_response.hpp"

namespace garm_edge::net {

std::string_view reason_phrase(int status) {
  switch (status) {
    case 200:
      return "OK";
    case 201:
      return "Created";
    case 101:
      return "Switching Protocols";
    case 204:
      return "No Content";
    case 400:
      return "Bad Request";
    case 401:
      return "Unauthorized";
    case 403:
      return "Forbidden";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 408:
      return "Request Timeout";
    case 409:
      return "Conflict";
    case 413:
      return "Content Too Large";
    case 422:
      return "Unprocessable Content";
    case 431:
      return "Request Header Fields Too Large";
    case 429:
      return "Too Many Requests";
    case 500:
      return "Internal Server Error";
    case 501:
      return "Not Implemented";
    case 502:
      return "Bad Gateway";
    case 503:
      return "Service Unavailable";
    case 504:
      return "Gateway Timeout";
    case 505:
      return "HTTP Version Not Supported";
    default:
      return "Unknown";
  }
}

std::string serialize(const HttpResponse& response, bool keep_alive, bool client_reads_chunked) {
  std::string out = "HTTP/1.1 " + std::to_string(response.status) + " " +
                    std::string(reason_phrase(response.status)) + "\r\n";
  if (!response.upgrade) {
    out += "Content-Type: " + response.content_type + "\r\n";
    if (response.head_length) {
      out += "Content-Length: " + std::to_string(*response.head_length) + "\r\n";
    } else if (!response.stream) {
      out += "Content-Length: " +
             std::to_string(response.file ? response.file->size : response.body.size()) + "\r\n";
    } else if (client_reads_chunked) {
      out += "Transfer-Encoding: chunked\r\n";
    }
    out += std::string("Connection: ") + (keep_alive ? "keep-alive" : "close") + "\r\n";
  }
  for (const auto& [name, value] : response.headers) {
    out += name + ": " + value + "\r\n";
  }
  out += "\r\n";
  if (!response.file && !response.stream && !response.upgrade && !response.head_length) {
    out += response.body;
  }
  return out;
}

}  // namespace garm_edge::net
