#include "wire/agent_capacity.hpp"

#include <algorithm>

#include "wire/json_fields.hpp"

namespace garm_edge::wire {
namespace {

using ordered_json = nlohmann::ordered_json;

ordered_json amount_json(const ResourceAmount& amount) {
  return {{"vcpus", amount.vcpus},
          {"memory_mib", amount.memory_mib},
          {"instances", amount.instances},
          {"disk_gib", amount.disk_gib}};
}

ordered_json shapes_json(const ShapeOffer& shapes) {
  ordered_json pools = ordered_json::array();
  for (const auto& pool : shapes.scratch_pools) {
    pools.push_back({{"name", pool.name}, {"max_disk_gib", pool.max_disk_gib}});
  }
  return {{"virt_types", shapes.virt_types},
          {"nested_virtualization", shapes.nested_virtualization},
          {"max_root_disk_gib", shapes.max_root_disk_gib},
          {"scratch_pools", pools},
          {"networks", shapes.networks}};
}

ShapeOffer shapes_from(const ObjectReader& in, std::string_view key);
ResourceAmount amount_from(const ObjectReader& in, std::string_view key);

ordered_json share_json(const ControllerShare& share) {
  ordered_json out = ordered_json::object();
  out["controller"] = share.controller;
  out["used"] = amount_json(share.used);
  out["quota"] = amount_json(share.quota);
  out["reserved"] = amount_json(share.reserved);
  out["max_priority"] = to_string(share.max_priority);
  auto& room = out["room"] = ordered_json::object();
  for (const auto& [priority, amount] : share.room) {
    room[std::string(to_string(priority))] = amount_json(amount);
  }
  out["instances_bounded"] = share.instances_bounded;
  out["disk_bounded"] = share.disk_bounded;
  return out;
}

ControllerShare share_from(const ObjectReader& in) {
  ControllerShare share{
      .controller = in.string_or_empty("controller"),
      .used = amount_from(in, "used"),
      .quota = amount_from(in, "quota"),
      .reserved = amount_from(in, "reserved"),
      .max_priority = in.enum_value<Priority>("max_priority").value_or(Priority::high),
      .room = {},
      .instances_bounded = in.boolean("instances_bounded"),
      .disk_bounded = in.boolean("disk_bounded")};
  if (const auto* room = in.find("room"); room != nullptr && !room->is_null()) {
    const ObjectReader by_priority(*room, in.path_of("room"));
    for (const auto priority : {Priority::low, Priority::normal, Priority::high}) {
      if (by_priority.find(to_string(priority)) != nullptr) {
        share.room[priority] = amount_from(by_priority, to_string(priority));
      }
    }
  }
  return share;
}

ResourceAmount amount_from(const ObjectReader& in, std::string_view key) {
  const auto* value = in.find(key);
  if (value == nullptr || value->is_null()) {
    return {};
  }
  const ObjectReader amount(*value, in.path_of(key));
  return {.vcpus = amount.unsigned_integer("vcpus"),
          .memory_mib = amount.unsigned_integer("memory_mib"),
          .instances = amount.unsigned_integer("instances"),
          .disk_gib = amount.unsigned_integer("disk_gib")};
}

ordered_json addresses_json(const std::optional<AddressAmount>& addresses) {
  if (!addresses) {
    return nullptr;
  }
  return {{"total", addresses->total},
          {"held", addresses->held},
          {"resting", addresses->resting},
          {"free", addresses->free}};
}

std::optional<AddressAmount> addresses_from(const ObjectReader& in, std::string_view key) {
  const auto* value = in.find(key);
  if (value == nullptr || value->is_null()) {
    return std::nullopt;
  }
  const ObjectReader addresses(*value, in.path_of(key));
  return AddressAmount{.total = addresses.unsigned_integer("total"),
                       .held = addresses.unsigned_integer("held"),
                       .resting = addresses.unsigned_integer("resting"),
                       .free = addresses.unsigned_integer("free")};
}

/// Each element of the array at `key` (absent or null: none), read by `read`.
template <class Item, class Read>
std::vector<Item> items_from(const ObjectReader& in, std::string_view key, Read read) {
  std::vector<Item> items;
  const auto* value = in.find(key);
  if (value == nullptr || value->is_null()) {
    return items;
  }
  if (!value->is_array()) {
    throw WireError(in.path_of(key), std::string("expected an array, got ") + value->type_name());
  }
  for (std::size_t i = 0; i < value->size(); ++i) {
    items.push_back(
        read(ObjectReader((*value)[i], in.path_of(key) + "[" + std::to_string(i) + "]")));
  }
  return items;
}

std::map<std::string, std::uint64_t> counts_from(const ObjectReader& in, std::string_view key) {
  std::map<std::string, std::uint64_t> counts;
  const auto* value = in.find(key);
  if (value == nullptr || value->is_null()) {
    return counts;
  }
  if (!value->is_object()) {
    throw WireError(in.path_of(key), std::string("expected an object, got ") + value->type_name());
  }
  const ObjectReader object(*value, in.path_of(key));
  for (const auto& item : value->items()) {
    counts[item.key()] = object.unsigned_integer(item.key());
  }
  return counts;
}

ShapeOffer shapes_from(const ObjectReader& in, std::string_view key) {
  const auto* value = in.find(key);
  if (value == nullptr || value->is_null()) {
    return {};
  }
  const ObjectReader shapes(*value, in.path_of(key));
  ShapeOffer offer;
  if (const auto* types = shapes.find("virt_types"); types != nullptr && types->is_object()) {
    const ObjectReader by_arch(*types, shapes.path_of("virt_types"));
    for (const auto& item : types->items()) {
      offer.virt_types[item.key()] = by_arch.string_or_empty(item.key());
    }
  }
  offer.nested_virtualization = shapes.boolean("nested_virtualization");
  offer.max_root_disk_gib = shapes.unsigned_integer("max_root_disk_gib");
  offer.scratch_pools =
      items_from<ScratchPoolOffer>(shapes, "scratch_pools", [](const ObjectReader& item) {
        return ScratchPoolOffer{.name = item.string_or_empty("name"),
                                .max_disk_gib = item.unsigned_integer("max_disk_gib")};
      });
  offer.networks = shapes.string_list("networks").value_or(std::vector<std::string>{});
  return offer;
}

template <class Offer>
const Offer* find_named(const std::vector<Offer>& offers, std::string_view name) {
  const auto it = std::find_if(offers.begin(), offers.end(),
                               [name](const Offer& offer) { return offer.name == name; });
  return it == offers.end() ? nullptr : &*it;
}

}  // namespace

const ImageOffer* AgentCapacity::find_image(std::string_view name) const {
  return find_named(images, name);
}

const FlavorOffer* AgentCapacity::find_flavor(std::string_view name) const {
  return find_named(flavors, name);
}

bool AgentCapacity::offers(std::string_view feature, bool baseline) const {
  if (features.empty()) {
    return baseline;
  }
  return std::find(features.begin(), features.end(), feature) != features.end();
}

const ResourceAmount& ControllerShare::room_at(Priority priority) const {
  static const ResourceAmount kNone{};
  const auto found = room.find(std::min(priority, max_priority));
  return found == room.end() ? kNone : found->second;
}

std::uint64_t AgentCapacity::warm_ready(std::string_view image, std::string_view flavor) const {
  std::uint64_t ready = 0;
  for (const auto& offer : warm) {
    if (offer.image == image && offer.flavor == flavor) {
      ready += offer.ready;
    }
  }
  return ready;
}

ordered_json to_json(const std::vector<ImageOffer>& images) {
  ordered_json out = ordered_json::array();
  for (const auto& image : images) {
    ordered_json item{{"name", image.name},
                      {"os_type", image.os_type ? to_string(*image.os_type) : ""},
                      {"os_name", image.os_name},
                      {"os_version", image.os_version},
                      {"arch", image.arch ? to_string(*image.arch) : ""},
                      {"state", image.state}};
    if (image.pulled_bytes > 0 || image.total_bytes > 0) {
      item["pulled_bytes"] = image.pulled_bytes;
      item["total_bytes"] = image.total_bytes;
    }
    if (!image.error.empty()) {
      item["error"] = image.error;
    }
    out.push_back(std::move(item));
  }
  return out;
}

ordered_json to_json(const std::vector<FlavorOffer>& flavors) {
  ordered_json out = ordered_json::array();
  for (const auto& flavor : flavors) {
    out.push_back({{"name", flavor.name},
                   {"vcpus", flavor.vcpus},
                   {"memory_mib", flavor.memory_mib},
                   {"disk_gib", flavor.disk_gib}});
  }
  return out;
}

ordered_json to_json(const AgentCapacity& capacity) {
  ordered_json by_state = ordered_json::object();
  for (const auto& [state, count] : capacity.instances_by_state) {
    by_state[state] = count;
  }
  ordered_json warm = ordered_json::array();
  for (const auto& offer : capacity.warm) {
    warm.push_back({{"controller", offer.controller},
                    {"image", offer.image},
                    {"flavor", offer.flavor},
                    {"ready", offer.ready},
                    {"warming", offer.warming}});
  }
  ordered_json shares = ordered_json::array();
  for (const auto& share : capacity.shares) {
    shares.push_back(share_json(share));
  }
  ordered_json caches = ordered_json::array();
  for (const auto& offer : capacity.caches) {
    caches.push_back({{"name", offer.name},
                      {"controller", offer.controller},
                      {"generation", offer.generation},
                      {"made_at", offer.made_at},
                      {"refreshing", offer.refreshing},
                      {"error", offer.error}});
  }
  // Member by member: an initializer list of 20 pairs costs the agent's binary kilobytes.
  ordered_json out = ordered_json::object();
  out["agent_id"] = capacity.agent_id;
  out["version"] = capacity.version;
  out["machine"] = capacity.machine;
  out["cpus"] = capacity.cpus;
  out["memory_mib"] = capacity.memory_mib;
  out["limit"] = amount_json(capacity.limit);
  out["used"] = amount_json(capacity.used);
  out["free"] = amount_json(capacity.free);
  out["addresses"] = addresses_json(capacity.addresses);
  out["draining"] = capacity.draining;
  out["instances_by_state"] = std::move(by_state);
  out["images"] = to_json(capacity.images);
  out["flavors"] = to_json(capacity.flavors);
  out["warm"] = std::move(warm);
  out["caches"] = std::move(caches);
  out["shapes"] = shapes_json(capacity.shapes);
  out["share"] = capacity.share ? share_json(*capacity.share) : ordered_json();
  out["shares"] = std::move(shares);
  out["features"] = capacity.features;
  return out;
}

ordered_json to_json(const PlacementAnswer& answer) {
  return {{"instance", answer.instance ? to_json(*answer.instance) : ordered_json()},
          {"create_under_way", answer.create_under_way},
          {"capacity", to_json(answer.capacity)}};
}

PlacementAnswer parse_placement_answer(std::string_view json_text) {
  const auto document = parse_json_text(json_text, "placement answer");
  const ObjectReader in(document, "");
  PlacementAnswer answer;
  if (const auto* instance = in.find("instance"); instance != nullptr && !instance->is_null()) {
    answer.instance = provider_instance_from_json(*instance, "instance");
  }
  answer.create_under_way = in.boolean("create_under_way");
  const auto* capacity = in.find("capacity");
  if (capacity == nullptr || !capacity->is_object()) {
    throw WireError("capacity", "expected an object");
  }
  answer.capacity = agent_capacity_from_json(*capacity, "capacity");
  return answer;
}

AgentCapacity parse_agent_capacity(std::string_view json_text) {
  return agent_capacity_from_json(parse_json_text(json_text, "agent capacity"), "");
}

AgentCapacity agent_capacity_from_json(const nlohmann::json& document, const std::string& path) {
  const ObjectReader in(document, path);
  AgentCapacity capacity;
  capacity.agent_id = in.string_or_empty("agent_id");
  capacity.version = in.string_or_empty("version");
  capacity.machine = in.string_or_empty("machine");
  capacity.cpus = in.unsigned_integer("cpus");
  capacity.memory_mib = in.unsigned_integer("memory_mib");
  capacity.limit = amount_from(in, "limit");
  capacity.used = amount_from(in, "used");
  capacity.free = amount_from(in, "free");
  capacity.addresses = addresses_from(in, "addresses");
  capacity.draining = in.boolean("draining");
  capacity.instances_by_state = counts_from(in, "instances_by_state");
  capacity.images = items_from<ImageOffer>(in, "images", [](const ObjectReader& item) {
    return ImageOffer{
        .name = item.string_or_empty("name"),
        .os_type = item.enum_value<OsType>("os_type"),
        .os_name = item.string_or_empty("os_name"),
        .os_version = item.string_or_empty("os_version"),
        .arch = item.enum_value<OsArch>("arch"),
        .state = item.string_or_empty("state").empty() ? "ready" : item.string_or_empty("state"),
        .pulled_bytes = item.unsigned_integer("pulled_bytes"),
        .total_bytes = item.unsigned_integer("total_bytes"),
        .error = item.string_or_empty("error")};
  });
  capacity.flavors = items_from<FlavorOffer>(in, "flavors", [](const ObjectReader& item) {
    return FlavorOffer{.name = item.string_or_empty("name"),
                       .vcpus = item.unsigned_integer("vcpus"),
                       .memory_mib = item.unsigned_integer("memory_mib"),
                       .disk_gib = item.unsigned_integer("disk_gib")};
  });
  capacity.warm = items_from<WarmOffer>(in, "warm", [](const ObjectReader& item) {
    return WarmOffer{.controller = item.string_or_empty("controller"),
                     .image = item.string_or_empty("image"),
                     .flavor = item.string_or_empty("flavor"),
                     .ready = item.unsigned_integer("ready"),
                     .warming = item.unsigned_integer("warming")};
  });
  capacity.caches = items_from<CacheOffer>(in, "caches", [](const ObjectReader& item) {
    return CacheOffer{.name = item.string_or_empty("name"),
                      .controller = item.string_or_empty("controller"),
                      .generation = item.unsigned_integer("generation"),
                      .made_at = item.string_or_empty("made_at"),
                      .refreshing = item.boolean("refreshing"),
                      .error = item.string_or_empty("error")};
  });
  capacity.shapes = shapes_from(in, "shapes");
  if (const auto* share = in.find("share"); share != nullptr && !share->is_null()) {
    capacity.share = share_from(ObjectReader(*share, in.path_of("share")));
  }
  capacity.shares = items_from<ControllerShare>(in, "shares", share_from);
  capacity.features = in.string_list("features").value_or(std::vector<std::string>{});
  return capacity;
}

}  // namespace garm_edge::wire
