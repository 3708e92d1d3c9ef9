#include <algorithm>

#include <nlohmann/json.hpp>

#include "common/text.hpp"
#include "hub/hub_server.hpp"
#include "hub/relayed_request.hpp"
#include "wire/error.hpp"
#include "wire/identity.hpp"
#include "wire/json_fields.hpp"
#include "wire/validate.hpp"

// Placement probes the hub answers itself (hub/placement_views.hpp): each agent's view is
// asked for every heartbeat interval and after every create or delete relayed to it.
namespace garm_edge::hub {
namespace {

/// The hub asks for views as a caller of every controller (what each controller is shown is
/// picked from the view per probe), under its own name, which no client can be issued: no
/// client shares the turn of its view requests.
const HubClient kHubItself{.identity = std::string(wire::kHubCommonName), .controllers = {"*"}};
constexpr std::string_view kViewFeature = "placement-view";
/// A view larger than this is refused unread: an agent's is tens of KiB.
constexpr std::size_t kMaxViewBytes = 4 * 1024 * 1024;

bool offers_views(const AgentPresence& presence) {
  const auto& features = presence.hello.features;
  return std::find(features.begin(), features.end(), kViewFeature) != features.end();
}

}  // namespace

std::optional<HubServer::ProbedInstance> HubServer::probed_instance(const std::string& method,
                                                                    const std::string& target) {
  constexpr std::string_view kControllers = "/v1/controllers/";
  constexpr std::string_view kPlacement = "/placement/";
  if (method != "GET" || !target.starts_with(kControllers)) {
    return std::nullopt;
  }
  const auto rest = std::string_view(target).substr(kControllers.size());
  const auto slash = rest.find('/');
  if (slash == std::string_view::npos || !rest.substr(slash).starts_with(kPlacement)) {
    return std::nullopt;
  }
  const auto controller = rest.substr(0, slash);
  auto name = std::string(rest.substr(slash + kPlacement.size()));
  const auto query = name.find('?');
  const bool fresh_share = query != std::string::npos && name.substr(query) == "?share=fresh";
  if (fresh_share) {
    name.erase(query);
  }
  // What the agent would refuse, or look up by provider ID as well, is the agent's to answer.
  try {
    wire::validate_instance_name(name);
  } catch (const wire::WireError&) {
    return std::nullopt;
  }
  if (!wire::is_uuid(controller) || wire::is_uuid(name)) {
    return std::nullopt;
  }
  return ProbedInstance{
      .controller = ascii_lower(controller), .name = name, .fresh_share = fresh_share};
}

void HubServer::refresh_placement_views() {
  const auto now = PlacementViews::Clock::now();
  std::set<std::string> present;
  for (const auto& presence : tunnels_.presence()) {
    present.insert(presence.name);
    if (presence.tunnels == 0 || !offers_views(presence)) {
      continue;
    }
    const auto taken = views_.taken_at(presence.name);
    if (!taken || now - *taken >= config_.tunnels.heartbeat_interval) {
      ask_placement_view(presence.name);
    }
  }
  views_.keep_only(present, now);
}

void HubServer::ask_placement_view(const std::string& agent) {
  {
    std::lock_guard lock(views_mutex_);
    if (!views_asking_.insert(agent).second) {
      views_stale_.insert(agent);  // asked for once more when this answer is in
      return;
    }
  }
  const auto asked_at = PlacementViews::Clock::now();
  tunnels_.relay(
      agent, kHubItself.identity,
      relayed_request("GET", "/v1/placement-view", agent, "", kHubItself),
      // A heartbeat's bound: a view request must not keep a dead tunnel open.
      config_.tunnels.heartbeat_timeout,
      [this, agent, asked_at](std::optional<net::ClientResponse> answer, const std::string& error,
                              bool) { take_placement_view(agent, asked_at, answer, error); });
}

void HubServer::take_placement_view(const std::string& agent,
                                    PlacementViews::Clock::time_point asked_at,
                                    const std::optional<net::ClientResponse>& answer,
                                    const std::string& error) {
  std::string why;
  try {
    if (!answer) {
      why = error;
    } else if (answer->status != 200) {
      why = "HTTP " + std::to_string(answer->status) + ": " + printable_excerpt(answer->body, 256);
    } else if (answer->body.size() > kMaxViewBytes) {
      why = "a view of " + std::to_string(answer->body.size()) + " bytes";
    } else {
      views_.update(agent, wire::parse_placement_view(answer->body), asked_at);
    }
  } catch (const std::exception& e) {
    why = std::string("an unusable answer: ") + e.what();
  }
  if (!why.empty()) {
    views_.forget(agent);  // its probes go to it again
  }
  bool again = false;
  bool tell = false;
  {
    std::lock_guard lock(views_mutex_);
    views_asking_.erase(agent);
    again = views_stale_.erase(agent) > 0;
    // Said once per change, not every heartbeat: the agent is asked itself meanwhile.
    tell = why.empty() ? views_failing_.erase(agent) > 0 : views_failing_.insert(agent).second;
  }
  if (tell) {
    log_.info(why.empty() ? "agent " + agent + " gives its placement view again"
                          : "agent " + agent +
                                " gives no placement view (its probes are relayed "
                                "to it): " +
                                printable_excerpt(why, 512));
  }
  if (again) {
    ask_placement_view(agent);
  }
}

void HubServer::watch_instance_changes(const net::HttpRequest& request, const std::string& agent,
                                       Tunnels::Done& done) {
  const auto path = request.target.substr(0, request.target.find('?'));
  constexpr std::string_view kControllers = "/v1/controllers/";
  if (!path.starts_with(kControllers) || (request.method != "POST" && request.method != "DELETE")) {
    return;
  }
  const auto rest = std::string_view(path).substr(kControllers.size());
  const auto controller = ascii_lower(rest.substr(0, rest.find('/')));
  const bool instances = rest.substr(std::min(rest.size(), controller.size())) == "/instances";
  std::string created;
  if (request.method == "POST" && instances) {
    try {
      const auto body = wire::parse_json_text(request.body, "a create");
      if (body.is_object() && body.contains("name") && body["name"].is_string()) {
        created = body["name"].get<std::string>();
        views_.create_started(agent, controller, created);
      }
    } catch (const wire::WireError&) {
      // Not a create the agent takes either.
    }
  } else if (request.method != "DELETE") {
    return;  // start, stop: nothing placement counts changes
  } else if (constexpr std::string_view kOne = "/instances/";
             rest.substr(std::min(rest.size(), controller.size())).starts_with(kOne)) {
    // A delete by name goes to every agent: only one that may hold the name has changed.
    const auto ref = std::string(rest.substr(controller.size() + kOne.size()));
    if (!wire::is_uuid(ref) && !views_.may_hold(agent, controller, ref)) {
      return;
    }
  }
  const bool deletes = request.method == "DELETE";
  done = [this, agent, controller, created, deletes, next = std::move(done)](
             std::optional<net::ClientResponse> answer, std::string error, bool sent) {
    // Only a refusal before any work (4xx, or 503: no room, draining) made nothing; a create
    // whose answer was lost after it was sent may still finish there.
    const bool refused =
        answer && ((answer->status >= 400 && answer->status < 500) || answer->status == 503);
    next(std::move(answer), std::move(error), sent);
    if (!created.empty()) {
      views_.create_ended(agent, controller, created, sent && !refused,
                          PlacementViews::Clock::now());
    }
    if (deletes && sent) {
      views_.delete_ended(agent, controller, PlacementViews::Clock::now());
    }
    if (views_.taken_at(agent)) {
      ask_placement_view(agent);  // its room changed
    }
  };
}

}  // namespace garm_edge::hub
