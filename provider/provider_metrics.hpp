#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "provider/commands.hpp"
#include "provider/deferred_deletes.hpp"

namespace garm_edge::provider {

/// The provider runs once per operation, so its figures go to a file Prometheus's node
/// exporter reads (its textfile collector): the deletes kept for agents that could not be
/// reached, per controller and agent, and how old the oldest is (docs/observability.md).
std::string render_provider_metrics(const std::vector<DeferredDelete>& kept);

/// `garm-provider-edge metrics --config FILE [--output FILE]`: the metrics on standard output,
/// or written atomically to FILE (a *.prom file of the textfile collector's directory).
Outcome run_metrics(const std::vector<std::string>& arguments);

}  // namespace garm_edge::provider
