#include "agent/instances/instance_store.hpp"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "agent/instances/identifiers.hpp"
#include "common/durable_file.hpp"
#include "common/unique_fd.hpp"
#include "wire/error.hpp"
#include "wire/json_fields.hpp"
#include "wire/validate.hpp"

namespace garm_edge::agent {
namespace {

namespace fs = std::filesystem;

constexpr int kRecordVersion = 1;

[[noreturn]] void fail_errno(const std::string& what) {
  throw StoreError(what + ": " + std::strerror(errno));
}

/// The store's own error for what the durable-file helpers throw: callers map StoreError to
/// an answer that says the state directory is at fault.
template <class Work>
decltype(auto) on_disk(Work&& work) {
  try {
    return work();
  } catch (const DurableFileError& e) {
    throw StoreError(e.what());
  }
}

void make_state_directory(const fs::path& path) {
  on_disk([&] { make_private_directory(path); });
}

void write_record_file(const fs::path& target, std::string_view contents) {
  on_disk([&] { write_atomically(target, contents); });
}

std::optional<std::string> read_record_file(const fs::path& path) {
  return on_disk([&] { return read_file(path); });
}

/// Holds an exclusive flock on `<state_dir>/lock` for as long as the descriptor is open.
UniqueFd lock_state_directory(const fs::path& state_dir) {
  make_state_directory(state_dir);
  const auto path = state_dir / "lock";
  UniqueFd fd(::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600));
  if (fd.get() < 0) {
    fail_errno("cannot open " + path.string());
  }
  if (::flock(fd.get(), LOCK_EX | LOCK_NB) != 0) {
    const int error = errno;
    if (error == EWOULDBLOCK) {
      throw StoreError("state directory " + state_dir.string() +
                       " is in use by another garm-edge-agent process");
    }
    errno = error;
    fail_errno("cannot lock " + path.string());
  }
  return fd;
}

std::string load_or_create_state_id(const fs::path& state_dir) {
  const auto path = state_dir / "state-id";
  if (auto text = read_record_file(path)) {
    while (!text->empty() && (text->back() == '\n' || text->back() == ' ')) {
      text->pop_back();
    }
    if (!wire::is_uuid(*text)) {
      throw StoreError(path.string() + " does not hold a UUID; refusing to guess");
    }
    return *text;
  }
  const auto id = random_uuid();
  write_record_file(path, id + "\n");
  return id;
}

bool is_safe_file_stem(std::string_view name) {
  if (name.empty() || name.size() > 200 || name.front() == '.' ||
      name.find("..") != std::string_view::npos) {
    return false;
  }
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '-' || c == '_' || c == '.';
    if (!ok) {
      return false;
    }
  }
  return true;
}

Intent parse_intent(std::string_view text) {
  for (auto intent : {Intent::creating, Intent::created, Intent::deleting}) {
    if (to_string(intent) == text) {
      return intent;
    }
  }
  throw StoreError("unknown intent \"" + std::string(text) + "\"");
}

}  // namespace

std::string_view to_string(WarmState state) {
  switch (state) {
    case WarmState::ready:
      return "ready";
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
          {"unpacked_sha256", w.unpacked_sha256}};
}

WarmRecord warm_from_json(const nlohmann::json& document) {
  const wire::ObjectReader in(document, "warm");
  WarmRecord w;
  w.spec = in.required_string("spec");
  w.controller = in.string_or_empty("controller");
  const auto state = in.required_string("state");
  if (state == "ready") {
    w.state = WarmState::ready;
  } else if (state == "bound") {
    w.state = WarmState::bound;
  } else if (state != "warming") {
    throw wire::WireError("warm.state", "must be warming, ready or bound");
  }
  w.token_hash = in.string_or_empty("token_hash");
  w.ready_at = in.string_or_empty("ready_at");
  w.bound_at = in.string_or_empty("bound_at");
  w.assignment = in.string_or_empty("assignment");
  w.delivered = in.boolean("delivered");
  w.unpacked_sha256 = in.string_or_empty("unpacked_sha256");
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

FileInstanceStore::FileInstanceStore(const fs::path& state_dir)
    : lock_(lock_state_directory(state_dir)), directory_(state_dir / "instances") {
  make_state_directory(directory_);
  remove_stale_temp_files(directory_);
  state_id_ = load_or_create_state_id(state_dir);
}

FileInstanceStore::~FileInstanceStore() = default;

fs::path FileInstanceStore::path_for(std::string_view domain_name) const {
  if (!is_safe_file_stem(domain_name)) {
    throw StoreError("refusing unsafe record name \"" + std::string(domain_name.substr(0, 64)) +
                     "\"");
  }
  return directory_ / (std::string(domain_name) + ".json");
}

void FileInstanceStore::put(const InstanceRecord& record) {
  write_record_file(path_for(record.domain_name), serialize_record(record));
}

std::optional<InstanceRecord> FileInstanceStore::get(std::string_view domain_name) {
  const auto path = path_for(domain_name);
  auto text = read_record_file(path);
  if (!text) {
    return std::nullopt;
  }
  try {
    return parse_record(*text);
  } catch (const StoreError& e) {
    throw StoreError("instance record " + path.string() + " is unreadable (" + e.what() +
                     "); its instance is left as it is until the file is repaired or removed");
  }
}

bool FileInstanceStore::contains(std::string_view domain_name) {
  const auto path = path_for(domain_name);
  struct stat status {};
  if (::stat(path.c_str(), &status) == 0) {
    return true;
  }
  if (errno != ENOENT) {  // unknown is not absent
    fail_errno("cannot look for " + path.string());
  }
  return false;
}

void FileInstanceStore::remove(std::string_view domain_name) {
  const auto path = path_for(domain_name);
  if (::unlink(path.c_str()) != 0) {
    if (errno == ENOENT) {
      return;
    }
    fail_errno("cannot remove " + path.string());
  }
  on_disk([&] { fsync_directory(directory_); });
}

std::vector<InstanceRecord> FileInstanceStore::list() {
  std::vector<InstanceRecord> records;
  std::vector<std::string> skipped;
  scan(records, skipped);
  return records;
}

std::vector<std::string> FileInstanceStore::unreadable() {
  std::vector<InstanceRecord> records;
  std::vector<std::string> skipped;
  scan(records, skipped);
  return skipped;
}

void FileInstanceStore::scan(std::vector<InstanceRecord>& records,
                             std::vector<std::string>& unreadable) {
  std::error_code error;
  for (const auto& entry : fs::directory_iterator(directory_, error)) {
    const auto& path = entry.path();
    if (path.extension() != ".json" || path.filename().string().front() == '.') {
      continue;
    }
    const auto text = read_record_file(path);
    if (!text) {
      continue;  // removed since the directory was read
    }
    try {
      records.push_back(parse_record(*text));
    } catch (const StoreError&) {
      // left in place: get() keeps refusing it, so nothing acts on that instance
      unreadable.push_back(path.stem().string());
    }
  }
  if (error) {
    throw StoreError("cannot list " + directory_.string() + ": " + error.message());
  }
}

}  // namespace garm_edge::agent
