#pragma once

#include <optional>
#include <string_view>

namespace garm_edge::wire {

/// garm's params.InstanceStatus. Providers may only report running, stopped, error and unknown.
enum class InstanceStatus {
  running,
  stopped,
  error,
  pending_delete,
  pending_force_delete,
  deleting,
  deleted,
  pending_create,
  creating,
  unknown,
};

/// garm's params.RunnerStatus, reported by a guest through the callback endpoint.
enum class RunnerStatus {
  idle,
  pending,
  terminated,
  installing,
  failed,
  active,
  offline,
  online,
  unknown
};

enum class OsType { linux, windows, unknown };
enum class OsArch { amd64, i386, arm64, arm };
enum class AddressType { public_address, private_address };
/// A pool's priority on a shared fleet (extra spec `priority`, docs/shares.md): low-priority
/// creates leave the room the operator keeps for higher ones.
enum class Priority { low, normal, high };

std::string_view to_string(InstanceStatus value);
std::string_view to_string(RunnerStatus value);
std::string_view to_string(OsType value);
std::string_view to_string(OsArch value);
std::string_view to_string(AddressType value);
std::string_view to_string(Priority value);

template <class Enum>
std::optional<Enum> parse_enum(std::string_view text);

template <>
std::optional<InstanceStatus> parse_enum<InstanceStatus>(std::string_view text);
template <>
std::optional<RunnerStatus> parse_enum<RunnerStatus>(std::string_view text);
template <>
std::optional<OsType> parse_enum<OsType>(std::string_view text);
template <>
std::optional<OsArch> parse_enum<OsArch>(std::string_view text);
template <>
std::optional<AddressType> parse_enum<AddressType>(std::string_view text);
template <>
std::optional<Priority> parse_enum<Priority>(std::string_view text);

/// The statuses garm accepts from a provider (garm: runner/providers/util).
bool is_reportable_by_provider(InstanceStatus status);

}  // namespace garm_edge::wire
