#include <algorithm>
#include <array>

#include <nlohmann/json.hpp>

#include "agent/instances/instance_store.hpp"
#include "wire/error.hpp"
#include "wire/json_fields.hpp"
#include "wire/validate.hpp"

// An instance's record as the JSON file the store keeps: every field written in one order,
// read back strictly (a record that does not parse is unreadable, never half-read).
namespace garm_edge::agent {

std::string_view to_string(WarmState state) {
  switch (state) {
    case WarmState::ready:
      return "ready";
    case WarmState::saving:
      return "saving";
    case WarmState::saved:
      return "saved";
    case WarmState::bound:
      return "bound";
    default:
      return "warming";
  }
}

std::string_view to_string(Intent intent) {
  switch (intent) {
    case Intent::creating:
      return "creating";
    case Intent::created:
      return "created";
    case Intent::deleting:
      return "deleting";
  }
  return "creating";
}

namespace {

constexpr int kRecordVersion = 1;
constexpr std::array kWarmStates{WarmState::warming, WarmState::ready, WarmState::saving,
                                 WarmState::saved, WarmState::bound};

Intent parse_intent(std::string_view text) {
  for (auto intent : {Intent::creating, Intent::created, Intent::deleting}) {
    if (to_string(intent) == text) {
      return intent;
    }
  }
  throw StoreError("unknown intent \"" + std::string(text) + "\"");
}

nlohmann::ordered_json runner_archive_to_json(const RunnerArchiveRecord& a) {
  return {{"download_url", a.download_url},
          {"sha256", a.sha256},
          {"temp_download_token", a.temp_download_token},
          {"http_proxy", a.http_proxy},
          {"https_proxy", a.https_proxy},
          {"no_proxy", a.no_proxy}};
}

RunnerArchiveRecord runner_archive_from_json(const nlohmann::json& document) {
  const wire::ObjectReader in(document, "guest.runner_archive");
  return {.download_url = in.required_string("download_url"),
          .sha256 = in.required_string("sha256"),
          .temp_download_token = in.string_or_empty("temp_download_token"),
          .http_proxy = in.string_or_empty("http_proxy"),
          .https_proxy = in.string_or_empty("https_proxy"),
          .no_proxy = in.string_or_empty("no_proxy")};
}

nlohmann::ordered_json warm_to_json(const WarmRecord& w) {
  return {{"spec", w.spec},
          {"controller", w.controller},
          {"state", to_string(w.state)},
          {"token_hash", w.token_hash},
          {"ready_at", w.ready_at},
          {"bound_at", w.bound_at},
          {"assignment", w.assignment},
          {"delivered", w.delivered},
          {"unpacked_sha256", w.unpacked_sha256},
          {"saved_at", w.saved_at}};
}

WarmRecord warm_from_json(const nlohmann::json& document) {
  const wire::ObjectReader in(document, "warm");
  WarmRecord w;
  w.spec = in.required_string("spec");
  w.controller = in.string_or_empty("controller");
  const auto state = in.required_string("state");
  const auto known = std::find_if(kWarmStates.begin(), kWarmStates.end(),
                                  [&](WarmState s) { return to_string(s) == state; });
  if (known == kWarmStates.end()) {
    throw wire::WireError("warm.state", "must be warming, ready, saving, saved or bound");
  }
  w.state = *known;
  w.token_hash = in.string_or_empty("token_hash");
  w.ready_at = in.string_or_empty("ready_at");
  w.bound_at = in.string_or_empty("bound_at");
  w.assignment = in.string_or_empty("assignment");
  w.delivered = in.boolean("delivered");
  w.unpacked_sha256 = in.string_or_empty("unpacked_sha256");
  w.saved_at = in.string_or_empty("saved_at");
  return w;
}

nlohmann::ordered_json caches_to_json(const std::vector<CacheDiskRecord>& caches) {
  auto out = nlohmann::ordered_json::array();
  for (const auto& c : caches) {
    out.push_back({{"cache", c.cache},
                   {"generation", c.generation},
                   {"generation_path", c.generation_path},
                   {"volume_name", c.volume_name},
                   {"serial", c.serial},
                   {"mount", c.mount}});
  }
  return out;
}

std::vector<CacheDiskRecord> caches_from_json(const nlohmann::json& document) {
  std::vector<CacheDiskRecord> caches;
  for (const auto& item : document) {
    const wire::ObjectReader in(item, "caches[]");
    const auto* generation = in.find("generation");
    if (generation == nullptr || !generation->is_number_unsigned()) {
      throw wire::WireError("caches[].generation", "must be a number");
    }
    caches.push_back({.cache = in.required_string("cache"),
                      .generation = generation->get<std::uint64_t>(),
                      .generation_path = in.required_string("generation_path"),
                      .volume_name = in.required_string("volume_name"),
                      .serial = in.required_string("serial"),
                      .mount = in.required_string("mount")});
  }
  return caches;
}

nlohmann::ordered_json scratch_to_json(const std::vector<ScratchDiskRecord>& disks) {
  auto out = nlohmann::ordered_json::array();
  for (const auto& d : disks) {
    out.push_back({{"pool", d.pool},
                   {"storage_pool", d.storage_pool},
                   {"volume_name", d.volume_name},
                   {"size_gib", d.size_gib},
                   {"serial", d.serial},
                   {"mount", d.mount}});
  }
  return out;
}

std::vector<ScratchDiskRecord> scratch_from_json(const nlohmann::json& document) {
  std::vector<ScratchDiskRecord> disks;
  for (const auto& item : document) {
    const wire::ObjectReader in(item, "scratch_disks[]");
    disks.push_back({.pool = in.required_string("pool"),
                     .storage_pool = in.required_string("storage_pool"),
                     .volume_name = in.required_string("volume_name"),
                     .size_gib = in.unsigned_integer("size_gib"),
                     .serial = in.required_string("serial"),
                     .mount = in.required_string("mount")});
  }
  return disks;
}

nlohmann::ordered_json nics_to_json(const std::vector<ExtraNicRecord>& nics) {
  auto out = nlohmann::ordered_json::array();
  for (const auto& nic : nics) {
    out.push_back({{"network", nic.network}, {"mac", nic.mac}});
  }
  return out;
}

std::vector<ExtraNicRecord> nics_from_json(const nlohmann::json& document) {
  std::vector<ExtraNicRecord> nics;
  for (const auto& item : document) {
    const wire::ObjectReader in(item, "extra_nics[]");
    nics.push_back({.network = in.required_string("network"), .mac = in.required_string("mac")});
  }
  return nics;
}

nlohmann::ordered_json guest_to_json(const GuestRecord& g) {
  auto messages = nlohmann::ordered_json::array();
  for (const auto& m : g.messages) {
    messages.push_back({{"time", m.time}, {"status", m.status}, {"message", m.message}});
  }
  return {
      {"network", g.network},
      {"mac", g.mac},
      {"ip", g.ip},
      {"seed_token_hash", g.seed_token_hash},
      {"bearer_token_hash", g.bearer_token_hash},
      {"callback_url", g.callback_url},
      {"metadata_url", g.metadata_url},
      {"ca_cert_bundle", g.ca_cert_bundle},
      {"meta_data", g.meta_data},
      {"user_data", g.user_data},
      {"vendor_data", g.vendor_data},
      {"closed", g.closed},
      {"seed_served_at", g.seed_served_at},
      {"runner_status", g.runner_status},
      {"agent_id", g.agent_id ? nlohmann::ordered_json(*g.agent_id) : nlohmann::ordered_json()},
      {"os_name", g.os_name},
      {"os_version", g.os_version},
      {"messages", messages},
      {"runner_archive",
       g.runner_archive ? runner_archive_to_json(*g.runner_archive) : nlohmann::ordered_json()},
      {"garm_agent_url", g.garm_agent_url},
  };
}

GuestRecord guest_from_json(const nlohmann::json& document) {
  const wire::ObjectReader in(document, "guest");
  GuestRecord g;
  g.network = in.string_or_empty("network");
  g.mac = in.string_or_empty("mac");
  g.ip = in.string_or_empty("ip");
  g.seed_token_hash = in.required_string("seed_token_hash");
  g.bearer_token_hash = in.string_or_empty("bearer_token_hash");
  g.callback_url = in.string_or_empty("callback_url");
  g.metadata_url = in.string_or_empty("metadata_url");
  g.ca_cert_bundle = in.string_or_empty("ca_cert_bundle");
  g.garm_agent_url = in.string_or_empty("garm_agent_url");
  g.meta_data = in.string_or_empty("meta_data");
  g.user_data = in.string_or_empty("user_data");
  g.vendor_data = in.string_or_empty("vendor_data");
  g.closed = in.boolean("closed");
  g.seed_served_at = in.string_or_empty("seed_served_at");
  g.runner_status = in.string_or_empty("runner_status");
  if (const auto* agent_id = in.find("agent_id"); agent_id && agent_id->is_number_integer()) {
    g.agent_id = agent_id->get<std::int64_t>();
  }
  g.os_name = in.string_or_empty("os_name");
  g.os_version = in.string_or_empty("os_version");
  if (const auto* messages = in.find("messages"); messages && messages->is_array()) {
    for (const auto& item : *messages) {
      if (!item.is_object()) {
        throw wire::WireError("guest.messages", "must hold objects");
      }
      const wire::ObjectReader message(item, "guest.messages[]");
      g.messages.push_back({.time = message.string_or_empty("time"),
                            .status = message.string_or_empty("status"),
                            .message = message.string_or_empty("message")});
    }
  }
  if (const auto* archive = in.find("runner_archive"); archive && archive->is_object()) {
    g.runner_archive = runner_archive_from_json(*archive);
  }
  return g;
}

}  // namespace

std::string serialize_record(const InstanceRecord& r) {
  nlohmann::ordered_json out = {
      {"version", kRecordVersion},
      {"intent", to_string(r.intent)},
      {"domain_name", r.domain_name},
      {"domain_uuid", r.domain_uuid},
      {"controller_id", r.controller_id},
      {"pool_id", r.pool_id},
      {"name", r.name},
      {"image", r.image},
      {"flavor", r.flavor},
      {"os_type", wire::to_string(r.os_type)},
      {"os_name", r.os_name},
      {"os_version", r.os_version},
      {"os_arch", wire::to_string(r.os_arch)},
      {"volume_pool", r.volume_pool},
      {"volume_name", r.volume_name},
      {"created_at", r.created_at},
  };
  if (!r.base_path.empty()) {
    out["base_path"] = r.base_path;
  }
  if (r.guest) {
    out["guest"] = guest_to_json(*r.guest);
  }
  if (r.warm) {
    out["warm"] = warm_to_json(*r.warm);
  }
  if (!r.caches.empty()) {
    out["caches"] = caches_to_json(r.caches);
  }
  if (r.root_disk_gib != 0) {
    out["root_disk_gib"] = r.root_disk_gib;
  }
  if (!r.scratch_disks.empty()) {
    out["scratch_disks"] = scratch_to_json(r.scratch_disks);
  }
  if (!r.extra_nics.empty()) {
    out["extra_nics"] = nics_to_json(r.extra_nics);
  }
  return out.dump(2) + "\n";
}

InstanceRecord parse_record(std::string_view text) {
  try {
    const auto document = wire::parse_json_text(text, "instance record");
    const wire::ObjectReader in(document, "");
    const auto* version = in.find("version");
    if (version == nullptr || !version->is_number_integer() ||
        version->get<int>() != kRecordVersion) {
      throw StoreError("unsupported instance record version");
    }
    InstanceRecord r;
    r.intent = parse_intent(in.required_string("intent"));
    r.domain_name = in.required_string("domain_name");
    r.domain_uuid = in.required_string("domain_uuid");
    r.controller_id = in.required_string("controller_id");
    r.pool_id = in.required_string("pool_id");
    r.name = in.required_string("name");
    r.image = in.string_or_empty("image");
    r.flavor = in.string_or_empty("flavor");
    r.os_type = in.enum_value<wire::OsType>("os_type").value_or(wire::OsType::unknown);
    r.os_name = in.string_or_empty("os_name");
    r.os_version = in.string_or_empty("os_version");
    r.os_arch = in.enum_value<wire::OsArch>("os_arch").value_or(wire::OsArch::amd64);
    r.volume_pool = in.required_string("volume_pool");
    r.volume_name = in.required_string("volume_name");
    r.created_at = in.string_or_empty("created_at");
    r.base_path = in.string_or_empty("base_path");
    if (const auto* guest = in.find("guest"); guest && guest->is_object()) {
      r.guest = guest_from_json(*guest);
    }
    if (const auto* warm = in.find("warm"); warm && warm->is_object()) {
      r.warm = warm_from_json(*warm);
    }
    if (const auto* caches = in.find("caches"); caches && caches->is_array()) {
      r.caches = caches_from_json(*caches);
    }
    r.root_disk_gib = in.unsigned_integer("root_disk_gib");
    if (const auto* disks = in.find("scratch_disks"); disks && disks->is_array()) {
      r.scratch_disks = scratch_from_json(*disks);
    }
    if (const auto* nics = in.find("extra_nics"); nics && nics->is_array()) {
      r.extra_nics = nics_from_json(*nics);
    }
    return r;
  } catch (const wire::WireError& e) {
    throw StoreError(std::string("invalid instance record: ") + e.what());
  }
}

}  // namespace garm_edge::agent
