#include "wire/enums.hpp"

#include <array>
#include <utility>

namespace garm_edge::wire {
namespace {

template <class Enum, std::size_t N>
using NameTable = std::array<std::pair<Enum, std::string_view>, N>;

constexpr NameTable<InstanceStatus, 10> kInstanceStatusNames{{
    {InstanceStatus::running, "running"},
    {InstanceStatus::stopped, "stopped"},
    {InstanceStatus::error, "error"},
    {InstanceStatus::pending_delete, "pending_delete"},
    {InstanceStatus::pending_force_delete, "pending_force_delete"},
    {InstanceStatus::deleting, "deleting"},
    {InstanceStatus::deleted, "deleted"},
    {InstanceStatus::pending_create, "pending_create"},
    {InstanceStatus::creating, "creating"},
    {InstanceStatus::unknown, "unknown"},
}};

constexpr NameTable<RunnerStatus, 9> kRunnerStatusNames{{
    {RunnerStatus::idle, "idle"},
    {RunnerStatus::pending, "pending"},
    {RunnerStatus::terminated, "terminated"},
    {RunnerStatus::installing, "installing"},
    {RunnerStatus::failed, "failed"},
    {RunnerStatus::active, "active"},
    {RunnerStatus::offline, "offline"},
    {RunnerStatus::online, "online"},
    {RunnerStatus::unknown, "unknown"},
}};

constexpr NameTable<OsType, 3> kOsTypeNames{{
    {OsType::linux, "linux"},
    {OsType::windows, "windows"},
    {OsType::unknown, "unknown"},
}};

constexpr NameTable<OsArch, 4> kOsArchNames{{
    {OsArch::amd64, "amd64"},
    {OsArch::i386, "i386"},
    {OsArch::arm64, "arm64"},
    {OsArch::arm, "arm"},
}};

constexpr NameTable<AddressType, 2> kAddressTypeNames{{
    {AddressType::public_address, "public"},
    {AddressType::private_address, "private"},
}};

constexpr NameTable<Priority, 3> kPriorityNames{{
    {Priority::low, "low"},
    {Priority::normal, "normal"},
    {Priority::high, "high"},
}};

template <class Enum, std::size_t N>
std::string_view name_of(const NameTable<Enum, N>& table, Enum value) {
  for (const auto& [candidate, name] : table) {
    if (candidate == value) {
      return name;
    }
  }
  return "unknown";
}

template <class Enum, std::size_t N>
std::optional<Enum> value_of(const NameTable<Enum, N>& table, std::string_view text) {
  for (const auto& [candidate, name] : table) {
    if (name == text) {
      return candidate;
    }
  }
  return std::nullopt;
}

}  // namespace

std::string_view to_string(InstanceStatus value) {
  return name_of(kInstanceStatusNames, value);
}
std::string_view to_string(RunnerStatus value) {
  return name_of(kRunnerStatusNames, value);
}
std::string_view to_string(OsType value) {
  return name_of(kOsTypeNames, value);
}
std::string_view to_string(OsArch value) {
  return name_of(kOsArchNames, value);
}
std::string_view to_string(AddressType value) {
  return name_of(kAddressTypeNames, value);
}
std::string_view to_string(Priority value) {
  return name_of(kPriorityNames, value);
}

template <>
std::optional<InstanceStatus> parse_enum<InstanceStatus>(std::string_view text) {
  return value_of(kInstanceStatusNames, text);
}
template <>
std::optional<RunnerStatus> parse_enum<RunnerStatus>(std::string_view text) {
  return value_of(kRunnerStatusNames, text);
}
template <>
std::optional<OsType> parse_enum<OsType>(std::string_view text) {
  return value_of(kOsTypeNames, text);
}
template <>
std::optional<OsArch> parse_enum<OsArch>(std::string_view text) {
  return value_of(kOsArchNames, text);
}
template <>
std::optional<AddressType> parse_enum<AddressType>(std::string_view text) {
  return value_of(kAddressTypeNames, text);
}
template <>
std::optional<Priority> parse_enum<Priority>(std::string_view text) {
  return value_of(kPriorityNames, text);
}

bool is_reportable_by_provider(InstanceStatus status) {
  return status == InstanceStatus::running || status == InstanceStatus::stopped ||
         status == InstanceStatus::error || status == InstanceStatus::unknown;
}

}  // namespace garm_edge::wire
