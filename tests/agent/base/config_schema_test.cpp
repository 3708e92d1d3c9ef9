// The agent's config schema (served at /v1/schemas/config) and its reader are written apart:
// these tests hold them to each other key by key, so neither can drift.
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>
#include <toml++/toml.h>

#include "agent/base/config.hpp"

using namespace garm_edge::agent;
using nlohmann::json;

namespace {

using Section = std::map<std::string, std::string>;  // key: TOML value

/// A minimal valid config, with `overrides` set in their sections (images and flavors are
/// their one entry; api.clients stays as is).
std::string config_with(const std::map<std::string, Section>& overrides) {
  std::map<std::string, Section> sections{
      {"api",
       {{"ca", "\"/pki/ca.crt\""}, {"certificate", "\"/pki/a.crt\""}, {"key", "\"/pki/a.key\""}}},
      {"images", {{"name", "\"debian-12\""}, {"base_path", "\"/images/d.qcow2\""}}},
      {"libvirt", {{"network", "\"garm\""}}},  // what [guests] needs
      {"flavors", {{"name", "\"small\""}}}};
  if (overrides.contains("warm")) {  // a warm entry names the image and flavor, needs guests
    // and, with a client for every controller, names its own
    sections["warm"] = {{"controller", "\"9dcf590a-1192-4a9c-b3e4-e0902974c2c0\""},
                        {"image", "\"debian-12\""},
                        {"flavor", "\"small\""}};
    sections["guests"];
  }
  if (overrides.contains("caches")) {  // a cache names its mount, script and controller
    static const auto script = [] {
      const auto path = std::filesystem::temp_directory_path() / "garm-edge-schema-refresh.sh";
      std::ofstream(path) << "#!/bin/sh\n";
      return path.string();
    }();
    sections["caches"] = {{"name", "\"docker\""},
                          {"mount", "\"/var/lib/docker\""},
                          {"refresh_script", "\"" + script + "\""},
                          {"controller", "\"9dcf590a-1192-4a9c-b3e4-e0902974c2c0\""}};
    sections["guests"];
  }
  if (overrides.contains("scratch_pools")) {  // a scratch pool names its storage pool
    sections["scratch_pools"] = {{"name", "\"nvme\""}, {"storage_pool", "\"nvme\""}};
  }
  if (overrides.contains("networks")) {  // a further network names a libvirt network
    sections["networks"] = {{"name", "\"lab\""}, {"network", "\"lab\""}};
  }
  if (overrides.contains("quotas")) {  // a quota names its controller
    sections["quotas"] = {{"controller", "\"9dcf590a-1192-4a9c-b3e4-e0902974c2c0\""}};
  }
  if (overrides.contains("mirror")) {  // the mirror runs a registry that must be there
    sections["mirror"]["registry"] = "\"/bin/sh\"";
    sections["guests"];
  }
  if (overrides.contains("images") && overrides.at("images").contains("source_format")) {
    sections["images"]["source"] = "\"https://images.example/d.img\"";  // what it describes
    sections["images"]["sha256"] = "\"" + std::string(64, 'a') + "\"";
  }
  for (const auto& [section, keys] : overrides) {
    for (const auto& [key, value] : keys) {
      sections[section][key] = value;
    }
  }
  std::ostringstream text;
  for (const auto& [section, keys] : sections) {
    const bool array = section == "images" || section == "flavors" || section == "warm" ||
                       section == "caches" || section == "scratch_pools" || section == "networks" ||
                       section == "quotas";
    text << (array ? "[[" : "[") << section << (array ? "]]" : "]") << "\n";
    for (const auto& [key, value] : keys) {
      text << key << " = " << value << "\n";
    }
    if (section == "api") {
      text << "[[api.clients]]\nidentity = \"garm\"\ncontrollers = [\"*\"]\n";
    }
  }
  return text.str();
}

/// What the reader says about `value` for `key` in `section`; empty when it accepts it.
std::string reader_error(const std::string& section, const std::string& key,
                         const std::string& value) {
  try {
    parse_agent_config(config_with({{section, {{key, value}}}}), "agent.toml");
    return "";
  } catch (const ConfigError& e) {
    return e.what();
  }
}

/// Each section's properties: the top-level tables and the items of the two arrays.
std::map<std::string, json> schema_sections() {
  const auto schema = json::parse(agent_config_json_schema());
  std::map<std::string, json> sections;
  for (const auto& [name, section] : schema.at("properties").items()) {
    const auto& object = section.at("type") == "array" ? section.at("items") : section;
    CHECK(object.at("additionalProperties") == false);  // the reader refuses unknown keys too
    sections[name] = object.at("properties");
  }
  return sections;
}

}  // namespace

TEST_CASE("every key of the config schema is one the reader knows, within the same bounds",
          "[config][schema]") {
  for (const auto& [section, properties] : schema_sections()) {
    for (const auto& [key, property] : properties.items()) {
      INFO(section << "." << key);
      if (property.contains("enum")) {
        for (const auto& value : property.at("enum")) {
          CHECK(reader_error(section, key, json(value).dump()).empty());
        }
        CHECK_THAT(reader_error(section, key, "\"no-such-value\""), Catch::Contains(key));
      } else if (property.value("type", "") == "integer") {
        const auto min = property.at("minimum").get<std::int64_t>();
        CHECK(reader_error(section, key, std::to_string(min)).empty());
        CHECK_THAT(reader_error(section, key, std::to_string(min - 1)),
                   Catch::Contains(key + " must be between"));
        // Without a maximum the schema allows any size: so must the reader.
        const auto max = property.value("maximum", std::int64_t{1} << 40);
        CHECK(reader_error(section, key, std::to_string(max)).empty());
        if (property.contains("maximum")) {
          CHECK_THAT(reader_error(section, key, std::to_string(max + 1)),
                     Catch::Contains(key + " must be between"));
        }
      } else if (property.value("type", "") == "number") {
        const auto min = property.at("minimum").get<double>();
        const auto max = property.at("maximum").get<double>();
        CHECK(reader_error(section, key, json(min).dump()).empty());
        CHECK(reader_error(section, key, json(max).dump()).empty());
        CHECK(reader_error(section, key, "2").empty());  // an integer is a number too
        CHECK_THAT(reader_error(section, key, json(min / 2).dump()),
                   Catch::Contains(key + " must be between"));
        CHECK_THAT(reader_error(section, key, json(max * 2).dump()),
                   Catch::Contains(key + " must be between"));
        CHECK_THAT(reader_error(section, key, "nan"), Catch::Contains(key + " must be between"));
      } else if (property.value("type", "") == "boolean") {
        CHECK(reader_error(section, key, "true").empty());
        CHECK(reader_error(section, key, "false").empty());
        CHECK_THAT(reader_error(section, key, "\"yes\""),
                   Catch::Contains(key + " must be true or false"));
      } else if (property.value("type", "") != "array") {
        CHECK_THAT(reader_error(section, key, "\"/x\""), !Catch::Contains("unknown key"));
      }
    }
  }
}

TEST_CASE("every key the example config uses is in the schema", "[config][schema]") {
  const auto sections = schema_sections();
  const auto example = toml::parse_file(GARM_EDGE_SOURCE_DIR "/docs/agent.toml.example");
  std::size_t keys = 0;
  const auto check_table = [&](const std::string& section, const toml::table& table) {
    for (const auto& [key, value] : table) {
      INFO(section << "." << key.str());
      CHECK(sections.at(section).contains(std::string(key.str())));
      ++keys;
    }
  };
  for (const auto& [name, node] : example) {
    REQUIRE(sections.count(std::string(name.str())) == 1);
    if (const auto* table = node.as_table()) {
      check_table(std::string(name.str()), *table);
    } else if (const auto* array = node.as_array()) {
      for (const auto& item : *array) {
        check_table(std::string(name.str()), *item.as_table());
      }
    }
  }
  CHECK(keys >= 30);  // the example is the operator's reference: it shows nearly every key
}
