#include "support/fake_garm.hpp"

#include <chrono>
#include <fcntl.h>
#include <fstream>
#include <signal.h>
#include <spawn.h>
#include <sstream>
#include <stdexcept>
#include <sys/wait.h>
#include <thread>

#include "support/run_command.hpp"

extern char** environ;

namespace garm_edge::testing {
namespace {

std::string read_text_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

void openssl(const std::string& arguments) {
  const auto result = run_command("openssl " + arguments);
  if (result.exit_code != 0) {
    throw std::runtime_error("openssl " + arguments + ": " + result.output);
  }
}

constexpr auto kStartTimeout = std::chrono::seconds(30);  // Python starts slowly on a loaded host

}  // namespace

std::string TestPki::ca_pem() const {
  return read_text_file(ca_certificate);
}

TestPki make_test_pki(const std::filesystem::path& directory, const std::string& dns_name) {
  std::filesystem::create_directories(directory);
  const TestPki pki{directory / "ca.crt", directory / "server.crt", directory / "server.key"};
  const auto ca_key = directory / "ca.key";
  const auto ca_config = directory / "ca.cnf";
  const auto server_extensions = directory / "server.ext";
  const auto request = directory / "server.csr";
  std::ofstream(ca_config) << "[req]\ndistinguished_name = dn\n[dn]\n[ca]\n"
                           << "basicConstraints = critical,CA:TRUE\n"
                           << "keyUsage = critical,keyCertSign,cRLSign\n"
                           << "subjectKeyIdentifier = hash\n";
  std::ofstream(server_extensions) << "basicConstraints = CA:FALSE\n"
                                   << "keyUsage = digitalSignature\n"
                                   << "extendedKeyUsage = serverAuth\n"
                                   << "subjectAltName = DNS:" << dns_name << "\n";
  const std::string new_ec_key = "-newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes ";
  openssl("req -x509 " + new_ec_key + "-keyout " + ca_key.string() + " -out " +
          pki.ca_certificate.string() + " -subj /CN=fake-garm-test-ca -days 2 -config " +
          ca_config.string() + " -extensions ca");
  openssl("req -new " + new_ec_key + "-keyout " + pki.server_key.string() + " -out " +
          request.string() + " -subj /CN=" + dns_name + " -config " + ca_config.string());
  openssl("x509 -req -in " + request.string() + " -CA " + pki.ca_certificate.string() + " -CAkey " +
          ca_key.string() + " -CAcreateserial -days 2 -out " + pki.server_certificate.string() +
          " -extfile " + server_extensions.string());
  return pki;
}

FakeGarm::FakeGarm(FakeGarmOptions options)
    : pki_(make_test_pki(directory_.path() / "pki")), plain_(options.plain) {
  const auto instances = directory_.path() / "instances.json";
  std::ofstream(instances) << options.instances.dump();
  const std::string script =
      std::filesystem::path(GARM_EDGE_TEST_DATA_DIR).parent_path() / "support/fake_garm.py";
  std::vector<std::string> arguments = {"python3",     script,
                                        "--cert",      pki_.server_certificate,
                                        "--key",       pki_.server_key,
                                        "--port-file", directory_.path() / "port",
                                        "--log",       directory_.path() / "requests.jsonl",
                                        "--instances", instances};
  if (plain_) {
    arguments.emplace_back("--plain");
  }
  if (!options.downloads.empty()) {
    arguments.insert(arguments.end(), {"--downloads", options.downloads.string(), "--download-rate",
                                       std::to_string(options.download_rate)});
  }
  std::vector<char*> argv;
  for (auto& argument : arguments) {
    argv.push_back(argument.data());
  }
  argv.push_back(nullptr);
  // Its output goes to a file, shown if it fails to start.
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  const auto output = (directory_.path() / "output.log").string();
  posix_spawn_file_actions_addopen(&actions, 1, output.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  const int rc = ::posix_spawnp(&pid_, "python3", &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) {
    throw std::runtime_error("cannot start python3 " + script);
  }
  try {
    wait_until_listening();
  } catch (...) {
    if (pid_ > 0) {  // never -1: kill(-1, ...) signals every process we may signal
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    throw;
  }
}

void FakeGarm::wait_until_listening() {
  const auto port_file = directory_.path() / "port";
  const auto deadline = std::chrono::steady_clock::now() + kStartTimeout;
  while (!std::filesystem::exists(port_file)) {
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      throw std::runtime_error("fake_garm.py exited: " +
                               read_text_file(directory_.path() / "output.log"));
    }
    if (std::chrono::steady_clock::now() > deadline) {
      throw std::runtime_error("fake_garm.py did not start listening");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  port_ = static_cast<std::uint16_t>(std::stoi(read_text_file(port_file)));
}

FakeGarm::~FakeGarm() {
  if (pid_ > 0) {
    ::kill(pid_, SIGTERM);
    ::waitpid(pid_, nullptr, 0);
  }
}

std::string FakeGarm::base_url() const {
  return (plain_ ? "http://127.0.0.1:" : "https://localhost:") + std::to_string(port_);
}

std::vector<nlohmann::json> FakeGarm::requests() const {
  std::vector<nlohmann::json> requests;
  std::ifstream log(directory_.path() / "requests.jsonl");
  for (std::string line; std::getline(log, line);) {
    requests.push_back(nlohmann::json::parse(line));
  }
  return requests;
}

}  // namespace garm_edge::testing
