#include "agent/daemon/caches_command.hpp"

#include <iostream>

#include "agent/base/config.hpp"
#include "agent/caches/job_caches.hpp"
#include "net/admin_client.hpp"

namespace garm_edge::agent {

int caches_command(const std::string& action, const std::string& cache, const Options& options,
                   std::ostream& out) {
  const auto config = load_agent_config(options.require("--config"));
  if (action == "refresh" && config.find_cache(cache) == nullptr) {
    throw UsageError("no cache \"" + cache + "\" in " + options.require("--config"));
  }
  const auto answered = net::ask_running_daemon(
      config.state_dir, {.command = "caches", .action = action, .name = cache}, {});
  if (answered) {
    return net::print_admin_result(*answered, "caches " + action, out, std::cerr);
  }
  if (action == "refresh") {
    std::cerr << "garm-edge-agent caches refresh: no agent runs for " << config.state_dir.string()
              << ": a refresh boots a builder guest, which the running agent does "
                 "(systemctl start garm-edge-agent)\n";
    return 1;
  }
  if (config.caches.empty()) {
    out << "no [[caches]] are configured\n";
    return 0;
  }
  HostCacheDiskTools tools(std::chrono::seconds(60));
  StderrLogger log;
  SystemClock clock;
  const CacheStore store(config, tools, clock, log);
  out << cache_list(store, clock);
  return 0;
}

}  // namespace garm_edge::agent
