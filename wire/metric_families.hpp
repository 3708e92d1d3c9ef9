#pragma once

#include <map>
#include <string>

namespace garm_edge::wire {

/// Every family an agent's /metrics may hold, with the TYPE the agent writes for it. The hub's
/// fleet scrape holds each family to this type, so a host that declares another one loses its
/// own samples, never another host's (tests/wire/metric_families_test.cpp keeps the table and
/// the agent's code in step).
const std::map<std::string, std::string, std::less<>>& agent_metric_types();

}  // namespace garm_edge::wire
