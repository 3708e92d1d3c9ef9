#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <sys/types.h>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/temp_dir.hpp"

namespace garm_edge::testing {

/// A CA and one server certificate from it, made with openssl at test time.
struct TestPki {
  std::filesystem::path ca_certificate;
  std::filesystem::path server_certificate;
  std::filesystem::path server_key;

  std::string ca_pem() const;
};

/// A fresh CA in `directory` and a server certificate (EKU serverAuth) whose only name is
/// `dns_name`, so reaching the server by any other name (127.0.0.1 included) must fail.
TestPki make_test_pki(const std::filesystem::path& directory,
                      const std::string& dns_name = "localhost");

struct FakeGarmOptions {
  bool plain = false;  // HTTP instead of HTTPS
  /// Instance token -> data (install_script, registration_token, jit, service_name, closed):
  /// see tests/support/fake_garm.py.
  nlohmann::json instances = nlohmann::json::object();
  /// Files served unauthenticated at /downloads/<name> (and /redirect/<name>, a 302 there),
  /// as GitHub serves runner archives; at most `download_rate` bytes per second (0: no limit).
  std::filesystem::path downloads = {};
  std::uint64_t download_rate = 0;
};

/// tests/support/fake_garm.py as a child process on a loopback port: garm's callback and
/// metadata endpoints, behind a certificate from a CA made for this instance.
class FakeGarm {
 public:
  explicit FakeGarm(FakeGarmOptions options = {});
  ~FakeGarm();
  FakeGarm(const FakeGarm&) = delete;
  FakeGarm& operator=(const FakeGarm&) = delete;

  std::uint16_t port() const { return port_; }
  /// "https://localhost:<port>" (the name in the certificate) or "http://127.0.0.1:<port>".
  std::string base_url() const;
  const TestPki& pki() const { return pki_; }
  /// Every request received so far, oldest first: {method, path, query, headers (object),
  /// body (base64), time}.
  std::vector<nlohmann::json> requests() const;

 private:
  void wait_until_listening();

  TempDir directory_{"fake-garm"};
  TestPki pki_;
  bool plain_;
  pid_t pid_ = -1;
  std::uint16_t port_ = 0;
};

}  // namespace garm_edge::testing
