#include "provider/deferred_deletes.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <thread>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "common/durable_file.hpp"
#include "common/hex.hpp"
#include "wire/validate.hpp"

namespace garm_edge::provider {
namespace {

namespace fs = std::filesystem;

std::string file_name_for(const std::string& ref) {
  return to_hex(std::span(reinterpret_cast<const unsigned char*>(ref.data()), ref.size())) +
         ".json";
}

/// The controller and agent directory names come from a validated UUID and a validated agent
/// name; anything else found there is not ours.
bool is_safe_segment(const std::string& segment) {
  return !segment.empty() && segment.size() <= 64 && segment.front() != '.' &&
         segment.find_first_not_of(
             "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") ==
             std::string::npos;
}

std::string serialize(const DeferredDelete& entry) {
  const auto seconds =
      std::chrono::duration_cast<std::chrono::seconds>(entry.recorded_at.time_since_epoch())
          .count();
  return nlohmann::json{{"controller", entry.controller},
                        {"agent", entry.agent},
                        {"ref", entry.ref},
                        {"url", entry.url},
                        {"recorded_at", seconds},
                        {"reason", entry.reason}}
             .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) +
         "\n";
}

std::optional<DeferredDelete> parse(const std::string& text) {
  try {
    const auto json = nlohmann::json::parse(text);
    DeferredDelete entry{.controller = json.at("controller").get<std::string>(),
                         .agent = json.at("agent").get<std::string>(),
                         .ref = json.at("ref").get<std::string>(),
                         .url = json.value("url", std::string()),
                         .recorded_at = std::chrono::system_clock::time_point(
                             std::chrono::seconds(json.at("recorded_at").get<std::int64_t>())),
                         .reason = json.value("reason", std::string())};
    return entry;
  } catch (const nlohmann::json::exception&) {
    return std::nullopt;
  }
}

/// The entries in one agent's directory, oldest first; files that are not entries are skipped.
std::vector<DeferredDelete> read_directory(const fs::path& directory, std::size_t limit) {
  std::vector<DeferredDelete> entries;
  std::error_code error;
  for (const auto& file : fs::directory_iterator(directory, error)) {
    const auto name = file.path().filename().string();
    if (name.front() == '.' || file.path().extension() != ".json") {
      continue;
    }
    try {
      if (const auto text = read_file(file.path())) {
        if (auto entry = parse(*text); entry && file_name_for(entry->ref) == name) {
          entries.push_back(std::move(*entry));
        }
      }
    } catch (const DurableFileError&) {
      // unreadable: left for the operator; `status` counts only what it can read
    }
  }
  std::sort(entries.begin(), entries.end(),
            [](const auto& a, const auto& b) { return a.recorded_at < b.recorded_at; });
  if (entries.size() > limit) {
    entries.resize(limit);
  }
  return entries;
}

std::size_t count_entries(const fs::path& directory) {
  std::error_code error;
  std::size_t count = 0;
  for (const auto& file : fs::directory_iterator(directory, error)) {
    count += file.path().extension() == ".json" ? 1U : 0U;
  }
  return count;
}

}  // namespace

DeferredDeletes::DeferredDeletes(const fs::path& session_dir)
    : root_(session_dir / "deferred-deletes") {}

fs::path DeferredDeletes::agent_directory(const std::string& controller,
                                          const std::string& agent) const {
  if (!wire::is_uuid(controller) || !is_safe_segment(agent)) {
    throw DurableFileError("refusing to keep a deferred delete for controller \"" +
                           controller.substr(0, 64) + "\", agent \"" + agent.substr(0, 64) + "\"");
  }
  return root_ / controller / agent;
}

void DeferredDeletes::record(const DeferredDelete& entry) {
  if (entry.ref.empty() || entry.ref.size() > kMaxRefLength) {
    throw DurableFileError("an instance reference of " + std::to_string(entry.ref.size()) +
                           " bytes cannot be kept as a deferred delete");
  }
  const auto directory = agent_directory(entry.controller, entry.agent);
  make_private_directory(root_.parent_path());
  make_private_directory(root_);
  make_private_directory(directory.parent_path());
  make_private_directory(directory);
  const auto target = directory / file_name_for(entry.ref);
  std::error_code error;
  // An entry already kept keeps its first date: status shows how long it has waited.
  if (fs::exists(target, error)) {
    return;
  }
  remove_stale_temp_files(directory);  // of writes a crash interrupted
  if (count_entries(directory) >= kMaxPerAgent) {
    throw DurableFileError("agent " + entry.agent + " already has " + std::to_string(kMaxPerAgent) +
                           " deferred deletes in " + directory.string());
  }
  write_atomically(target, serialize(entry));
}

std::vector<DeferredDelete> DeferredDeletes::pending(const std::string& controller,
                                                     const std::string& agent,
                                                     std::size_t limit) const {
  return read_directory(agent_directory(controller, agent), limit);
}

bool DeferredDeletes::any_pending(const std::string& controller) const {
  if (!wire::is_uuid(controller)) {
    return false;
  }
  std::error_code error;
  for (const auto& agent : fs::directory_iterator(root_ / controller, error)) {
    if (count_entries(agent.path()) > 0) {
      return true;
    }
  }
  return false;
}

std::vector<DeferredDelete> DeferredDeletes::all() const {
  std::vector<DeferredDelete> entries;
  std::error_code error;
  for (const auto& controller : fs::directory_iterator(root_, error)) {
    std::error_code inner;
    for (const auto& agent : fs::directory_iterator(controller.path(), inner)) {
      auto some = read_directory(agent.path(), kMaxPerAgent);
      entries.insert(entries.end(), std::make_move_iterator(some.begin()),
                     std::make_move_iterator(some.end()));
    }
  }
  std::stable_sort(entries.begin(), entries.end(),
                   [](const auto& a, const auto& b) { return a.recorded_at < b.recorded_at; });
  return entries;
}

DeferredDeletes::Held::~Held() {
  if (fd_.get() >= 0) {
    ::flock(fd_.get(), LOCK_UN);
  }
}

std::optional<DeferredDeletes::Held> DeferredDeletes::try_hold(const DeferredDelete& entry) const {
  const auto path = agent_directory(entry.controller, entry.agent) / file_name_for(entry.ref);
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
  if (fd.get() < 0 || ::flock(fd.get(), LOCK_EX | LOCK_NB) != 0) {
    return std::nullopt;
  }
  // Forgotten while this process waited for it: the file it holds is no longer the entry.
  struct stat held {};
  struct stat current {};
  if (::fstat(fd.get(), &held) != 0 || ::stat(path.c_str(), &current) != 0 ||
      held.st_ino != current.st_ino || held.st_dev != current.st_dev) {
    return std::nullopt;
  }
  return Held(entry, fd.release());
}

DeferredDeletes::HeldEntries DeferredDeletes::hold_all(const std::string& controller,
                                                       const std::string& ref,
                                                       std::chrono::milliseconds patience) const {
  HeldEntries result;
  if (!wire::is_uuid(controller)) {
    return result;
  }
  const auto give_up = std::chrono::steady_clock::now() + patience;
  std::error_code error;
  for (const auto& agent : fs::directory_iterator(root_ / controller, error)) {
    const auto path = agent.path() / file_name_for(ref);
    if (!fs::exists(path, error)) {
      continue;
    }
    const auto text = read_file(path);
    const auto entry = text ? parse(*text) : std::nullopt;
    if (!entry) {
      continue;
    }
    for (;;) {
      if (auto one = try_hold(*entry)) {
        result.held.push_back(std::move(*one));
        break;
      }
      if (!fs::exists(path, error)) {
        break;  // carried out meanwhile
      }
      if (std::chrono::steady_clock::now() >= give_up) {
        result.complete = false;
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  return result;
}

void DeferredDeletes::forget(const Held& held) {
  const auto& entry = held.entry();
  const auto directory = agent_directory(entry.controller, entry.agent);
  const auto path = directory / file_name_for(entry.ref);
  if (::unlink(path.c_str()) != 0) {
    if (errno == ENOENT) {
      return;
    }
    throw DurableFileError("cannot remove " + path.string() + ": " + std::strerror(errno));
  }
  fsync_directory(directory);
}

}  // namespace garm_edge::provider
