#pragma once

#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "wire/enums.hpp"

namespace garm_edge::agent {

/// A garm controller's ID: a UUID, checked once where it enters the agent. Every instance
/// belongs to one; no command reaches another controller's instances.
class ControllerId {
 public:
  /// Throws wire::WireError naming `field` when `text` is not a UUID.
  static ControllerId parse(std::string_view text, const std::string& field = "controller_id");

  const std::string& str() const { return value_; }
  operator std::string_view() const { return value_; }  // NOLINT: reads as the text it is
  friend bool operator==(const ControllerId&, const ControllerId&) = default;

 private:
  explicit ControllerId(std::string value) : value_(std::move(value)) {}
  std::string value_;
};

/// How a command names an instance: its provider ID (the domain's UUID) or garm's instance
/// name. Either way the text is a valid instance name, so it can name a domain.
class InstanceRef {
 public:
  /// Throws wire::WireError when `text` is neither a UUID nor a valid instance name.
  static InstanceRef parse(std::string_view text, const std::string& field = "instance");

  const std::string& str() const { return value_; }
  /// A UUID may be a provider ID; if no instance has it, it is taken as a name.
  bool may_be_provider_id() const { return uuid_; }

 private:
  InstanceRef(std::string value, bool uuid) : value_(std::move(value)), uuid_(uuid) {}
  std::string value_;
  bool uuid_;
};

/// A garm pool ID (a UUID) or scale set ID ("<name>-<uuid>").
class PoolId {
 public:
  /// Throws wire::WireError when `text` is neither.
  static PoolId parse(std::string_view text, const std::string& field = "pool_id");

  const std::string& str() const { return value_; }

 private:
  explicit PoolId(std::string value) : value_(std::move(value)) {}
  std::string value_;
};

/// What garm asks of a pool before it uses one here (ValidatePoolInfo), checked as text.
struct PoolSpec {
  std::string image;
  std::string flavor;
  std::optional<wire::OsType> os_type;
  std::optional<wire::OsArch> arch;
  std::optional<nlohmann::json> extra_specs;

  /// From garm's JSON; throws wire::WireError for a field that is missing, of the wrong type
  /// or invalid (names, extra spec keys and values).
  static PoolSpec parse(std::string_view json_text);
};

}  // namespace garm_edge::agent
