#include "agent/daemon/descriptor_budget.hpp"

#include <fstream>

#include <catch2/catch.hpp>

#include "common/temp_dir.hpp"
#include "support/run_command.hpp"

using namespace garm_edge;

TEST_CASE("the descriptor budget covers every connection share at its limit", "[daemon]") {
  agent::AgentConfig config;
  CHECK(agent::descriptors_needed(config) == 128);  // no API, no guests
  config.api.enabled = true;
  config.guests.enabled = true;
  // 1,024 silent + 64 handshakes + 256 API connections; 512 guests, each with a relay; two
  // garm-agent sockets (guest and garm) for each of 254 instances.
  CHECK(agent::descriptors_needed(config) == 128 + 1024 + 64 + 256 + 2 * 512 + 2 * 2 * 254);
  config.guests.max_connections = 100;
  config.capacity.max_instances = 10;
  CHECK(agent::descriptors_needed(config) == 128 + 1024 + 64 + 256 + 2 * 100 + 2 * 2 * 10);

  CHECK(agent::soft_limit_for(2496, 1024, 524288) == 2496);   // raised to what is needed
  CHECK(agent::soft_limit_for(2496, 65536, 65536) == 65536);  // never lowered
  CHECK_FALSE(agent::soft_limit_for(2496, 1024, 1024));       // the hard limit is short
}

TEST_CASE("serve warns, naming LimitNOFILE, when the hard descriptor limit cannot hold its shares",
          "[daemon][integration]") {
  TempDir dir("fd-budget");
  const auto pki = dir.path() / "pki";
  const std::string agent = GARM_EDGE_AGENT_BIN;
  REQUIRE(testing::run_command(agent + " pki init --dir " + pki.string()).exit_code == 0);
  std::ofstream(dir.path() / "agent.toml")
      << "[agent]\nstate_dir = \"" << (dir.path() / "state").string()
      << "\"\n[libvirt]\nuri = \"test:///default\"\nstorage_pool = \"default-pool\"\n"
         "[api]\naddress = \"127.0.0.1\"\nport = 0\nca = \""
      << (pki / "ca.crt").string() << "\"\ncertificate = \"" << (pki / "agent.crt").string()
      << "\"\nkey = \"" << (pki / "agent.key").string()
      << "\"\n[[api.clients]]\nidentity = \"garm\"\ncontrollers = [\"*\"]\n"
         "[[images]]\nname = \"debian-12\"\nbase_path = \"/var/lib/garm-edge/images/d.qcow2\"\n"
         "[[flavors]]\nname = \"small\"\n";
  const auto warned =
      testing::run_command("timeout 5 prlimit --nofile=1024:1024 " + agent + " serve --config " +
                           (dir.path() / "agent.toml").string() + " 2>&1");
  CHECK_THAT(warned.output, Catch::Contains("LimitNOFILE") && Catch::Contains("1472") &&
                                Catch::Contains("listening on"));  // and it serves
}
