#pragma once

#include <filesystem>
#include <string>

#include "support/run_command.hpp"

namespace garm_edge::testing {

/// `openssl ca` over a PKI directory written by pki_init, for what pki_init deliberately
/// cannot make: certificates outside their validity period, revocations and CRLs.
class OpenSslCa {
 public:
  OpenSslCa(const std::filesystem::path& pki, const std::filesystem::path& work);

  /// A client certificate (EKU clientAuth, CN=`name`) valid from `start` to `end`
  /// (YYYYMMDDHHMMSSZ); returns the path of the certificate, the key beside it (.key).
  std::filesystem::path issue_client(const std::string& name, const std::string& start,
                                     const std::string& end);
  void revoke(const std::filesystem::path& certificate);
  /// A fresh CRL listing everything revoked so far.
  std::filesystem::path crl();

 private:
  CommandResult openssl(const std::string& arguments) const;

  std::filesystem::path pki_;
  std::filesystem::path work_;
};

}  // namespace garm_edge::testing
