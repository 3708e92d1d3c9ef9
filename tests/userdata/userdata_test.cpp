#include "userdata/userdata.hpp"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include <catch2/catch.hpp>

#include "common/temp_dir.hpp"
#include "support/run_command.hpp"
#include "wire/base64.hpp"

using namespace garm_edge;
using namespace garm_edge::userdata;
using garm_edge::testing::run_command;
using nlohmann::json;
using nlohmann::ordered_json;

namespace {

// cloud-init's own interpreter, so the YAML is read by the PyYAML cloud-init uses.
const std::string kPython = "/usr/bin/python3";
const std::string kGarmCallbackUrl = "https://garm.example.com/api/v1/callbacks";
const std::string kGarmMetadataUrl = "https://garm.example.com/api/v1/metadata";
const GuestEndpoints kRelayEndpoints = {"http://192.168.122.1:8775/guest/cb",
                                        "http://192.168.122.1:8775/guest/md"};

/// Values that would break out of YAML, sh or PowerShell if anything reached them unquoted.
const std::string kHostile =
    "it's \"q\" `touch MARKER` $(touch MARKER) ; rm -rf / && x | y\n- [ {a: b}, *c ] # d\t"
    "\xE2\x80\xA8 \xE2\x80\xA9 \xE2\x80\x98 \xE2\x80\x99 \xE2\x80\x9B \xEF\xBB\xBF \\n \\";
/// The same without what a proxy URL or an ssh key may not hold (quotes, backslashes, controls).
const std::string kHostileLine =
    "it's `touch MARKER` $(touch MARKER) ; rm -rf / && x | y - [ {a: b}, *c ] # d "
    "\xE2\x80\xA8 \xE2\x80\x98 \xE2\x80\x99";

void write_file(const std::filesystem::path& path, const std::string& content) {
  std::ofstream out(path, std::ios::binary);
  out << content;
  REQUIRE(out.good());
}

std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream content;
  content << in.rdbuf();
  return content.str();
}

std::string b64(const std::string& text) {
  return wire::base64_encode(text);
}

std::string decoded(const json& base64_text) {
  const auto text = wire::base64_decode(base64_text.get<std::string>());
  REQUIRE(text.has_value());
  return *text;
}

std::string quoted(const std::filesystem::path& path) {
  return shell_quote(path.string());
}

/// The document as cloud-init's PyYAML reads it, converted to JSON.
json read_with_pyyaml(const std::filesystem::path& file) {
  const std::string program =
      "import json, sys, yaml\n"
      "with open(sys.argv[1], encoding='utf-8') as f:\n"
      "    print(json.dumps(yaml.safe_load(f)))\n";
  const auto result = run_command(kPython + " -c " + shell_quote(program) + " " + quoted(file));
  INFO(result.output);
  REQUIRE(result.exit_code == 0);
  return json::parse(result.output);
}

json yaml_round_trip(const std::string& yaml_text) {
  TempDir dir;
  write_file(dir.path() / "doc.yaml", yaml_text);
  return read_with_pyyaml(dir.path() / "doc.yaml");
}

void require_valid_cloud_config(const std::filesystem::path& file) {
  const auto result = run_command("cloud-init schema --config-file " + quoted(file));
  INFO(read_file(file));
  INFO(result.output);
  REQUIRE(result.exit_code == 0);
}

void require_shellcheck_clean(const std::filesystem::path& file) {
  const auto syntax = run_command("bash -n " + quoted(file));
  INFO(syntax.output);
  REQUIRE(syntax.exit_code == 0);
  const auto lint = run_command("shellcheck --shell=bash " + quoted(file));  // style and up
  INFO(lint.output);
  REQUIRE(lint.exit_code == 0);
}

std::string certificate_pem(const std::string& payload) {
  return "-----BEGIN CERTIFICATE-----\n" + b64(payload) + "\n-----END CERTIFICATE-----\n";
}

/// garm's linux_wrapper.tmpl as garm renders it (URLs, token and proxy already substituted).
const std::string kGarmWrapper = R"bash(#!/bin/bash
set -ex
set -o pipefail
CALLBACK_URL="https://garm.example.com/api/v1/callbacks"
METADATA_URL="https://garm.example.com/api/v1/metadata/"
BEARER_TOKEN="eyJhbGciOiJIUzI1NiIs"
function call() {
  curl --retry 5 --fail -s -X POST -d "$1" -H "Authorization: Bearer ${BEARER_TOKEN}" "${CALLBACK_URL}/status"
}
HTTP_CODE=$(curl -s -w "%{http_code}" -o /tmp/real-install.sh -H "Authorization: Bearer ${BEARER_TOKEN}" "${METADATA_URL}install-script/")
[ "$HTTP_CODE" = 200 ] || call '{"status":"failed","message":"failed to fetch install script"}'
bash /tmp/real-install.sh
)bash";

wire::RunnerApplicationDownload runner_download(const std::string& os, const std::string& arch,
                                                const std::string& filename,
                                                const std::string& base_url = "https://example/",
                                                const std::string& sha256 = "") {
  wire::RunnerApplicationDownload tool;
  tool.os = os;
  tool.architecture = arch;
  tool.filename = filename;
  tool.download_url = base_url + filename;
  if (!sha256.empty()) {
    tool.sha256_checksum = sha256;
  }
  return tool;
}

wire::BootstrapInstance garm_bootstrap() {
  wire::BootstrapInstance bootstrap;
  bootstrap.name = "garm-2xkq8mfj3d0a";
  const std::string releases = "https://github.com/actions/runner/releases/download/v2.330.0/";
  bootstrap.tools = std::vector<wire::RunnerApplicationDownload>{
      runner_download("osx", "x64", "actions-runner-osx-x64-2.330.0.tar.gz", releases),
      runner_download("linux", "x64", "actions-runner-linux-x64-2.330.0.tar.gz", releases,
                      std::string(64, 'a')),
      runner_download("win", "x64", "actions-runner-win-x64-2.330.0.zip", releases,
                      std::string(64, 'B'))};
  bootstrap.repo_url = "https://github.com/myorg/myrepo";
  bootstrap.callback_url = kGarmCallbackUrl;
  bootstrap.metadata_url = kGarmMetadataUrl + "/";
  bootstrap.instance_token = "eyJhbGciOiJIUzI1NiIs";
  bootstrap.ssh_keys =
      std::vector<std::string>{"ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAI ops@example"};
  bootstrap.arch = wire::OsArch::amd64;
  bootstrap.os_type = wire::OsType::linux;
  bootstrap.labels = std::vector<std::string>{"self-hosted", "linux", "edge"};
  bootstrap.pool_id = "9dcf590a-1192-4a9c-b3e4-e0902974c2c0";
  return bootstrap;
}

/// A bootstrap with everything GetCloudInitConfig turns into cloud-config.
wire::BootstrapInstance full_bootstrap() {
  auto bootstrap = garm_bootstrap();
  bootstrap.extra_specs = json{{"runner_install_template", b64(kGarmWrapper)},
                               {"pre_install_scripts",
                                {{"20-docker", b64("#!/bin/sh\napt-get install -y docker.io\n")},
                                 {"10-hostname", b64("#!/bin/sh\necho edge > /etc/motd\n")}}},
                               {"extra_packages", {"git"}}};
  bootstrap.user_data_options.extra_packages = std::vector<std::string>{"jq", "curl"};
  bootstrap.ca_cert_bundle =
      certificate_pem("first certificate") + "# comment\n" + certificate_pem("second certificate");
  bootstrap.proxy_config = {.http_proxy = "http://proxy.example:3128",
                            .https_proxy = "http://proxy.example:3129",
                            .no_proxy = "localhost,192.168.122.1"};
  return bootstrap;
}

/// Runs the values block of a generated bash script (everything before the body) and returns
/// what each named variable holds, NUL-separated output split back.
std::vector<std::string> shell_values(const std::string& script,
                                      const std::vector<std::string>& names,
                                      const std::filesystem::path& dir) {
  const auto end = script.find("# --- end of bootstrap values ---");
  REQUIRE(end != std::string::npos);
  write_file(dir / "values.sh", script.substr(0, end));
  std::string print = "source " + quoted(dir / "values.sh") + " && printf '%s\\0'";
  for (const auto& name : names) {
    print += " \"$" + name + "\"";
  }
  const auto result = run_command("cd " + quoted(dir) + " && bash -c " + shell_quote(print));
  REQUIRE(result.exit_code == 0);
  std::vector<std::string> values;
  std::string::size_type start = 0;
  for (auto nul = result.output.find('\0'); nul != std::string::npos;
       start = nul + 1, nul = result.output.find('\0', start)) {
    values.push_back(result.output.substr(start, nul - start));
  }
  return values;
}

/// Reads a PowerShell single-quoted string starting at `text[at]` as PowerShell's tokenizer
/// does: ' and U+2018..U+201B all open and close it, and each doubled is one literal character.
/// `end` receives the position after the closing quote.
std::string read_powershell_single_quoted(const std::string& text, std::size_t at,
                                          std::size_t& end) {
  const auto quote_length = [&](std::size_t i) -> std::size_t {
    if (i >= text.size()) {
      return 0;
    }
    if (text[i] == '\'') {
      return 1;
    }
    const bool unicode = text.compare(i, 2, "\xE2\x80") == 0 && i + 2 < text.size() &&
                         static_cast<unsigned char>(text[i + 2]) >= 0x98 &&
                         static_cast<unsigned char>(text[i + 2]) <= 0x9B;
    return unicode ? 3 : 0;
  };
  REQUIRE(quote_length(at) != 0);
  std::string value;
  for (std::size_t i = at + quote_length(at); i < text.size();) {
    if (const auto length = quote_length(i)) {
      if (const auto next = quote_length(i + length)) {
        value += text.substr(i, length);  // a doubled quote stands for one
        i += length + next;
        continue;
      }
      end = i + length;
      return value;
    }
    value += text[i++];
  }
  FAIL("unterminated PowerShell string");
  return value;
}

/// The whole of `text` as one PowerShell single-quoted string.
std::string read_powershell_single_quoted(const std::string& text) {
  std::size_t end = 0;
  auto value = read_powershell_single_quoted(text, 0, end);
  CHECK(end == text.size());
  return value;
}

std::string nul_joined(const std::vector<std::string>& items) {
  std::string out;
  for (const auto& item : items) {
    out += item;
    out += '\0';
  }
  return out;
}

/// The value a generated PowerShell assignment `$Name = <expression>` holds.
std::string powershell_value(const std::string& script, const std::string& name) {
  const auto start = script.find("\n$" + name + " = ");
  REQUIRE(start != std::string::npos);
  const auto expression_start = start + name.size() + 5;
  const std::string base64_prefix =
      "([System.Text.Encoding]::UTF8.GetString([System.Convert]::FromBase64String('";
  if (script.compare(expression_start, base64_prefix.size(), base64_prefix) == 0) {
    const auto encoded_start = expression_start + base64_prefix.size();
    const auto value = wire::base64_decode(
        script.substr(encoded_start, script.find('\'', encoded_start) - encoded_start));
    REQUIRE(value.has_value());
    return *value;
  }
  std::size_t end = 0;
  auto value = read_powershell_single_quoted(script, expression_start, end);
  CHECK(script[end] == '\n');  // the literal is the whole expression
  return value;
}

bool is_ascii(const std::string& text) {
  return std::all_of(text.begin(), text.end(),
                     [](char c) { return static_cast<unsigned char>(c) < 0x80; });
}

}  // namespace

TEST_CASE("to_yaml: PyYAML reads back exactly the document, whatever the strings hold",
          "[userdata]") {
  std::string controls;
  for (int c = 1; c < 0x20; ++c) {
    controls += static_cast<char>(c);
  }
  controls += "\x7F\xC2\x80\xC2\x85\xC2\x9F";  // DEL, C1 controls (NEL among them)
  ordered_json document = {
      {"plain", "value"},
      {"controls", controls},
      {"line separators", "a\xE2\x80\xA8z\xE2\x80\xA9"},
      {"specials", "\xEF\xBB\xBF \xEF\xBF\xBE \xEF\xBF\xBF"},
      {"hostile", kHostile},
      {"non-BMP", "\xF0\x9F\x90\xA7 \xE2\x82\xAC \xC3\xA9"},
      {"implicit types",
       {"no",  "on",   "yes",  "off",   "y",          "n",        "null", "~",        "0755",
        "1e3", "0x1f", ".inf", "1_000", "2024-01-02", "12:30:00", "",     " spaced ", "---",
        "...", "# c",  "&a",   "*a",    "!t",         "%x",       "@x",   "`x",       "|",
        ">",   "'",    "\"",   "{}",    "[]",         ": ",       "- x"}},
      {"numbers", {0, -7, 4294967296, 0.5, -2.25, 1e20, 1e-7}},
      {"booleans and null", {true, false, nullptr}},
      {"empty", {{"array", ordered_json::array()}, {"object", ordered_json::object()}}},
      {"nesting", {{{"a", {1, {2, 3}}}, {"b", ordered_json::array({ordered_json::array()})}}}},
      {"yes", "a key YAML 1.1 reads as a boolean"},
      {"key: with - [ {", "a key that needs quotes"},
      {"", "an empty key"}};
  const auto yaml_text = to_yaml(document);
  INFO(yaml_text);
  CHECK(yaml_round_trip(yaml_text) == json::parse(document.dump()));
  CHECK_THAT(yaml_text, Catch::Contains("\"a\\u2028z\\u2029\""));
  CHECK_THAT(yaml_text, Catch::Contains("\\x85"));
  CHECK(yaml_text.find('\t') == std::string::npos);
  CHECK(to_yaml(ordered_json::object()) == "{}\n");
  CHECK(to_yaml({{"list", {"a"}}}) == "list:\n  - \"a\"\n");
}

TEST_CASE("to_yaml refuses strings that are not UTF-8 instead of writing broken YAML",
          "[userdata]") {
  for (const std::string bad :
       {"\xFF", "\xC0\xAF", "\xED\xA0\x80", "\xE2\x80", "a\x80", "\xF4\x90\x80\x80"}) {
    CHECK_THROWS_AS(to_yaml({{"key", bad}}), UserDataError);
    CHECK_THROWS_AS(to_yaml({{bad, "value"}}), UserDataError);
  }
}

TEST_CASE("meta-data holds instance-id and local-hostname", "[userdata]") {
  const auto meta_data = render_meta_data("iid-9dcf590a", "garm-2xkq8mfj3d0a");
  CHECK(yaml_round_trip(meta_data) ==
        json{{"instance-id", "iid-9dcf590a"}, {"local-hostname", "garm-2xkq8mfj3d0a"}});
  CHECK(yaml_round_trip(render_meta_data("a: b", "- [x]")) ==
        json{{"instance-id", "a: b"}, {"local-hostname", "- [x]"}});
}

TEST_CASE("Linux seed: cloud-config as GetCloudInitConfig builds it, valid for cloud-init 22.4",
          "[userdata]") {
  const auto bootstrap = full_bootstrap();
  const auto seed = render_seed(bootstrap, {"iid-1", bootstrap.name, kRelayEndpoints});
  TempDir dir;
  const auto file = dir.path() / "user-data";
  write_file(file, seed.user_data);
  require_valid_cloud_config(file);
  CHECK(seed.vendor_data.empty());
  CHECK(yaml_round_trip(seed.meta_data) ==
        json{{"instance-id", "iid-1"}, {"local-hostname", bootstrap.name}});

  const auto& text = seed.user_data;
  REQUIRE(text.starts_with("#cloud-config\n"));
  std::vector<std::size_t> key_positions;
  for (const auto* key : {"\nusers:", "\npackage_upgrade:", "\npackages:", "\nssh_authorized_keys:",
                          "\nsystem_info:", "\nruncmd:", "\nwrite_files:", "\nbootcmd:"}) {
    INFO(key);
    REQUIRE(text.find(key) != std::string::npos);
    key_positions.push_back(text.find(key));
  }
  CHECK(std::is_sorted(key_positions.begin(), key_positions.end()));  // garm's key order

  const auto config = read_with_pyyaml(file);
  CHECK(config["users"] == json{"default"});
  CHECK(config["package_upgrade"] == true);
  CHECK(config["packages"] == json{"curl", "tar", "jq", "git"});
  CHECK(config["ssh_authorized_keys"] == json(*bootstrap.ssh_keys));
  const auto& user = config["system_info"]["default_user"];
  CHECK(user["name"] == "runner");
  CHECK(user["home"] == "/home/runner");
  CHECK(user["shell"] == "/bin/bash");
  CHECK(user["sudo"] == "ALL=(ALL) NOPASSWD:ALL");
  CHECK(user["groups"].size() == 10);
  CHECK(config["manage_etc_hosts"] == "localhost");
  CHECK(config["ssh"] == json{{"emit_keys_to_console", false}});

  CHECK(config["runcmd"] == json{{"/garm-pre-install/10-hostname"},
                                 {"/garm-pre-install/20-docker"},
                                 {"rm", "-rf", "/garm-pre-install"},
                                 {"su", "-l", "-c", "/install_runner.sh", "runner"},
                                 {"rm", "-f", "/install_runner.sh"}});
  const auto& files = config["write_files"];
  REQUIRE(files.size() == 3);
  CHECK(files[0]["path"] == "/garm-pre-install/10-hostname");
  CHECK(decoded(files[0]["content"]) == "#!/bin/sh\necho edge > /etc/motd\n");
  CHECK(files[1]["path"] == "/garm-pre-install/20-docker");
  CHECK(files[2]["path"] == "/install_runner.sh");
  for (const auto& entry : files) {
    CHECK(entry["encoding"] == "b64");
    CHECK(entry["owner"] == "root:root");
    CHECK(entry["permissions"] == "0755");
  }
  // garm's wrapper, with garm's URLs pointed at the relay and nothing else changed.
  std::string expected_wrapper = kGarmWrapper;
  expected_wrapper.replace(expected_wrapper.find(kGarmCallbackUrl), kGarmCallbackUrl.size(),
                           kRelayEndpoints.callback_url);
  expected_wrapper.replace(expected_wrapper.find(kGarmMetadataUrl), kGarmMetadataUrl.size(),
                           kRelayEndpoints.metadata_url);
  CHECK(decoded(files[2]["content"]) == expected_wrapper);

  // garm's CA, added early and once, without cloud-init's ca_certs rebuilding the bundle.
  CHECK_FALSE(config.contains("ca_certs"));
  REQUIRE(config["bootcmd"].size() == 2);
  const auto& proxy_command = config["bootcmd"][0];
  CHECK(proxy_command[5] == "http://proxy.example:3128");
  CHECK(proxy_command[6] == "http://proxy.example:3129");
  const auto& ca_command = config["bootcmd"][1];
  REQUIRE(ca_command.size() == 8);
  CHECK(ca_command[0] == "cloud-init-per");
  CHECK(ca_command[1] == "instance");  // "once" would outlive a new instance-id
  const auto ca_script = ca_command[7].get<std::string>();
  CHECK_THAT(ca_script, Catch::Contains("add_ca_certificates '/usr/local/share/ca-certificates/"
                                        "garm-edge-1.crt' '/usr/local/share/ca-certificates/"
                                        "garm-edge-2.crt'\n"));
}

namespace {

/// A cold guest's step from its user-data, run here with the guest's paths under `root`.
/// A guest's script with the paths it writes moved under `root`.
std::string under_root(std::string script, const std::filesystem::path& root) {
  for (const auto& [from, to] : {std::pair<std::string, std::string>{"/var/lib/", "var/lib/"},
                                 {"/var/log/", "var/log/"},
                                 {"/run/", "run/"},
                                 {"/home/runner", "home/runner"},
                                 {"/usr/local/share/", "usr/local/share/"},
                                 {"/etc/", "etc/"}}) {
    const auto replacement = (root / to).string();
    for (auto at = script.find(from); at != std::string::npos;
         at = script.find(from, at + replacement.size())) {
      script.replace(at, from.size(), replacement);
    }
  }
  return script;
}

int run_guest_step(const std::string& script, const std::filesystem::path& root,
                   const std::vector<std::string>& arguments) {
  write_file(root / "step.sh", under_root(script, root));
  require_shellcheck_clean(root / "step.sh");
  std::string command = "bash " + quoted(root / "step.sh");
  for (const auto& argument : arguments) {
    command += " '" + argument + "'";
  }
  return run_command(command + " 2>&1").exit_code;
}

}  // namespace

TEST_CASE("a cold guest fetches the cached runner early, and the install script finds it",
          "[userdata]") {
  TempDir dir;
  const auto root = dir.path();
  // The archive as GitHub publishes it, served here from a file:// URL.
  std::filesystem::create_directories(root / "runner/bin");
  write_file(root / "runner/config.sh", "#!/bin/bash\n");
  write_file(root / "runner/bin/installdependencies.sh",
             "#!/bin/bash\ntouch \"$(dirname \"$0\")/../dependencies-installed\"\n");
  REQUIRE(run_command("chmod +x " + quoted(root / "runner/bin/installdependencies.sh") +
                      " && tar -czf " + quoted(root / "runner.tar.gz") + " -C " +
                      quoted(root / "runner") + " .")
              .exit_code == 0);
  const auto sha256 =
      run_command("sha256sum " + quoted(root / "runner.tar.gz")).output.substr(0, 64);
  std::filesystem::create_directories(root / "home/runner");
  std::filesystem::create_directories(root / "var/log");

  auto endpoints = kRelayEndpoints;
  endpoints.runner_archive_url = "http://192.168.122.1:8775/runner-archives/" + sha256;
  endpoints.runner_archive_sha256 = sha256;
  const auto bootstrap = full_bootstrap();
  write_file(root / "user-data",
             render_seed(bootstrap, {"iid-1", bootstrap.name, endpoints}).user_data);
  require_valid_cloud_config(root / "user-data");
  const auto config = read_with_pyyaml(root / "user-data");
  const auto& fetch = config["bootcmd"].back();
  REQUIRE(fetch.size() == 10);
  CHECK(fetch[1] == "instance");
  CHECK(fetch[2] == "garm-edge-runner-prefetch");
  CHECK_THAT(fetch[5].get<std::string>(), Catch::Contains("setsid -f"));  // cloud-init goes on
  CHECK(fetch[8] == endpoints.runner_archive_url);
  CHECK(fetch[9] == sha256);
  // The prefetched runner is taken just before the install script runs.
  const auto& runcmd = config["runcmd"];
  const auto& take = runcmd[runcmd.size() - 3];
  REQUIRE(take.size() == 5);
  CHECK(take[4] == sha256);
  CHECK(runcmd[runcmd.size() - 2][0] == "su");

  const auto archive_url = "file://" + (root / "runner.tar.gz").string();
  SECTION("the archive it asked for: unpacked for the runner user, its dependencies installed") {
    CHECK(run_guest_step(fetch[7].get<std::string>(), root, {archive_url, sha256}) == 0);
    INFO(read_file(root / "var/log/garm-edge-runner-prefetch.log"));
    CHECK(run_guest_step(take[2].get<std::string>(), root, {sha256}) == 0);
    CHECK(std::filesystem::exists(root / "home/runner/actions-runner/config.sh"));
    CHECK(std::filesystem::exists(root / "home/runner/actions-runner/dependencies-installed"));
    CHECK_FALSE(std::filesystem::exists(root / "var/lib/garm-edge/runner"));
  }
  SECTION("bytes that are not the archive garm named: nothing kept, the install script downloads") {
    const std::string other(64, 'a');
    CHECK(run_guest_step(fetch[7].get<std::string>(), root, {archive_url, other}) == 0);
    CHECK(run_guest_step(take[2].get<std::string>(), root, {other}) == 0);
    CHECK_FALSE(std::filesystem::exists(root / "home/runner/actions-runner"));
    CHECK_FALSE(std::filesystem::exists(root / "var/lib/garm-edge/runner"));
  }
  SECTION("a prefetch that was never started, or died, is not waited for") {
    const auto started = std::chrono::steady_clock::now();
    CHECK(run_guest_step(take[2].get<std::string>(), root, {sha256}) == 0);  // no directory
    std::filesystem::create_directories(root / "var/lib/garm-edge/runner");
    const auto gone = run_command("sh -c 'echo $$'").output;  // a pid that has exited
    write_file(root / "var/lib/garm-edge/runner/pid", gone);
    CHECK(run_guest_step(take[2].get<std::string>(), root, {sha256}) == 0);
    CHECK(std::chrono::steady_clock::now() - started < std::chrono::seconds(20));
    CHECK_FALSE(std::filesystem::exists(root / "home/runner/actions-runner"));
    CHECK_FALSE(std::filesystem::exists(root / "var/lib/garm-edge/runner"));
  }
  SECTION("the launch returns at once and leaves the prefetch running on its own") {
    const auto launch = fetch[5].get<std::string>();
    const auto started = std::chrono::steady_clock::now();
    // A prefetch that takes a while: the launch must not wait for it.
    CHECK(run_guest_step(launch, root,
                         {"exec >/dev/null 2>&1; sleep 3; touch " + (root / "prefetched").string(),
                          archive_url, sha256}) == 0);
    CHECK(std::chrono::steady_clock::now() - started < std::chrono::seconds(2));
    CHECK(std::filesystem::is_directory(root / "var/lib/garm-edge/runner"));
    for (int i = 0; i < 100 && !std::filesystem::exists(root / "prefetched"); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    CHECK(std::filesystem::exists(root / "prefetched"));
  }
  SECTION("no prefetch without the cache") {
    const auto uncached = yaml_round_trip(
        render_seed(bootstrap, {"iid-1", bootstrap.name, kRelayEndpoints}).user_data);
    CHECK(uncached["bootcmd"].size() == 2);
    CHECK(uncached["runcmd"].size() == runcmd.size() - 1);
  }
}

TEST_CASE("a cold guest's CA step writes garm's certificates and adds them to the bundle",
          "[userdata]") {
  TempDir dir;
  const auto root = dir.path();
  const auto bootstrap = full_bootstrap();
  write_file(root / "user-data",
             render_seed(bootstrap, {"iid-1", bootstrap.name, kRelayEndpoints}).user_data);
  const auto step = read_with_pyyaml(root / "user-data")["bootcmd"][1];
  REQUIRE(step[4] == "-euo");
  REQUIRE(step[5] == "pipefail");
  std::filesystem::create_directories(root / "usr/local/share/ca-certificates");
  std::filesystem::create_directories(root / "etc/ssl/certs");
  write_file(root / "etc/ssl/certs/ca-certificates.crt", certificate_pem("an image CA"));
  // As cloud-init-per runs it: bash -euo pipefail -c SCRIPT.
  CHECK(run_guest_step("set -euo pipefail\n" + step[7].get<std::string>(), root, {}) == 0);
  const auto bundle = read_file(root / "etc/ssl/certs/ca-certificates.crt");
  CHECK_THAT(bundle, Catch::StartsWith(certificate_pem("an image CA")) &&
                         Catch::Contains(certificate_pem("first certificate")) &&
                         Catch::Contains(certificate_pem("second certificate")));
  CHECK(read_file(root / "usr/local/share/ca-certificates/garm-edge-1.crt") ==
        certificate_pem("first certificate"));
  CHECK(std::filesystem::is_symlink(root / "etc/ssl/certs/garm-edge-2.pem"));
  CHECK((std::filesystem::status(root / "usr/local/share/ca-certificates/garm-edge-1.crt")
             .permissions() &
         std::filesystem::perms::all) ==
        (std::filesystem::perms::owner_read | std::filesystem::perms::owner_write |
         std::filesystem::perms::group_read | std::filesystem::perms::others_read));
}

TEST_CASE("disabled updates: no upgrade, no default packages, extra packages still installed",
          "[userdata]") {
  auto bootstrap = garm_bootstrap();
  bootstrap.user_data_options.disable_updates_on_boot = true;
  auto config = yaml_round_trip(render_linux_cloud_config(bootstrap, "#!/bin/bash\n"));
  CHECK(config["package_upgrade"] == false);
  CHECK_FALSE(config.contains("packages"));
  CHECK_FALSE(config.contains("ca_certs"));
  // Nothing for cloud-final to install first: the runner starts ahead of it.
  REQUIRE(config["bootcmd"].size() == 1);
  CHECK(config["bootcmd"][0][2] == "garm-edge-runner-start");
  CHECK(config["runcmd"][0] ==
        "mkdir /var/lib/cloud/instance/garm-edge-runcmd 2>/dev/null || exit 0");

  bootstrap.user_data_options.disable_updates_on_boot = false;
  bootstrap.extra_specs = json{{"disable_updates", true}, {"extra_packages", {"git", "git"}}};
  config = yaml_round_trip(render_linux_cloud_config(bootstrap, "#!/bin/bash\n"));
  CHECK(config["package_upgrade"] == false);
  CHECK(config["packages"] == json{"git"});
  // The install script may need what cloud-final installs: it runs there, as garm's does.
  CHECK_FALSE(config.contains("bootcmd"));
  CHECK(config["runcmd"][0] == json{"su", "-l", "-c", "/install_runner.sh", "runner"});
}

TEST_CASE(
    "with nothing to install first, runcmd's script starts once modules:config wrote it, "
    "and runs once",
    "[userdata]") {
  auto bootstrap = garm_bootstrap();
  bootstrap.user_data_options.disable_updates_on_boot = true;
  const auto config = yaml_round_trip(render_linux_cloud_config(bootstrap, "#!/bin/bash\n"));
  REQUIRE(config["bootcmd"].size() == 1);
  const auto start = config["bootcmd"][0].get<std::vector<std::string>>();
  REQUIRE(start.size() > 6);
  CHECK(start[0] == "cloud-init-per");
  CHECK(start[1] == "instance");  // bootcmd runs on every boot, runcmd once per instance
  const auto has = [&](const std::string& argument) {
    return std::find(start.begin(), start.end(), argument) != start.end();
  };
  CHECK(has("--no-block"));  // cloud-init goes on
  // Ordered and run as cloud-final is: after modules:config (which writes the script and
  // configures apt) and multi-user.target, before apt's daily jobs, leftovers kept, no timeout.
  CHECK(
      has("--property=After=network-online.target cloud-config.service rc-local.service "
          "multi-user.target"));
  CHECK(has("--property=Before=apt-daily.service apt-daily-upgrade.service"));
  CHECK(has("--property=Type=oneshot"));
  CHECK(has("--property=KillMode=process"));
  CHECK(has("--property=TimeoutStartSec=infinity"));
  CHECK(has("--property=CPUWeight=1000"));  // ahead of cloud-final's start on a busy CPU
  for (const auto& argument : std::vector<std::string>(start.begin() + 7, start.end())) {
    INFO(argument);
    CHECK(argument.find_first_of("$%") == std::string::npos);  // systemd would expand them
  }

  // An image without systemd-run: the step does nothing, and fails nothing.
  std::string launch = "env PATH=/nonexistent /bin/sh -c " + shell_quote(start[5]);
  for (std::size_t i = 6; i < start.size(); ++i) {
    launch += " " + shell_quote(start[i]);
  }
  CHECK(run_command(launch).exit_code == 0);

  TempDir dir;
  const auto root = dir.path();
  std::filesystem::create_directories(root / "var/lib/cloud/instance/scripts");
  const auto start_command = "sh -c " + shell_quote(under_root(start.back(), root));

  // Started before modules:config wrote the script (cloud-config.service missing or failed):
  // nothing is claimed, cloud-final still runs it.
  CHECK(run_command(start_command).exit_code == 0);
  CHECK_FALSE(std::filesystem::exists(root / "var/lib/cloud/instance/garm-edge-runcmd"));

  // The script as cloud-init's runcmd module writes it (util.shellify), its commands one that
  // counts its runs.
  auto runcmd = json::array({config["runcmd"][0]});
  runcmd.push_back(json{"sh", "-c", "echo ran >> \"$0\"", (root / "runs").string()});
  const auto script = root / "var/lib/cloud/instance/scripts/runcmd";
  const std::string shellify =
      "import json, sys\nfrom cloudinit import util\n"
      "sys.stdout.write(util.shellify(json.loads(sys.argv[1])))\n";
  const auto written =
      run_command(kPython + " -c " + shell_quote(shellify) + " " + shell_quote(runcmd.dump()));
  REQUIRE(written.exit_code == 0);
  write_file(script, under_root(written.output, root));
  std::filesystem::permissions(script, std::filesystem::perms::owner_all);

  CHECK(run_command(start_command).exit_code == 0);   // the early start
  CHECK(run_command(quoted(script)).exit_code == 0);  // cloud-final, later
  CHECK(read_file(root / "runs") == "ran\n");
}

TEST_CASE("the proxy bootcmd writes apt's proxy file with the values exactly", "[userdata]") {
  auto bootstrap = garm_bootstrap();
  bootstrap.proxy_config = {.http_proxy = "http://user:p'w$(touch MARKER)`x`;@proxy:3128/ a",
                            .https_proxy = "",
                            .no_proxy = ""};
  const auto config = yaml_round_trip(render_linux_cloud_config(bootstrap, "#!/bin/bash\n"));
  REQUIRE(config["bootcmd"].size() == 1);
  auto command = config["bootcmd"][0].get<std::vector<std::string>>();
  REQUIRE(command.size() == 7);
  CHECK(command[4] == "/etc/apt/apt.conf.d/95garm-edge-proxy");

  TempDir dir;
  command[4] = (dir.path() / "apt.conf.d" / "95garm-edge-proxy").string();
  std::filesystem::create_directory(dir.path() / "apt.conf.d");
  std::string command_line = "cd " + quoted(dir.path()) + " &&";
  for (const auto& argument : command) {
    command_line += " " + shell_quote(argument);
  }
  const auto result = run_command(command_line);
  INFO(result.output);
  REQUIRE(result.exit_code == 0);
  CHECK(read_file(command[4]) ==
        "Acquire::http::Proxy \"http://user:p'w$(touch MARKER)`x`;@proxy:3128/ a\";\n");
  CHECK_FALSE(std::filesystem::exists(dir.path() / "MARKER"));

  bootstrap.proxy_config.http_proxy = "http://proxy\";evil";
  CHECK_THROWS_AS(render_linux_cloud_config(bootstrap, ""), UserDataError);
  bootstrap.proxy_config.http_proxy = "http://proxy\nAcquire::x \"y\"";
  CHECK_THROWS_AS(render_linux_cloud_config(bootstrap, ""), UserDataError);
}

TEST_CASE("the built-in Linux installer passes shellcheck in every variant", "[userdata]") {
  auto bootstrap = garm_bootstrap();
  TempDir dir;
  const auto file = dir.path() / "install.sh";
  for (const bool jit : {false, true}) {
    bootstrap.jit_config_enabled = jit;
    bootstrap.user_data_options.enable_boot_debug = jit;
    bootstrap.github_runner_group = jit ? "" : "edge-group";
    const auto script = builtin_linux_install_script(bootstrap, kRelayEndpoints);
    INFO("jit " << jit);
    CHECK(script.starts_with("#!/bin/bash\n"));
    CHECK_THAT(script, Catch::Contains("sha256sum --check"));
    CHECK_THAT(script, Catch::Contains("CALLBACK_URL='http://192.168.122.1:8775/guest/cb'"));
    CHECK(script.find(kGarmCallbackUrl) == std::string::npos);
    write_file(file, script);
    require_shellcheck_clean(file);
  }
}

TEST_CASE("hostile bootstrap values: valid cloud-config, literal values, inert scripts",
          "[userdata]") {
  auto bootstrap = garm_bootstrap();
  bootstrap.name = kHostile;
  bootstrap.repo_url = kHostile;
  bootstrap.github_runner_group = kHostile;
  bootstrap.instance_token = kHostile;
  bootstrap.labels = std::vector<std::string>{kHostile, "second"};
  bootstrap.ssh_keys = std::vector<std::string>{"ssh-ed25519 AAAA " + kHostileLine};
  bootstrap.user_data_options.extra_packages = std::vector<std::string>{kHostile};
  bootstrap.proxy_config = {
      .http_proxy = "http://proxy/" + kHostileLine, .https_proxy = "", .no_proxy = kHostileLine};
  auto& tool = (*bootstrap.tools)[1];
  tool.download_url = "https://dl.example/" + kHostile;
  tool.temp_download_token = kHostile;
  const std::string hostile_name = "x'$(touch MARKER)`y` ; - [ {a: b} ] # \xE2\x80\xA8\xE2\x80\x99";
  bootstrap.extra_specs = json{{"pre_install_scripts", {{hostile_name, b64(kHostile)}}}};
  const GuestEndpoints endpoints = {"https://relay.example/cb/" + kHostile,
                                    "https://relay.example/md/" + kHostile};

  TempDir dir;
  const auto seed = render_seed(bootstrap, {kHostile, kHostile, endpoints});
  write_file(dir.path() / "user-data", seed.user_data);
  require_valid_cloud_config(dir.path() / "user-data");
  CHECK(yaml_round_trip(seed.meta_data) ==
        json{{"instance-id", kHostile}, {"local-hostname", kHostile}});

  const auto config = read_with_pyyaml(dir.path() / "user-data");
  CHECK(config["packages"] == json{"curl", "tar", kHostile});
  CHECK(config["ssh_authorized_keys"] == json(*bootstrap.ssh_keys));
  CHECK(config["bootcmd"][0][5] == bootstrap.proxy_config.http_proxy);
  CHECK(config["write_files"][0]["path"] == "/garm-pre-install/" + hostile_name);
  CHECK(decoded(config["write_files"][0]["content"]) == kHostile);
  CHECK(config["runcmd"][0] == json{"/garm-pre-install/" + hostile_name});
  const auto script = decoded(config["write_files"][1]["content"]);
  CHECK(script == builtin_linux_install_script(bootstrap, endpoints));

  write_file(dir.path() / "install.sh", script);
  require_shellcheck_clean(dir.path() / "install.sh");
  const auto values = shell_values(
      script,
      {"RUNNER_NAME", "REPO_URL", "RUNNER_GROUP", "BEARER_TOKEN", "RUNNER_LABELS", "DOWNLOAD_URL",
       "TEMP_DOWNLOAD_TOKEN", "HTTP_PROXY_URL", "NO_PROXY_LIST", "CALLBACK_URL"},
      dir.path());
  CHECK(values == std::vector<std::string>{kHostile, kHostile, kHostile, kHostile,
                                           kHostile + ",second", tool.download_url.value(),
                                           kHostile, bootstrap.proxy_config.http_proxy,
                                           kHostileLine, endpoints.callback_url});
  CHECK_FALSE(std::filesystem::exists(dir.path() / "MARKER"));

  bootstrap.os_type = wire::OsType::windows;
  const auto windows = builtin_windows_install_script(bootstrap, endpoints);
  CHECK(is_ascii(windows));  // Windows PowerShell reads BOM-less scripts in the ANSI code page
  CHECK(powershell_value(windows, "RunnerName") == kHostile);
  CHECK(powershell_value(windows, "RunnerLabels") == kHostile + ",second");
  CHECK(powershell_value(windows, "RunnerGroup") == kHostile);
  CHECK(powershell_value(windows, "BearerToken") == kHostile);
  CHECK(powershell_value(windows, "CallbackUrl") == endpoints.callback_url);
  CHECK(powershell_value(windows, "DownloadUrl") ==
        "https://github.com/actions/runner/releases/"
        "download/v2.330.0/"
        "actions-runner-win-x64-2.330.0.zip");
}

TEST_CASE("the built-in Linux installer reports, verifies the archive and registers the runner",
          "[userdata]") {
  TempDir dir;
  const auto& root = dir.path();
  for (const auto* sub : {"stubs", "runner/bin", "home", "log"}) {
    std::filesystem::create_directories(root / sub);
  }
  // A runner archive whose config.sh and svc.sh record how they were called.
  write_file(root / "runner/config.sh",
             "#!/bin/bash\nprintf '%s\\0' \"$@\" > \"$LOG_DIR/config-args\"\n"
             "printf '{\\n  \"agentId\": 42,\\n  \"agentName\": \"x\"\\n}' > .runner\n");
  write_file(root / "runner/svc.sh", "#!/bin/bash\necho \"$*\" >> \"$LOG_DIR/svc\"\n");
  write_file(root / "runner/bin/installdependencies.sh", "#!/bin/bash\n");
  // curl records what the script sends and answers as garm would.
  write_file(root / "stubs/curl", R"bash(#!/bin/bash
url='' output='' data='' write_out=''
while [ $# -gt 0 ]; do
  case $1 in
    --url) url=$2; shift 2 ;;
    --write-out) write_out=$2; shift 2 ;;
    --output) output=$2; shift 2 ;;
    --data-binary) data=$2; shift 2 ;;
    --header) cat "${2#@}" >> "$LOG_DIR/headers"; shift 2 ;;
    -X|-H|--retry|--retry-delay) shift 2 ;;
    *) shift ;;
  esac
done
case $url in
  */status) printf '%s\n' "$data" >> "$LOG_DIR/status" ;;
  */system-info/) printf '%s\n' "$data" >> "$LOG_DIR/system-info" ;;
  */runner-registration-token/) printf 'REGISTRATION-TOKEN' ;;
  https://dl.example/*) cp "$FAKE_ARCHIVE" "$output"; [ -z "$write_out" ] || printf 200 ;;
  http://cache.example/*) printf 'the agent could not get it: HTTP 404\n' > "$output"; printf 502 ;;
  *) exit 22 ;;
esac
)bash");
  write_file(root / "stubs/sudo", "#!/bin/sh\nexec \"$@\"\n");
  REQUIRE(run_command("chmod +x " + quoted(root / "stubs/curl") + " " +
                      quoted(root / "stubs/sudo") + " " + quoted(root / "runner") + "/*.sh " +
                      quoted(root / "runner/bin") + "/*.sh && tar -czf " +
                      quoted(root / "runner.tar.gz") + " -C " + quoted(root / "runner") + " .")
              .exit_code == 0);
  const auto checksum =
      run_command("sha256sum " + quoted(root / "runner.tar.gz")).output.substr(0, 64);

  auto bootstrap = garm_bootstrap();
  auto& tool = (*bootstrap.tools)[1];
  tool.download_url = "https://dl.example/runner.tar.gz?x='$(touch MARKER)\"";
  bootstrap.name = "runner \"one\" $(touch MARKER)";
  bootstrap.github_runner_group = "group 'g'";
  bootstrap.proxy_config.http_proxy = "http://proxy:3128";
  const auto run_installer = [&](const std::string& sha256,
                                 const GuestEndpoints& endpoints = kRelayEndpoints) {
    tool.sha256_checksum = sha256;
    write_file(root / "install.sh", builtin_linux_install_script(bootstrap, endpoints));
    return run_command(
        "cd " + quoted(root) + " && rm -f log/* && env HOME=" + quoted(root / "home") +
        " PATH=" + quoted(root / "stubs") + ":\"$PATH\" LOG_DIR=" + quoted(root / "log") +
        " FAKE_ARCHIVE=" + quoted(root / "runner.tar.gz") + " bash install.sh");
  };
  const auto statuses = [&] {
    std::vector<json> out;
    std::istringstream lines(read_file(root / "log/status"));
    for (std::string line; std::getline(lines, line);) {
      out.push_back(json::parse(line));  // each body must be one valid JSON document
    }
    return out;
  };

  SECTION("a matching archive ends with idle and the runner's agent ID") {
    const auto result = run_installer(checksum);
    INFO(result.output);
    REQUIRE(result.exit_code == 0);
    const auto reported = statuses();
    REQUIRE(reported.size() >= 3);
    CHECK(reported.front()["status"] == "installing");
    CHECK(reported.front()["message"] == "downloading tools from " + *tool.download_url);
    CHECK(reported.back() ==
          json{{"status", "idle"}, {"message", "runner successfully installed"}, {"agent_id", 42}});
    CHECK(json::parse(read_file(root / "log/system-info"))["agent_id"] == 42);
    const auto config_args = read_file(root / "log/config-args");
    CHECK(config_args == nul_joined({"--unattended", "--url", "https://github.com/myorg/myrepo",
                                     "--token", "REGISTRATION-TOKEN", "--name", bootstrap.name,
                                     "--labels", "self-hosted,linux,edge", "--no-default-labels",
                                     "--ephemeral", "--runnergroup", "group 'g'"}));
    CHECK(read_file(root / "log/svc") == "install runner\nstart\n");
    CHECK_THAT(read_file(root / "log/headers"),
               Catch::Contains("Authorization: Bearer " + bootstrap.instance_token));
    CHECK_THAT(read_file(root / "home/actions-runner/.env"),
               Catch::Contains("http_proxy=http://proxy:3128\n"));
    CHECK_FALSE(std::filesystem::exists(root / "MARKER"));
  }
  SECTION("a checksum mismatch reports failed, names both sums and registers nothing") {
    const auto result = run_installer(std::string(64, '0'));
    INFO(result.output);
    CHECK(result.exit_code == 1);
    const auto reported = statuses();
    REQUIRE_FALSE(reported.empty());
    CHECK(reported.back()["status"] == "failed");
    CHECK(reported.back()["message"] == "sha256 checksum mismatch for " + *tool.download_url +
                                            ": expected " + std::string(64, '0') + ", got " +
                                            checksum);
    CHECK_FALSE(std::filesystem::exists(root / "log/config-args"));
  }

  SECTION("an archive the agent's cache cannot give is reported failed with the agent's reason") {
    auto endpoints = kRelayEndpoints;
    endpoints.runner_archive_url = "http://cache.example/runner-archives/" + checksum;
    const auto result = run_installer(checksum, endpoints);
    INFO(result.output);
    CHECK(result.exit_code == 1);
    const auto reported = statuses();
    REQUIRE_FALSE(reported.empty());
    CHECK(reported.back()["status"] == "failed");
    CHECK(reported.back()["message"] == "downloading the runner from " +
                                            endpoints.runner_archive_url +
                                            " failed (HTTP 502): the agent could not get it: "
                                            "HTTP 404");
    CHECK_FALSE(std::filesystem::exists(root / "log/config-args"));
  }
}

TEST_CASE("shell_quote and powershell_quote keep every value one literal", "[userdata]") {
  CHECK(shell_quote("") == "''");
  CHECK(shell_quote("it's") == "'it'\\''s'");
  CHECK_THROWS_AS(shell_quote(std::string("a\0b", 3)), UserDataError);

  CHECK(powershell_quote("it's") == "'it''s'");
  CHECK(powershell_quote("\xE2\x80\x98x\xE2\x80\x99y\xE2\x80\x9Az\xE2\x80\x9B") ==
        "'\xE2\x80\x98\xE2\x80\x98x\xE2\x80\x99\xE2\x80\x99y\xE2\x80\x9A\xE2\x80\x9Az"
        "\xE2\x80\x9B\xE2\x80\x9B'");
  CHECK(powershell_quote("\xE2\x80\x9C$x\"") == "'\xE2\x80\x9C$x\"'");  // not quotes for '...'
  CHECK_THROWS_AS(powershell_quote(std::string("a\0b", 3)), UserDataError);
  for (const auto& value :
       {kHostile, kHostileLine, std::string("''''"), std::string("\xE2\x80\x99")}) {
    CHECK(read_powershell_single_quoted(powershell_quote(value)) == value);
  }
}

GarmUrls urls_of(const wire::BootstrapInstance& bootstrap) {
  return {.callback_url = bootstrap.callback_url,
          .metadata_url = bootstrap.metadata_url,
          .runner_download_url = ""};
}

TEST_CASE("rewrite_garm_urls points garm's URLs at the guest endpoints", "[userdata]") {
  const auto bootstrap = garm_bootstrap();  // metadata URL with a trailing slash
  const std::string text = "A=" + kGarmCallbackUrl + "\nB=" + kGarmCallbackUrl +
                           "/status\nC=" + kGarmMetadataUrl + "/\nD=" + kGarmMetadataUrl +
                           "/install-script/ E=" + kGarmMetadataUrl +
                           "-other F=https://garm.example.com/api/v1/other\n";
  CHECK(rewrite_garm_urls(text, urls_of(bootstrap), kRelayEndpoints) ==
        "A=http://192.168.122.1:8775/guest/cb\nB=http://192.168.122.1:8775/guest/cb/status\n"
        "C=http://192.168.122.1:8775/guest/md/\nD=http://192.168.122.1:8775/guest/md/"
        "install-script/ E=" +
            kGarmMetadataUrl + "-other F=https://garm.example.com/api/v1/other\n");
  // Trailing slashes on the endpoints do not double up.
  CHECK(rewrite_garm_urls(kGarmCallbackUrl + "/status", urls_of(bootstrap),
                          {"http://relay/cb/", "http://relay/md/"}) == "http://relay/cb/status");
  // The bootstrap's own URLs change nothing.
  CHECK(rewrite_garm_urls(text, urls_of(bootstrap), {kGarmCallbackUrl, kGarmMetadataUrl + "/"}) ==
        text);
  // One scan: swapping the URLs cannot rewrite a replacement again.
  CHECK(rewrite_garm_urls(kGarmCallbackUrl + " " + kGarmMetadataUrl, urls_of(bootstrap),
                          {kGarmMetadataUrl, kGarmCallbackUrl}) ==
        kGarmMetadataUrl + " " + kGarmCallbackUrl);

  auto nested = bootstrap;  // one URL a prefix of the other, and a port that continues
  nested.callback_url = "https://garm:80";
  nested.metadata_url = "https://garm:80/md";
  CHECK(rewrite_garm_urls("https://garm:80/md/x https://garm:80/status https://garm:8000/md",
                          urls_of(nested), {"http://cb", "http://md"}) ==
        "http://md/x http://cb/status https://garm:8000/md");
}

TEST_CASE("With a runner archive URL, the tool's download URL points at the agent's cache",
          "[userdata]") {
  const auto bootstrap = garm_bootstrap();
  const auto download_url = *select_tool(bootstrap).download_url;
  auto endpoints = kRelayEndpoints;
  const std::string script =
      "DOWNLOAD_URL=\"" + download_url + "\"\nOTHER=" + download_url + ".sha256\n";
  CHECK(rewrite_garm_urls(script, garm_urls_of(bootstrap, endpoints), endpoints) == script);
  endpoints.runner_archive_url = "http://192.168.122.1:8775/runner-archives/abc";
  CHECK(rewrite_garm_urls(script, garm_urls_of(bootstrap, endpoints), endpoints) ==
        "DOWNLOAD_URL=\"http://192.168.122.1:8775/runner-archives/abc\"\nOTHER=" + download_url +
            ".sha256\n");
  // The built-in installer downloads from the cache and still checks the SHA-256 itself.
  const auto builtin = builtin_linux_install_script(bootstrap, endpoints);
  CHECK_THAT(builtin, Catch::Contains("DOWNLOAD_URL='" + endpoints.runner_archive_url + "'"));
  CHECK_THAT(builtin, Catch::Contains("sha256sum --check"));
  CHECK(builtin.find(download_url) == std::string::npos);
}

TEST_CASE("select_tool follows util.GetTools, in garm's and GitHub's spellings", "[userdata]") {
  auto bootstrap = garm_bootstrap();
  CHECK(select_tool(bootstrap).filename == "actions-runner-linux-x64-2.330.0.tar.gz");
  bootstrap.os_type = wire::OsType::windows;
  CHECK(select_tool(bootstrap).filename == "actions-runner-win-x64-2.330.0.zip");

  bootstrap.tools = std::vector<wire::RunnerApplicationDownload>{
      runner_download("linux", "arm64", "github-arm64"),
      runner_download("windows", "amd64", "garm-windows-amd64"),
      runner_download("linux", "arm", "arm"), runner_download("linux", "arm64", "second-arm64")};
  CHECK(select_tool(bootstrap).filename == "garm-windows-amd64");
  bootstrap.os_type = wire::OsType::linux;
  bootstrap.arch = wire::OsArch::arm64;
  CHECK(select_tool(bootstrap).filename == "github-arm64");  // the first match wins
  bootstrap.arch = wire::OsArch::arm;
  CHECK(select_tool(bootstrap).filename == "arm");
  bootstrap.arch = wire::OsArch::amd64;
  CHECK_THROWS_AS(select_tool(bootstrap), UserDataError);
  bootstrap.arch = wire::OsArch::i386;
  CHECK_THROWS_AS(select_tool(bootstrap), UserDataError);
  bootstrap.arch = wire::OsArch::arm64;
  bootstrap.tools.reset();
  CHECK_THROWS_AS(select_tool(bootstrap), UserDataError);
  CHECK_THROWS_AS(builtin_linux_install_script(bootstrap, kRelayEndpoints), UserDataError);
}

TEST_CASE("install_script: garm's template when present, else the built-in installer",
          "[userdata]") {
  auto bootstrap = garm_bootstrap();
  CHECK(install_script(bootstrap, kRelayEndpoints).starts_with("#!/bin/bash\n# Installs"));
  bootstrap.os_type = wire::OsType::windows;
  CHECK(install_script(bootstrap, kRelayEndpoints).starts_with("#ps1_sysnative\n# Installs"));
  bootstrap.extra_specs = json{{"runner_install_template", b64("curl " + kGarmMetadataUrl + "/x")}};
  CHECK(install_script(bootstrap, kRelayEndpoints) == "curl http://192.168.122.1:8775/guest/md/x");
  bootstrap.extra_specs = json{{"runner_install_template", "not base64!"}};
  CHECK_THROWS_AS(install_script(bootstrap, kRelayEndpoints), UserDataError);
  bootstrap.extra_specs = json{{"runner_install_template", 7}};
  CHECK_THROWS_AS(install_script(bootstrap, kRelayEndpoints), UserDataError);
}

TEST_CASE("bootstraps that cannot become safe user-data are refused", "[userdata]") {
  const auto refused = [](const wire::BootstrapInstance& bootstrap) {
    CHECK_THROWS_AS(render_seed(bootstrap, {"iid", "host", kRelayEndpoints}), UserDataError);
  };
  auto bootstrap = garm_bootstrap();
  bootstrap.ca_cert_bundle = "just text";
  refused(bootstrap);
  bootstrap.ca_cert_bundle = "-----BEGIN CERTIFICATE-----\nAAAA\n";  // never closed
  refused(bootstrap);
  bootstrap.ca_cert_bundle = "-----BEGIN CERTIFICATE-----\n!!\n-----END CERTIFICATE-----\n";
  refused(bootstrap);

  for (const std::string name : {"", "a/b", "..", "../x", "a\nb", ".", "a\\b"}) {
    INFO(name);
    bootstrap = garm_bootstrap();
    bootstrap.extra_specs = json{{"pre_install_scripts", {{name, b64("#!/bin/sh\n")}}}};
    refused(bootstrap);
  }
  bootstrap = garm_bootstrap();
  bootstrap.extra_specs = json{{"pre_install_scripts", {{"ok", "%%%"}}}};
  refused(bootstrap);
  bootstrap = garm_bootstrap();
  bootstrap.ssh_keys = std::vector<std::string>{"ssh-ed25519 AAAA\nssh-rsa EVIL"};
  refused(bootstrap);

  bootstrap = garm_bootstrap();  // the built-in installer's inputs
  (*bootstrap.tools)[1].sha256_checksum = "abc";
  refused(bootstrap);
  bootstrap = garm_bootstrap();
  (*bootstrap.tools)[1].download_url = "--config=/etc/passwd";
  refused(bootstrap);
  bootstrap = garm_bootstrap();
  CHECK_THROWS_AS(render_seed(bootstrap, {"iid", "host", {"file:///etc", "http://md"}}),
                  UserDataError);
  bootstrap.os_type.reset();
  refused(bootstrap);
}

TEST_CASE("Windows user-data runs the install script after the CA bundle and ssh keys",
          "[userdata]") {
  auto bootstrap = garm_bootstrap();
  bootstrap.os_type = wire::OsType::windows;
  bootstrap.ca_cert_bundle = certificate_pem("windows certificate");
  const std::string script =
      "#ps1_sysnative\nparam([string]$Token)\nWrite-Host 'caf\xC3\xA9 \xE2\x80\x99'\n";
  const auto user_data = render_windows_user_data(bootstrap, script);
  CHECK(user_data.starts_with("#ps1_sysnative\n"));
  CHECK(is_ascii(user_data));
  CHECK(powershell_value(user_data, "GarmEdgeInstallScript") == script);
  CHECK_THAT(user_data, Catch::Contains("$GarmEdgeCaCertificates = @(" +
                                        powershell_quote(b64("windows certificate")) + ")"));
  CHECK_THAT(user_data, Catch::Contains("$GarmEdgeSshKeys = @(" +
                                        powershell_quote(bootstrap.ssh_keys->front()) + ")"));

  const auto seed = render_seed(bootstrap, {"iid", "host", kRelayEndpoints});
  const auto installer = powershell_value(seed.user_data, "GarmEdgeInstallScript");
  CHECK(installer == builtin_windows_install_script(bootstrap, kRelayEndpoints));
  CHECK_THAT(installer, Catch::Contains("Get-FileHash -Algorithm SHA256"));
  CHECK(powershell_value(installer, "Sha256Checksum") == std::string(64, 'b'));
  CHECK(powershell_value(installer, "MetadataUrl") == kRelayEndpoints.metadata_url);
}

TEST_CASE("a warm guest's assignment is clean bash that carries garm's values literally",
          "[userdata][warm]") {
  TempDir dir;
  auto bootstrap = full_bootstrap();
  bootstrap.name = "garm-warm-1";
  const auto assignment = render_linux_assignment(bootstrap, kRelayEndpoints,
                                                  "#!/bin/bash\necho " + kHostile + "\n", "abc");
  write_file(dir.path() / "assignment.sh", assignment);
  require_shellcheck_clean(dir.path() / "assignment.sh");
  CHECK_THAT(assignment, Catch::Contains("hostnamectl set-hostname 'garm-warm-1'"));
  CHECK_THAT(assignment, Catch::Contains("install -y 'jq' 'curl' 'git'"));
  CHECK_THAT(assignment, Catch::Contains("add_ca_certificates '/usr/local/share/ca-"));
  CHECK_THAT(assignment, Catch::Contains("/garm-pre-install/10-hostname"));
  CHECK(assignment.find("/garm-pre-install/10-hostname") <
        assignment.find("/garm-pre-install/20-docker"));  // name order, as cloud-init's
  CHECK_THAT(assignment, Catch::Contains("!= 'abc' ]; then rm -rf /home/runner/actions-runner"));
  CHECK_THAT(assignment, Catch::Contains("su -l -c /install_runner.sh runner"));
  CHECK(assignment.ends_with(std::string(kAssignmentEnd) + "\n"));  // the guest runs it whole
  // A failing step reports to garm through the agent, with garm's token.
  CHECK_THAT(assignment, Catch::Contains("trap 'report_failure $LINENO' ERR"));
  CHECK_THAT(assignment, Catch::Contains("CALLBACK_URL='http://192.168.122.1:8775/guest/cb'"));
  CHECK_THAT(assignment, Catch::Contains("BEARER_TOKEN='" + bootstrap.instance_token + "'"));
  CHECK_THAT(assignment, Catch::Contains("DPkg::Lock::Timeout=600"));
  // Without a runner archive garm asks for from the cache, none unpacked while warming stays.
  CHECK_THAT(render_linux_assignment(bootstrap, kRelayEndpoints, "#!/bin/bash\n", ""),
             Catch::Contains("!= 'none' ]; then rm -rf /home/runner/actions-runner"));
  auto hostile_package = bootstrap;
  hostile_package.user_data_options.extra_packages =
      std::vector<std::string>{"-oAPT::Update::Pre-Invoke::=touch MARKER"};
  CHECK_THROWS_AS(render_linux_assignment(hostile_package, kRelayEndpoints, "#!/bin/bash\n", "abc"),
                  UserDataError);
  // Scripts and the install script travel as base64: nothing of them is shell syntax here.
  CHECK(assignment.find("touch MARKER") == std::string::npos);
  CHECK(assignment.find(wire::base64_encode("#!/bin/bash\necho " + kHostile + "\n")) !=
        std::string::npos);
}

TEST_CASE(
    "warm and cold guests trust garm's CA exactly as update-ca-certificates would, "
    "incrementally",
    "[userdata][warm]") {
  if (!std::filesystem::exists("/usr/sbin/update-ca-certificates")) {
    WARN("not run: update-ca-certificates (Debian's ca-certificates) is not installed");
    return;
  }
  TempDir dir;
  const bool warm = GENERATE(true, false);
  INFO((warm ? "a warm guest's assignment" : "a cold guest's bootcmd"));
  const auto assignment = [&]() -> std::string {
    if (warm) {
      return render_linux_assignment(full_bootstrap(), kRelayEndpoints, "#!/bin/bash\n", "abc");
    }
    const auto bootstrap = full_bootstrap();
    write_file(dir.path() / "user-data",
               render_seed(bootstrap, {"iid-1", bootstrap.name, kRelayEndpoints}).user_data);
    return read_with_pyyaml(dir.path() / "user-data")["bootcmd"][1][7].get<std::string>();
  }();
  const auto begin = assignment.find("add_ca_certificates() {");
  REQUIRE(begin != std::string::npos);
  const auto end = assignment.find("\n}\n", begin);
  REQUIRE(end != std::string::npos);
  write_file(dir.path() / "add.sh", assignment.substr(begin, end + 3 - begin));
  CHECK_THAT(
      assignment,
      Catch::Contains("add_ca_certificates '/usr/local/share/ca-certificates/garm-edge-1.crt'"
                      " '/usr/local/share/ca-certificates/garm-edge-2.crt'"));
  CHECK(assignment.find("update-ca-certificates >/dev/null\n    return") != std::string::npos);

  // Two image CAs made trusted by update-ca-certificates; then garm's CA and one the image
  // already trusts added once by it, in etc-full, and once by the assignment's function, in
  // etc-fast: the same files, modes and links, the same bundle, the same news for the hooks.
  write_file(dir.path() / "compare.sh", R"bash(set -euo pipefail
PATH=$PATH:/usr/sbin
root=$1
cd "$root"
for name in ca1 ca2 garm; do
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -subj "/CN=$name" \
    -days 2 -keyout "$name.key" -out "$name.crt" 2>/dev/null
done
mkdir -p share/image local etc-full hooks
cp ca1.crt ca2.crt share/image/
printf 'image/ca1.crt\nimage/ca2.crt\n' > certs.conf
printf '#!/bin/sh\ncat >> "$0.log"\n' > hooks/record && chmod +x hooks/record
update() {
  update-ca-certificates --certsconf "$root/certs.conf" --certsdir "$root/share" \
    --localcertsdir "$root/local" --hooksdir "$root/hooks" --etccertsdir "$root/etc-full" >/dev/null
}
update
cp -a etc-full etc-fast && rm -f hooks/record.log
cp garm.crt local/garm-edge-1.crt
cp ca1.crt local/garm-edge-2.crt
update
mv hooks/record.log full-hook.log
CA_CERTS_DIR=$root/etc-fast CA_HOOKS_DIR=$root/hooks bash -euo pipefail -c \
  '. ./add.sh; add_ca_certificates "$@"' add "$root"/local/garm-edge-{1,2}.crt
mv hooks/record.log fast-hook.log
listing() { (cd "$1" && find . -printf '%p %m -> %l\n' | sort); }
diff <(listing etc-full) <(listing etc-fast)
cmp etc-full/ca-certificates.crt etc-fast/ca-certificates.crt
diff <(sed 's/etc-full/etc-X/' full-hook.log) <(sed 's/etc-fast/etc-X/' fast-hook.log)
echo "certificates in the bundle: $(grep -c 'BEGIN CERTIFICATE' etc-fast/ca-certificates.crt)"
openssl verify -CApath etc-fast garm.crt
)bash");
  const auto result =
      run_command("bash " + quoted(dir.path() / "compare.sh") + " " + quoted(dir.path()) + " 2>&1");
  INFO(result.output);
  CHECK(result.exit_code == 0);
  CHECK_THAT(result.output,
             Catch::Contains("certificates in the bundle: 4") && Catch::Contains("garm.crt: OK"));

  if (!warm) {
    return;
  }
  // A step that fails inside the function still reports `failed` to garm (bash's ERR trap
  // reaches into functions only with -E).
  const auto prologue = assignment.substr(0, assignment.find("hostnamectl"));
  REQUIRE(prologue.find("trap 'report_failure $LINENO' ERR") != std::string::npos);
  std::filesystem::create_directories(dir.path() / "stubs");
  write_file(dir.path() / "stubs/curl", "#!/bin/sh\necho \"$@\" >> \"$CURL_LOG\"\n");
  write_file(dir.path() / "failing.sh", prologue + assignment.substr(begin, end + 3 - begin) +
                                            "add_ca_certificates /nonexistent.crt\n");
  const auto failing = run_command("chmod +x " + quoted(dir.path() / "stubs/curl") +
                                   " && CA_CERTS_DIR=" + quoted(dir.path() / "etc-fast") +
                                   " CURL_LOG=" + quoted(dir.path() / "curl.log") +
                                   " PATH=" + quoted(dir.path() / "stubs") + ":\"$PATH\" bash " +
                                   quoted(dir.path() / "failing.sh") + " 2>&1");
  INFO(failing.output);
  CHECK(failing.exit_code != 0);
  CHECK_THAT(read_file(dir.path() / "curl.log"),
             Catch::Contains("\"status\": \"failed\"") && Catch::Contains("/status"));
}

TEST_CASE("a warm guest installs a kept runner's dependencies only once bound, only if garm's",
          "[userdata][warm]") {
  TempDir dir;
  const auto& root = dir.path();
  std::filesystem::create_directories(root / "home/actions-runner/bin");
  write_file(root / "home/actions-runner/bin/installdependencies.sh",
             "#!/bin/bash\ntouch \"$LOG_DIR/dependencies\"\n");
  write_file(root / "home/.garm-edge-runner-archive", std::string(64, 'a') + "\n");
  // The assignment's runner part, from its check of the unpacked archive to the dependencies,
  // with the runner's home moved here.
  const auto runner_part = [&](const std::string& wanted) {
    const auto assignment =
        render_linux_assignment(full_bootstrap(), kRelayEndpoints, "#!/bin/bash\n", wanted);
    const auto begin = assignment.find("if [ \"$(cat /home/runner/.garm-edge-runner-archive");
    const auto dependencies = assignment.find("bin/installdependencies.sh ]");
    REQUIRE(begin != std::string::npos);
    REQUIRE(dependencies != std::string::npos);
    CHECK(dependencies < assignment.find("su -l -c /install_runner.sh runner"));
    auto part = assignment.substr(begin, assignment.find("\nfi\n", dependencies) + 4 - begin);
    for (auto at = part.find("/home/runner"); at != std::string::npos;
         at = part.find("/home/runner", at)) {
      part.replace(at, 12, (root / "home").string());
    }
    return part;
  };
  const auto run = [&](const std::string& part) {
    write_file(root / "part.sh", part);
    return run_command("chmod +x " + quoted(root / "home/actions-runner/bin") +
                       "/*.sh && LOG_DIR=" + quoted(root) + " bash -Eeuo pipefail " +
                       quoted(root / "part.sh") + " 2>&1");
  };
  SECTION("the runner garm asks for is kept and its dependencies installed") {
    const auto result = run(runner_part(std::string(64, 'a')));
    INFO(result.output);
    CHECK(result.exit_code == 0);
    CHECK(std::filesystem::exists(root / "dependencies"));
    CHECK(std::filesystem::exists(root / "home/actions-runner"));
  }
  SECTION("another runner is removed and nothing of it runs") {
    const auto result = run(runner_part(std::string(64, 'b')));
    INFO(result.output);
    CHECK(result.exit_code == 0);
    CHECK_FALSE(std::filesystem::exists(root / "dependencies"));
    CHECK_FALSE(std::filesystem::exists(root / "home/actions-runner"));
  }
}

TEST_CASE("a warm guest unpacks the cached runner, reports ready, waits, then runs its assignment",
          "[userdata][warm]") {
  TempDir dir;
  const auto& root = dir.path();
  for (const auto* sub : {"stubs", "home", "log", "runner/bin"}) {
    std::filesystem::create_directories(root / sub);
  }
  write_file(root / "runner/config.sh", "#!/bin/bash\n");
  write_file(root / "runner/bin/installdependencies.sh",
             "#!/bin/bash\ntouch \"$LOG_DIR/dependencies\"\n");
  // curl: the archive, the ready report, then 204 twice before the assignment.
  write_file(root / "stubs/curl", R"bash(#!/bin/bash
url='' output='' method=GET
while [ $# -gt 0 ]; do
  case $1 in
    --url) url=$2; shift 2 ;;
    -o) output=$2; shift 2 ;;
    -X) method=$2; shift 2 ;;
    --header) cat "${2#@}" >> "$LOG_DIR/headers"; shift 2 ;;
    -w|--retry|--retry-delay) shift 2 ;;
    *) shift ;;
  esac
done
case "$method $url" in
  "GET http://agent/runner-archives/"*) cp "$FAKE_ARCHIVE" "$output" ;;
  "POST http://agent/warm/ready") echo ready >> "$LOG_DIR/ready" ;;
  "GET http://agent/warm/assignment?wait=30")  # held by the agent: a long poll
    echo poll >> "$LOG_DIR/polls"
    polls=$(wc -l < "$LOG_DIR/polls")
    if [ "$polls" = 1 ]; then printf 204; exit 0; fi
    if [ "$polls" = 2 ]; then  # cut off: its last line is missing
      printf '#!/bin/bash\ntouch "$LOG_DIR/ran-cut-off"\n' > "$output"; printf 200; exit 0
    fi
    printf '#!/bin/bash\ntouch "$LOG_DIR/assigned"\n# end of garm-edge assignment\n' > "$output"
    printf 200 ;;
  *) exit 22 ;;
esac
)bash");
  write_file(root / "stubs/sudo", "#!/bin/sh\nexec \"$@\"\n");
  write_file(root / "stubs/sleep", "#!/bin/sh\n");
  REQUIRE(run_command("chmod +x " + quoted(root / "stubs") + "/* " + quoted(root / "runner") +
                      "/*.sh " + quoted(root / "runner/bin") + "/*.sh && tar -czf " +
                      quoted(root / "runner.tar.gz") + " -C " + quoted(root / "runner") + " .")
              .exit_code == 0);
  const auto checksum =
      run_command("sha256sum " + quoted(root / "runner.tar.gz")).output.substr(0, 64);
  const auto run_warm = [&](const std::string& sha256) {
    write_file(root / "warm.sh",
               warm_guest_script({.agent_url = "http://agent/",
                                  .token = "warm-token-1",
                                  .archive_url = "http://agent/runner-archives/" + sha256,
                                  .archive_sha256 = sha256}));
    return run_command("cd " + quoted(root) + " && rm -rf log/* home/* home/.garm* && env HOME=" +
                       quoted(root / "home") + " PATH=" + quoted(root / "stubs") +
                       ":\"$PATH\" LOG_DIR=" + quoted(root / "log") +
                       " FAKE_ARCHIVE=" + quoted(root / "runner.tar.gz") + " bash warm.sh");
  };
  write_file(
      root / "warm.sh",
      warm_guest_script(
          {.agent_url = "http://agent", .token = "t", .archive_url = "", .archive_sha256 = ""}));
  require_shellcheck_clean(root / "warm.sh");

  SECTION(
      "a verified archive is unpacked, not run, and remembered; the assignment runs once "
      "bound") {
    const auto result = run_warm(checksum);
    INFO(result.output);
    CHECK(result.exit_code == 0);
    CHECK(std::filesystem::exists(root / "home/actions-runner/config.sh"));
    // Bytes only: nothing of the archive runs before the guest is bound (this test's assignment
    // here does not install its dependencies).
    CHECK_FALSE(std::filesystem::exists(root / "log/dependencies"));
    CHECK(read_file(root / "home/.garm-edge-runner-archive") == checksum + "\n");
    CHECK(read_file(root / "log/ready") == "ready\n");
    CHECK(read_file(root / "log/polls") == "poll\npoll\npoll\n");
    CHECK(std::filesystem::exists(root / "log/assigned"));
    CHECK_FALSE(std::filesystem::exists(root / "log/ran-cut-off"));
    CHECK_THAT(read_file(root / "log/headers"),
               Catch::Contains("Authorization: Bearer warm-token-1"));
  }
  SECTION("an archive that fails its checksum is not kept; the guest still gets its assignment") {
    const auto result = run_warm(std::string(64, '0'));
    INFO(result.output);
    CHECK(result.exit_code == 0);
    CHECK_FALSE(std::filesystem::exists(root / "home/actions-runner"));
    CHECK_FALSE(std::filesystem::exists(root / "home/.garm-edge-runner-archive"));
    CHECK(std::filesystem::exists(root / "log/assigned"));
  }
}

TEST_CASE("scratch disks are formatted and mounted, further NICs brought up, early in boot",
          "[userdata][shapes]") {
  const GuestDevices devices{.caches = {},
                             .scratch = {{.serial = "garm-scratch-0", .path = "/mnt/scratch"}},
                             .extra_nic_macs = {"52:54:00:aa:bb:cc", "52:54:00:dd:ee:ff"}};
  const auto config =
      yaml_round_trip(render_linux_cloud_config(garm_bootstrap(), "#!/bin/bash\n", {}, devices));
  REQUIRE(config["bootcmd"].size() >= 2);
  const auto scratch = config["bootcmd"][0].get<std::vector<std::string>>();
  REQUIRE(scratch.size() == 5);
  CHECK(std::vector<std::string>(scratch.begin() + 3, scratch.end()) ==
        std::vector<std::string>{"garm-edge-scratch", "garm-scratch-0"});
  // Formatted by that step, mounted by cloud-init's mounts module as caches are.
  CHECK(config["mounts"] == json::array({{"/dev/disk/by-id/virtio-garm-scratch-0", "/mnt/scratch",
                                          "auto", "defaults,nofail,noatime", "0", "2"}}));
  CHECK(config["runcmd"][0] == json{"chmod", "1777", "/mnt/scratch"});
  const auto nics = config["bootcmd"][1].get<std::vector<std::string>>();
  CHECK(std::vector<std::string>(nics.begin() + 3, nics.end()) ==
        std::vector<std::string>{"garm-edge-nics", "52:54:00:aa:bb:cc", "52:54:00:dd:ee:ff"});
  TempDir dir;
  for (const auto& step : {scratch, nics}) {
    std::ofstream(dir.path() / "step.sh") << step[2];
    CHECK(run_command("bash -n " + (dir.path() / "step.sh").string()).exit_code == 0);
  }
  for (const auto& bad : {GuestDevices{.caches = {},
                         .scratch = {{.serial = "x", .path = "/mnt/$(reboot)"}},
                         .extra_nic_macs = {}},
                          GuestDevices{.caches = {}, .scratch = {}, .extra_nic_macs = {"eth0"}}}) {
    CHECK_THROWS_AS(render_linux_cloud_config(garm_bootstrap(), "#!/bin/bash\n", {}, bad),
                    UserDataError);
  }
}

TEST_CASE(
    "a restored guest steps its clock to the agent's, reseeds its CRNG, and renews its lease "
    "only after a sleep",
    "[userdata][warm]") {
  TempDir dir;
  const auto assignment = assignment_at(
      render_linux_assignment(full_bootstrap(), kRelayEndpoints, "#!/bin/bash\n", "abc"),
      std::chrono::system_clock::now(), "fresh'entropy");
  const auto time_line = assignment.find("\nAGENT_TIME=");
  REQUIRE(time_line == assignment.find('\n'));  // the second line, whatever the script holds
  CHECK(assignment.find("\nAGENT_ENTROPY='fresh'\\''entropy'\n") ==
        assignment.find('\n', time_line + 1));  // the third, quoted
  const auto begin = assignment.find("renew_dhcp_lease() {");
  const auto end = assignment.find("report_failure() {");
  REQUIRE(begin != std::string::npos);
  REQUIRE(end != std::string::npos);
  write_file(dir.path() / "after_sleep.sh", assignment.substr(begin, end - begin));
  // Fake commands for what the block runs: each logs its arguments; `date` reads the real clock.
  std::filesystem::create_directories(dir.path() / "bin");
  write_file(dir.path() / "bin/date",
             "#!/bin/bash\nif [ \"$2\" = -s ]; then echo \"date $*\" >> \"$LOG\"; else exec "
             "/bin/date \"$@\"; fi\n");
  write_file(dir.path() / "bin/ip", "#!/bin/sh\necho 'default via 10.0.0.1 dev ens9 proto dhcp'\n");
  write_file(dir.path() / "bin/dhclient", "#!/bin/sh\necho \"dhclient $*\" >> \"$LOG\"\n");
  write_file(dir.path() / "bin/systemctl", "#!/bin/sh\nexit 3\n");
  // Fails after logging: the host's own CRNG and kernel log stay untouched.
  write_file(dir.path() / "bin/perl", "#!/bin/sh\necho \"perl $*\" >> \"$LOG\"\nexit 1\n");
  for (const char* fake : {"date", "ip", "dhclient", "systemctl", "perl"}) {
    std::filesystem::permissions(dir.path() / "bin" / fake, std::filesystem::perms::owner_all);
  }
  const auto run_with = [&](double agent_time, const std::string& received_at = "") {
    const auto log = dir.path() / "log";
    std::filesystem::remove(log);
    char assigned[64];
    std::snprintf(assigned, sizeof assigned, "%.3f", agent_time);
    const auto result = run_command(
        "cd " + dir.path().string() + " && PATH=" + (dir.path() / "bin").string() +
        ":$PATH LOG=" + log.string() + " AGENT_TIME=" + assigned + " RECEIVED_AT=" + received_at +
        " AGENT_ENTROPY=x bash -euo pipefail after_sleep.sh 2>&1");
    REQUIRE(result.exit_code == 0);
    std::ifstream in(log);
    return std::string((std::istreambuf_iterator<char>(in)), {});
  };
  const double now =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  const auto awake = run_with(now);
  CHECK_THAT(awake, Catch::StartsWith("date -u -s @"));
  CHECK(awake.find("dhclient") == std::string::npos);  // a running warm guest keeps its lease
  CHECK_THAT(awake, Catch::Contains("perl -e open(my $f, \">\", \"/dev/urandom\") or exit 1; "
                                    "ioctl($f, 0x5207, 0) or exit 1"));
  // Received 20 s ago by the guest's clock: the agent's time then, plus those 20 s.
  char received[64];
  std::snprintf(received, sizeof received, "%.3f", now - 20);
  const auto late = run_with(now, received);
  const auto stepped_to = std::stod(late.substr(late.find('@') + 1));
  CHECK(stepped_to > now + 19);
  CHECK(stepped_to < now + 30);
  const auto slept = run_with(now + 3600);
  CHECK_THAT(slept, Catch::Contains("date -u -s @"));
  CHECK_THAT(slept, Catch::Contains("dhclient -x -pf /run/dhclient.ens9.pid"));
  CHECK_THAT(slept, Catch::Contains("dhclient -4 -nw -pf /run/dhclient.ens9.pid -lf "
                                    "/var/lib/dhcp/dhclient.ens9.leases ens9"));
}
