#include <cstdlib>
#include <iostream>
#include <iterator>
#include <map>
#include <string>
#include <unistd.h>
#include <vector>

#include "provider/commands.hpp"
#include "provider/fleet_status.hpp"
#include "provider/hubs.hpp"
#include "provider/provider_metrics.hpp"

int main(int argc, char** argv) {
  std::map<std::string, std::string> environment;
  for (char** entry = environ; *entry != nullptr; ++entry) {
    const std::string text(*entry);
    if (const auto equals = text.find('='); equals != std::string::npos) {
      environment.emplace(text.substr(0, equals), text.substr(equals + 1));
    }
  }
  garm_edge::provider::Outcome outcome;
  // garm runs the provider with GARM_COMMAND set and no arguments: that stays exactly so.
  const bool operator_command = environment.count("GARM_COMMAND") == 0 && argc >= 2;
  if (operator_command && std::string(argv[1]) == "status") {
    outcome = garm_edge::provider::run_status(std::vector<std::string>(argv + 2, argv + argc));
  } else if (operator_command && std::string(argv[1]) == "images") {
    outcome = garm_edge::provider::run_images(std::vector<std::string>(argv + 2, argv + argc));
  } else if (operator_command && std::string(argv[1]) == "metrics") {
    outcome = garm_edge::provider::run_metrics(std::vector<std::string>(argv + 2, argv + argc));
  } else if (operator_command && std::string(argv[1]) == "caches") {
    outcome = garm_edge::provider::run_caches(std::vector<std::string>(argv + 2, argv + argc));
  } else {
    outcome = garm_edge::provider::run_command(environment, [] {
      return std::string(std::istreambuf_iterator<char>(std::cin),
                         std::istreambuf_iterator<char>());
    });
  }
  std::cout << outcome.out << std::flush;
  std::cerr << outcome.err << std::flush;
  if (garm_edge::provider::hub_listings_running()) {
    std::_Exit(outcome.exit_code);  // a thread still waits on a silent hub: no exit handlers
  }
  return outcome.exit_code;
}
