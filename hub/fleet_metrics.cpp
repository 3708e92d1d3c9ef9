#include "hub/fleet_metrics.hpp"

#include <algorithm>
#include <cstdint>
#include <memory>
#include <mutex>

#include "common/durable_file.hpp"
#include "common/prometheus_text.hpp"
#include "hub/prometheus_merge.hpp"
#include "net/pki.hpp"
#include "wire/metric_families.hpp"

namespace garm_edge::hub {
namespace {

/// The families only the hub writes: no agent's series may take their names (an agent's own
/// garm_edge_hub_link_* are its view of its link, and stay).
const std::vector<std::string> kHubFamilies = {"garm_edge_agent_up", "garm_edge_hub_agent_",
                                               "garm_edge_hub_certificate_",
                                               "garm_edge_hub_placement_"};

std::string metrics_request(const std::string& agent, const std::string& reader) {
  return "GET /metrics HTTP/1.1\r\nHost: " + agent + "\r\nX-Garm-Edge-Caller: " + reader +
         "\r\nX-Garm-Edge-Caller-Role: metrics\r\nContent-Length: 0\r\n\r\n";
}

double unix_seconds(std::chrono::system_clock::time_point at) {
  return std::chrono::duration<double>(at.time_since_epoch()).count();
}

void render_agents(PrometheusText& text, const FleetView& view,
                   const std::map<std::string, AgentScrape>& scrapes,
                   const std::map<std::string, std::size_t, std::less<>>& dropped) {
  std::map<std::string, const AgentPresence*> present;
  for (const auto& presence : view.presence) {
    present[presence.name] = &presence;
  }
  text.family("garm_edge_agent_up", "gauge",
              "1 when the agent answered this scrape through its tunnel in time.");
  for (const auto& agent : view.enrolled) {
    const auto found = scrapes.find(agent.name);
    text.sample("garm_edge_agent_up", {{"agent", agent.name}},
                std::uint64_t{found != scrapes.end() && found->second.up ? 1u : 0u});
  }
  text.family("garm_edge_hub_agent_scrape_seconds", "gauge",
              "How long the agent took to answer this scrape.");
  for (const auto& [name, scrape] : scrapes) {
    text.sample("garm_edge_hub_agent_scrape_seconds", {{"agent", name}}, scrape.seconds);
  }
  text.family(
      "garm_edge_hub_agent_dropped_lines", "gauge",
      "Lines of the agent's answer to this scrape the hub dropped (not exposition text, "
      "a label or family not the agent's to write, or samples of a family it types otherwise "
      "than the fleet).");
  for (const auto& [name, count] : dropped) {
    text.sample("garm_edge_hub_agent_dropped_lines", {{"agent", name}},
                static_cast<std::uint64_t>(count));
  }
  text.family("garm_edge_hub_agent_tunnels", "gauge", "Tunnels the agent holds open to the hub.");
  text.family("garm_edge_hub_agent_last_seen_timestamp_seconds", "gauge",
              "When the agent last answered the hub (a request or a heartbeat), Unix time.");
  for (const auto& agent : view.enrolled) {
    const auto found = present.find(agent.name);
    const auto tunnels = found == present.end() ? 0 : found->second->tunnels;
    text.sample("garm_edge_hub_agent_tunnels", {{"agent", agent.name}},
                static_cast<std::uint64_t>(tunnels));
    if (found != present.end() && found->second->last_seen) {
      text.sample("garm_edge_hub_agent_last_seen_timestamp_seconds", {{"agent", agent.name}},
                  unix_seconds(*found->second->last_seen));
    }
  }
  text.family("garm_edge_hub_agent_certificate_expiry_timestamp_seconds", "gauge",
              "When the newest certificate the hub issued the agent expires, Unix time.");
  for (const auto& agent : view.enrolled) {
    std::int64_t not_after = 0;
    for (const auto& certificate : agent.certificates) {
      not_after = std::max(not_after, certificate.not_after);
    }
    text.sample("garm_edge_hub_agent_certificate_expiry_timestamp_seconds", {{"agent", agent.name}},
                static_cast<std::uint64_t>(std::max<std::int64_t>(0, not_after)));
  }
}

void render_certificates(PrometheusText& text, const std::filesystem::path& pki) {
  std::vector<std::pair<std::string, std::filesystem::path>> files = {{"hub", pki / "hub.crt"},
                                                                      {"ca", pki / "ca.crt"}};
  std::error_code error;
  for (std::filesystem::directory_iterator entry(pki / "clients", error), end;
       !error && entry != end; entry.increment(error)) {
    if (entry->path().extension() == ".crt" && files.size() < 1024) {
      files.emplace_back("client", entry->path());
    }
  }
  text.family("garm_edge_hub_certificate_expiry_timestamp_seconds", "gauge",
              "When the hub's certificate, its CA's or a client's it issued expires, Unix time.");
  for (const auto& [kind, path] : files) {
    try {
      const auto facts = net::certificate_facts(read_file(path).value_or(""));
      text.sample("garm_edge_hub_certificate_expiry_timestamp_seconds",
                  {{"certificate", kind}, {"name", facts.common_name}},
                  static_cast<std::uint64_t>(std::max<std::int64_t>(0, facts.not_after_unix)));
    } catch (const std::exception&) {
      continue;  // unreadable: the hub's start or reload says so
    }
  }
}

void render_placement(PrometheusText& text, const FleetView& view) {
  text.family("garm_edge_hub_placement_probes_total", "counter",
              "Placement probes of one agent: answered by the hub from the agent's view, or "
              "relayed to the agent (no fresh view, or it may hold the instance).");
  text.sample("garm_edge_hub_placement_probes_total", {{"answered_by", "hub"}},
              view.probes_answered_by_hub);
  text.sample("garm_edge_hub_placement_probes_total", {{"answered_by", "agent"}},
              view.probes_relayed);
  text.family("garm_edge_hub_placement_views", "gauge",
              "Agents whose placement view the hub holds.");
  text.sample("garm_edge_hub_placement_views", {}, std::uint64_t{view.placement_views});
}

}  // namespace

void scrape_agents(Tunnels& tunnels, const std::vector<std::string>& connected,
                   const std::string& reader, const FleetMetricsOptions& options,
                   std::function<void(std::map<std::string, AgentScrape>)> done) {
  struct Gathered {
    std::mutex mutex;
    std::map<std::string, AgentScrape> scrapes;
    std::size_t left = 0;
    std::size_t bytes = 0;
    std::function<void(std::map<std::string, AgentScrape>)> done;
  };
  if (connected.empty()) {
    return done({});
  }
  auto gathered = std::make_shared<Gathered>();
  gathered->left = connected.size();
  gathered->done = std::move(done);
  const auto started = std::chrono::steady_clock::now();
  for (const auto& name : connected) {
    tunnels.relay(
        name, "metrics:" + reader, metrics_request(name, reader), options.agent_timeout,
        [gathered, name, started, options](std::optional<net::ClientResponse> answer,
                                           const std::string& error, bool) {
          AgentScrape scrape;
          scrape.seconds =
              std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
          std::unique_lock lock(gathered->mutex);
          if (!answer) {
            scrape.error = error;
          } else if (answer->status != 200) {
            scrape.error = "the agent answered HTTP " + std::to_string(answer->status);
          } else if (answer->body.size() > options.max_agent_bytes ||
                     gathered->bytes + answer->body.size() > options.max_total_bytes) {
            scrape.error = "the agent's " + std::to_string(answer->body.size()) +
                           " bytes are more than a scrape takes of it";
          } else {
            gathered->bytes += answer->body.size();
            scrape.up = true;
            scrape.text = std::move(answer->body);
          }
          gathered->scrapes[name] = std::move(scrape);
          if (--gathered->left > 0) {
            return;
          }
          auto scrapes = std::move(gathered->scrapes);
          lock.unlock();
          gathered->done(std::move(scrapes));
        });
  }
}

std::string render_fleet_metrics(const FleetView& view,
                                 const std::map<std::string, AgentScrape>& scrapes) {
  PrometheusMerge merge("agent", kHubFamilies, wire::agent_metric_types());
  for (const auto& [name, scrape] : scrapes) {
    if (scrape.up) {
      merge.add(name, scrape.text);
    }
  }
  const auto dropped = merge.dropped();
  PrometheusText own;
  render_agents(own, view, scrapes, dropped);
  render_certificates(own, view.pki);
  render_placement(own, view);
  merge.add_own(own.str());
  return merge.str();
}

}  // namespace garm_edge::hub
