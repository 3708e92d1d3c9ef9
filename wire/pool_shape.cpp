// The pool-shape keys of extra specs (docs/extra-specs.md): typed here, once, for the agent
// (which checks them against its limits) and the provider (which places by them).
#include "wire/pool_shape.hpp"

#include <algorithm>
#include <set>

#include "common/text.hpp"
#include "wire/error.hpp"

namespace garm_edge::wire {
namespace {

using nlohmann::json;

constexpr std::size_t kMaxShapeNameLength = 24;
constexpr std::size_t kMaxGuestPathLength = 200;

std::uint64_t disk_gib(const json& value, const std::string& field) {
  if (!value.is_number_integer() || value.get<std::int64_t>() < 1 ||
      value.get<std::int64_t>() > static_cast<std::int64_t>(kMaxDiskGib)) {
    throw WireError(field,
                    "must be a whole number of GiB from 1 to " + std::to_string(kMaxDiskGib));
  }
  return value.get<std::uint64_t>();
}

std::string shape_name(const json& value, const std::string& field) {
  if (!value.is_string() || !is_shape_name(value.get_ref<const std::string&>())) {
    throw WireError(field, "must be a name of 1 to 24 of a-z, 0-9 and '-' (not starting with '-')");
  }
  return value.get<std::string>();
}

const json& array_of_at_most(const json& value, std::size_t most, const std::string& field) {
  if (!value.is_array() || value.size() > most) {
    throw WireError(field, "must be a list of at most " + std::to_string(most) + " entries");
  }
  return value;
}

ScratchDiskRequest scratch_disk(const json& item, std::size_t index) {
  const auto field = "extra_specs.scratch_disks[" + std::to_string(index) + "]";
  if (!item.is_object()) {
    throw WireError(field, "must be an object with pool, size_gib and, optionally, mount");
  }
  ScratchDiskRequest disk;
  for (const auto& [key, value] : item.items()) {
    if (key == "pool") {
      disk.pool = shape_name(value, field + ".pool");
    } else if (key == "size_gib") {
      disk.size_gib = disk_gib(value, field + ".size_gib");
    } else if (key == "mount") {
      if (!value.is_string() || !is_plain_guest_path(value.get_ref<const std::string&>())) {
        throw WireError(field + ".mount",
                        "must be an absolute guest path of A-Z, a-z, 0-9, '.', '_', '-' and '/' "
                        "without \"..\"");
      }
      disk.mount = value.get<std::string>();
    } else {
      throw WireError(field + "." + printable_excerpt(key, 40),
                      "unknown key (pool, size_gib, mount)");
    }
  }
  if (disk.pool.empty() || disk.size_gib == 0) {
    throw WireError(field, "needs pool and size_gib");
  }
  if (disk.mount.empty()) {
    disk.mount = index == 0 ? "/mnt/scratch" : "/mnt/scratch-" + std::to_string(index);
  }
  return disk;
}

std::vector<ScratchDiskRequest> scratch_disks(const json& value) {
  std::vector<ScratchDiskRequest> disks;
  std::set<std::string> mounts;
  for (const auto& item : array_of_at_most(value, kMaxScratchDisks, "extra_specs.scratch_disks")) {
    disks.push_back(scratch_disk(item, disks.size()));
    if (!mounts.insert(disks.back().mount).second) {
      throw WireError("extra_specs.scratch_disks",
                      "two disks are mounted at " + disks.back().mount);
    }
  }
  return disks;
}

std::vector<std::string> networks(const json& value) {
  std::vector<std::string> names;
  for (const auto& item : array_of_at_most(value, kMaxExtraNetworks, "extra_specs.networks")) {
    names.push_back(shape_name(item, "extra_specs.networks[" + std::to_string(names.size()) + "]"));
    if (std::count(names.begin(), names.end(), names.back()) > 1) {
      throw WireError("extra_specs.networks", "names " + names.back() + " twice");
    }
  }
  return names;
}

VirtTypeRequest virt_type(const json& value) {
  for (auto request : {VirtTypeRequest::any, VirtTypeRequest::kvm, VirtTypeRequest::qemu}) {
    if (value.is_string() && value.get_ref<const std::string&>() == to_string(request)) {
      return request;
    }
  }
  throw WireError("extra_specs.virt_type", "must be \"kvm\", \"qemu\" or \"any\"");
}

void read_shape_key(PoolShape& shape, const std::string& key, const json& value) {
  if (key == "root_disk_gib") {
    shape.root_disk_gib = disk_gib(value, "extra_specs.root_disk_gib");
  } else if (key == "scratch_disks") {
    shape.scratch_disks = scratch_disks(value);
  } else if (key == "networks") {
    shape.networks = networks(value);
  } else if (key == "nested_virtualization") {
    if (!value.is_boolean()) {
      throw WireError("extra_specs.nested_virtualization", "must be true or false");
    }
    shape.nested_virtualization = value.get<bool>();
  } else if (key == "virt_type") {
    shape.virt_type = virt_type(value);
  }
}

}  // namespace

std::string_view to_string(VirtTypeRequest request) {
  switch (request) {
    case VirtTypeRequest::kvm:
      return "kvm";
    case VirtTypeRequest::qemu:
      return "qemu";
    default:
      return "any";
  }
}

std::vector<std::string> parse_cache_names(const std::optional<nlohmann::json>& extra_specs) {
  std::vector<std::string> names;
  if (!extra_specs || !extra_specs->is_object()) {
    return names;
  }
  const auto found = extra_specs->find("caches");
  if (found == extra_specs->end() || found->is_null()) {
    return names;
  }
  for (const auto& item : array_of_at_most(*found, kMaxCachesPerPool, "extra_specs.caches")) {
    names.push_back(shape_name(item, "extra_specs.caches[" + std::to_string(names.size()) + "]"));
    if (std::count(names.begin(), names.end(), names.back()) > 1) {
      throw WireError("extra_specs.caches", "names " + names.back() + " twice");
    }
  }
  return names;
}

std::optional<Priority> parse_priority(const std::optional<nlohmann::json>& extra_specs) {
  if (!extra_specs || !extra_specs->is_object()) {
    return std::nullopt;
  }
  const auto found = extra_specs->find("priority");
  if (found == extra_specs->end() || found->is_null()) {
    return std::nullopt;
  }
  const auto priority = found->is_string()
                            ? parse_enum<Priority>(found->get_ref<const std::string&>())
                            : std::nullopt;
  if (!priority) {
    throw WireError("extra_specs.priority", "expected \"low\", \"normal\" or \"high\"");
  }
  return priority;
}

bool PoolShape::is_default() const {
  return *this == PoolShape{};
}

bool is_shape_name(std::string_view name) {
  return !name.empty() && name.size() <= kMaxShapeNameLength && name.front() != '-' &&
         std::all_of(name.begin(), name.end(), [](char c) {
           return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-';
         });
}

bool is_plain_guest_path(std::string_view path) {
  return path.size() > 1 && path.size() <= kMaxGuestPathLength && path.front() == '/' &&
         path.find("..") == std::string_view::npos && path.find("//") == std::string_view::npos &&
         path.find_first_not_of(
             "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._/-") ==
             std::string_view::npos;
}

PoolShape parse_pool_shape(const std::optional<nlohmann::json>& extra_specs) {
  PoolShape shape;
  if (!extra_specs || !extra_specs->is_object()) {
    return shape;
  }
  for (const auto& [key, value] : extra_specs->items()) {
    if (!value.is_null()) {  // Go's json leaves a field at its zero value for null
      read_shape_key(shape, key, value);
    }
  }
  return shape;
}

}  // namespace garm_edge::wire
