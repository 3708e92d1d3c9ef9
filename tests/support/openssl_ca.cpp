#include "support/openssl_ca.hpp"

#include <fstream>
#include <stdexcept>

namespace garm_edge::testing {

OpenSslCa::OpenSslCa(const std::filesystem::path& pki, const std::filesystem::path& work)
    : pki_(pki), work_(work) {
  std::filesystem::create_directories(work_ / "issued");
  std::ofstream(work_ / "index.txt");
  std::ofstream(work_ / "serial") << "1000\n";
  std::ofstream(work_ / "crlnumber") << "1000\n";
  std::ofstream(work_ / "openssl.cnf")
      << "[ca]\ndefault_ca = edge\n[edge]\n"
      << "database = " << (work_ / "index.txt").string() << "\n"
      << "new_certs_dir = " << (work_ / "issued").string() << "\n"
      << "serial = " << (work_ / "serial").string() << "\n"
      << "crlnumber = " << (work_ / "crlnumber").string() << "\n"
      << "certificate = " << (pki_ / "ca.crt").string() << "\n"
      << "private_key = " << (pki_ / "ca.key").string() << "\n"
      << "default_md = sha256\npolicy = anything\nx509_extensions = client\n"
      << "default_crl_days = 7\nunique_subject = no\n"
      << "[anything]\ncommonName = supplied\n"
      << "[client]\nbasicConstraints = CA:FALSE\nkeyUsage = digitalSignature\n"
      << "extendedKeyUsage = clientAuth\n";
}

CommandResult OpenSslCa::openssl(const std::string& arguments) const {
  auto result = run_command("openssl " + arguments);
  if (result.exit_code != 0) {
    throw std::runtime_error("openssl " + arguments + ": " + result.output);
  }
  return result;
}

std::filesystem::path OpenSslCa::issue_client(const std::string& name, const std::string& start,
                                              const std::string& end) {
  const auto base = work_ / name;
  openssl("req -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout " + base.string() +
          ".key -subj /CN=" + name + " -out " + base.string() + ".csr");
  openssl("ca -batch -notext -config " + (work_ / "openssl.cnf").string() + " -in " +
          base.string() + ".csr -out " + base.string() + ".crt -startdate " + start + " -enddate " +
          end);
  return base.string() + ".crt";
}

void OpenSslCa::revoke(const std::filesystem::path& certificate) {
  openssl("ca -batch -config " + (work_ / "openssl.cnf").string() + " -revoke " +
          certificate.string());
}

std::filesystem::path OpenSslCa::crl() {
  const auto path = work_ / "ca.crl";
  openssl("ca -batch -config " + (work_ / "openssl.cnf").string() + " -gencrl -out " +
          path.string());
  return path;
}

}  // namespace garm_edge::testing
