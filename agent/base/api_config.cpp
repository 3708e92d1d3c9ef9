#include "agent/base/api_config.hpp"

#include <algorithm>

#include "agent/base/config_sections.hpp"
#include "common/text.hpp"
#include "wire/validate.hpp"

namespace garm_edge::agent {

namespace {

using TableReader = TomlTableReader;

ApiClient read_api_client(const toml::table& table, const std::string& source, std::size_t index) {
  TableReader in(table, source, "[[api.clients]] #" + std::to_string(index + 1));
  ApiClient client;
  client.identity = in.required_string("identity");
  const auto* list = in.node("controllers");
  if (list == nullptr || !list->is_array() || list->as_array()->empty()) {
    in.fail(list, "controllers must be a non-empty list of controller UUIDs (or [\"*\"])");
  }
  for (const auto& item : *list->as_array()) {
    const auto id = item.value<std::string>();
    if (!id || (*id != "*" && !wire::is_uuid(*id))) {
      in.fail(&item, "controllers: each entry must be a UUID or \"*\"");
    }
    client.controllers.push_back(ascii_lower(*id));  // garm's IDs are lower case
  }
  in.reject_unknown_keys();
  return client;
}

std::vector<net::AddressRange> read_allowed_ranges(TableReader& in) {
  std::vector<net::AddressRange> ranges;
  const auto* list = in.node("allow");
  if (list == nullptr) {
    return ranges;
  }
  if (!list->is_array() || list->as_array()->empty()) {
    in.fail(list, "allow must be a non-empty list of addresses or CIDR ranges (or left out)");
  }
  for (const auto& item : *list->as_array()) {
    const auto text = item.value<std::string>();
    try {
      ranges.push_back(net::AddressRange::parse(text.value_or("")));
    } catch (const std::invalid_argument& e) {
      in.fail(&item, std::string("allow: ") + e.what());
    }
  }
  return ranges;
}

}  // namespace

void read_api_section(TableReader& root, AgentConfig& config) {
  const auto* table = root.table("api");
  if (table == nullptr) {
    return;
  }
  TableReader in(*table, root.source(), "[api]");
  auto& api = config.api;
  api.enabled = true;
  api.address = in.string("address").value_or(api.address);
  api.port = in.integer<std::uint16_t>("port", 0, 65535).value_or(api.port);  // 0: any free port
  api.ca = in.absolute_path("ca", true);
  api.crl = in.absolute_path("crl", false);
  api.certificate = in.absolute_path("certificate", true);
  api.key = in.absolute_path("key", true);
  api.max_connections =
      in.integer<std::size_t>("max_connections", 1, 65536).value_or(api.max_connections);
  api.workers = in.integer<std::size_t>("workers", 1, 256).value_or(api.workers);
  api.allow = read_allowed_ranges(in);
  if (const auto* clients = in.array_of_tables("clients")) {
    for (std::size_t i = 0; i < clients->size(); ++i) {
      api.clients.push_back(read_api_client(*clients->get(i)->as_table(), root.source(), i));
    }
  }
  if (api.clients.empty()) {
    in.fail(nullptr, "at least one [[api.clients]] entry is required: nobody could use the API");
  }
  in.reject_unknown_keys();
}

std::string read_owner_controller(TomlTableReader& in, const ApiConfig& api,
                                  std::string_view owned) {
  if (auto controller = in.string("controller")) {
    controller = ascii_lower(*controller);  // as garm writes it, and [[api.clients]] are kept
    if (!wire::is_uuid(*controller)) {
      in.fail(in.node("controller"), "controller must be a garm controller's UUID");
    }
    if (api.enabled && !api.has_client_for(*controller)) {
      in.fail(in.node("controller"), "controller " + *controller +
                                         " is not one any [[api.clients]] entry may act for: " +
                                         std::string(owned) + " would never be used");
    }
    return *controller;
  }
  const auto sole = api.sole_controller();
  if (!sole) {
    in.fail(nullptr,
            "controller is required: [[api.clients]] name more than one controller "
            "(or \"*\", or none), and " +
                std::string(owned) + " belong to exactly one");
  }
  return *sole;
}

bool ApiConfig::knows(const std::vector<std::string>& identities) const {
  return std::any_of(clients.begin(), clients.end(), [&identities](const ApiClient& client) {
    return std::find(identities.begin(), identities.end(), client.identity) != identities.end();
  });
}

bool ApiConfig::allows(const std::vector<std::string>& identities,
                       std::string_view controller_id) const {
  for (const auto& client : clients) {
    if (std::find(identities.begin(), identities.end(), client.identity) == identities.end()) {
      continue;
    }
    for (const auto& allowed : client.controllers) {
      if (allowed == "*" || allowed == controller_id) {
        return true;
      }
    }
  }
  return false;
}

bool ApiConfig::allows_every_controller(const std::vector<std::string>& identities) const {
  return allows(identities, "*");
}

bool ApiConfig::has_client_for(std::string_view controller_id) const {
  return std::any_of(clients.begin(), clients.end(), [controller_id](const ApiClient& client) {
    return std::any_of(client.controllers.begin(), client.controllers.end(),
                       [controller_id](const std::string& allowed) {
                         return allowed == "*" || allowed == controller_id;
                       });
  });
}

std::optional<std::string> ApiConfig::sole_controller() const {
  std::set<std::string> named;
  for (const auto& client : clients) {
    named.insert(client.controllers.begin(), client.controllers.end());
  }
  if (named.size() != 1 || *named.begin() == "*") {
    return std::nullopt;
  }
  return *named.begin();
}

}  // namespace garm_edge::agent
