#pragma once

// One agent's guest side on loopback, for the tests of what guests reach: the guest service on
// 127.0.0.1, guests on 127.0.0.2 and up, a fake garm behind the relay.

#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include <asio.hpp>
#include <catch2/catch.hpp>

#include "agent/guests/garm_relay.hpp"
#include "agent/guests/guest_access.hpp"
#include "agent/guests/guest_attachments.hpp"
#include "agent/guests/guest_dispatcher.hpp"
#include "agent/guests/guest_index.hpp"
#include "agent/guests/guest_service.hpp"
#include "agent/instances/identifiers.hpp"
#include "net/http_server.hpp"
#include "support/fake_garm.hpp"
#include "support/run_command.hpp"
#include "support/test_support.hpp"
#include "wire/base64.hpp"

namespace garm_edge::testing {

inline std::string wrapper_for(const wire::BootstrapInstance& b) {
  return "#!/bin/bash\nset -ex\nCALLBACK_URL=\"" + b.callback_url + "\"\nMETADATA_URL=\"" +
         b.metadata_url + "\"\nBEARER_TOKEN=\"" + b.instance_token +
         "\"\ncurl -s -H \"Authorization: Bearer $BEARER_TOKEN\" "
         "\"$METADATA_URL/install-script/\"\n";
}

/// One agent with its guest service on 127.0.0.1 and guests on 127.0.0.2 and up.
struct GuestHost {
  explicit GuestHost(FakeGarm& fake_garm, bool relay_mode = true,
                     const std::function<void(agent::AgentConfig&)>& adjust = {})
      : garm(fake_garm), host("guests.xml", [relay_mode, &adjust](agent::AgentConfig& config) {
          if (adjust) {
            adjust(config);
          }
          config.guests.enabled = true;
          config.guests.relay = relay_mode;
          config.guests.address = "127.0.0.1";
          config.guests.port = 0;
          config.guests.addresses = "127.0.0.2-127.0.0.40";
          // The test driver has no nwfilters; on loopback nothing could spoof anyway.
          config.guests.anti_spoofing = agent::AntiSpoofing::off;
        }) {
    access.start();
    server = std::make_unique<net::HttpServer>(
        io, agent::guest_server_options(host.config, access, index),
        [this](net::HttpRequest request, std::string peer, auto respond) {
          dispatcher->dispatch(std::move(request), std::move(peer), std::move(respond));
        });
    server->start();
    access.set_port(server->port());
    service = host.service(hypervisor, host.store);
    service->serve_guests(attachments);
    guests =
        std::make_unique<agent::GuestService>(host.config, *service, host.store, index, access,
                                              relay, &archives, &sockets, host.clock, host.log);
    dispatcher = std::make_unique<agent::GuestDispatcher>(*guests, index, dispatcher_options);
    hypervisor.defining = [this](const hypervisor::DomainSpec& spec) {
      serials[spec.name] = spec.smbios_serial;
    };
    io_thread = std::thread([this] { io.run(); });
  }
  ~GuestHost() {
    server->stop();
    archives_alive.reset();
    work.reset();
    io.stop();
    io_thread.join();
    server->abandon_streams();  // as the agent does once its event loop is done
    dispatcher->join();
    guests->stop_waiting();
  }

  wire::BootstrapInstance bootstrap(const std::string& name, const std::string& token) const {
    auto b = bootstrap_for(name);
    b.callback_url = garm.base_url() + "/api/v1/callbacks";
    b.metadata_url = garm.base_url() + "/api/v1/metadata";
    b.instance_token = token;
    b.ca_cert_bundle = garm.pki().ca_pem();
    b.extra_specs =
        nlohmann::json{{"runner_install_template", wire::base64_encode(wrapper_for(b))}};
    return b;
  }

  /// The seed URL from the guest's SMBIOS serial.
  std::string seed_url(const std::string& name) {
    const auto serial = serials.at(agent::domain_name_for(kController, name));
    const std::string prefix = "ds=nocloud-net;s=";
    REQUIRE(serial.rfind(prefix, 0) == 0);
    return serial.substr(prefix.size());
  }

  std::string base_url() const { return access.base_url(); }

  FakeGarm& garm;
  Host host;
  CrashSwitch crash;
  FaultyHypervisor hypervisor{host.hypervisor, crash};
  agent::GuestIndex index;
  agent::GuestAccess access{host.config, hypervisor, host.log};
  TempDir archive_dir{"runner-archives"};
  std::unique_ptr<agent::RunnerArchiveCache> archives_alive =
      std::make_unique<agent::RunnerArchiveCache>(
          agent::ArchiveCacheOptions{.directory = archive_dir.path(),
                                     .max_bytes = 64 << 20U,
                                     .failure_memory = std::chrono::seconds(30)},
          std::make_shared<agent::HttpArchiveFetcher>(std::chrono::seconds(60)), host.clock,
          host.log);
  agent::RunnerArchiveCache& archives = *archives_alive;
  agent::AgentSockets sockets{
      {.per_instance = 2, .idle = std::chrono::seconds(3), .stall = std::chrono::seconds(5)},
      host.log};
  agent::GuestAttachments attachments{access, index, &archives, &sockets};
  agent::HttpGarmRelay relay{net::HttpClientOptions{}};
  std::unique_ptr<agent::InstanceService> service;
  std::unique_ptr<agent::GuestService> guests;
  std::map<std::string, std::string> serials;
  asio::io_context io;
  std::optional<asio::executor_work_guard<asio::io_context::executor_type>> work{
      asio::make_work_guard(io)};
  agent::GuestDispatcher::Options dispatcher_options{.seed_workers = 4,
                                                     .relay_workers = 4,
                                                     .download_workers = 4,
                                                     .seeds_per_guest = 1,
                                                     .relays_per_guest = 2,
                                                     .downloads_per_guest = 1,
                                                     .queue_deadline = std::chrono::seconds(10)};
  std::unique_ptr<agent::GuestDispatcher> dispatcher;
  std::unique_ptr<net::HttpServer> server;
  std::thread io_thread;
};

struct CurlAnswer {
  int status = 0;
  std::string body;
  std::string headers;
};

/// curl as a guest at `source`. `extra` is more curl arguments, already quoted.
inline CurlAnswer curl_from(const std::string& source, const std::string& url,
                            const std::string& extra) {
  TempDir dir("curl");
  const auto body = (dir.path() / "body").string();
  const auto head = (dir.path() / "head").string();
  const auto result = run_command("curl -s -m 20 --interface " + source + " -o " + body + " -D " +
                                  head + " -w '%{http_code}' " + extra + " '" + url + "'");
  CurlAnswer answer;
  answer.status = std::atoi(result.output.c_str());
  std::ifstream body_file(body, std::ios::binary);
  answer.body.assign(std::istreambuf_iterator<char>(body_file), {});
  std::ifstream head_file(head, std::ios::binary);
  answer.headers.assign(std::istreambuf_iterator<char>(head_file), {});
  return answer;
}

/// The install script inside a cloud-config user-data (write_files /install_runner.sh).
inline std::string install_script_of(const std::string& user_data) {
  TempDir dir("user-data");
  std::ofstream(dir.path() / "user-data") << user_data;
  return run_command(
             "/usr/bin/python3 -c 'import base64, sys, yaml; "
             "d = yaml.safe_load(open(sys.argv[1])); "
             "print(base64.b64decode(next(f[\"content\"] for f in d[\"write_files\"] "
             "if f[\"path\"] == \"/install_runner.sh\")).decode())' " +
             (dir.path() / "user-data").string())
      .output;
}

inline std::string shell_value(const std::string& script, const std::string& name) {
  const auto start = script.find(name + "='");
  REQUIRE(start != std::string::npos);
  const auto from = start + name.size() + 2;
  return script.substr(from, script.find('\'', from) - from);
}

/// A warm guest's own token, from the seed it boots with.
inline std::string warm_token_of(agent::InstanceStore& store, const std::string& domain_name) {
  const auto record = store.get(domain_name);
  REQUIRE(record);
  REQUIRE(record->guest);
  return shell_value(install_script_of(record->guest->user_data), "WARM_TOKEN");
}

}  // namespace garm_edge::testing
