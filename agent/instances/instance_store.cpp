#include "agent/instances/instance_store.hpp"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "agent/instances/identifiers.hpp"
#include "common/durable_file.hpp"
#include "common/unique_fd.hpp"
#include "wire/validate.hpp"

namespace garm_edge::agent {
namespace {

namespace fs = std::filesystem;

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
  auto held = on_disk([&] { return lock_exclusively(state_dir / "lock"); });
  if (!held) {
    throw StoreError("state directory " + state_dir.string() +
                     " is in use by another garm-edge-agent process");
  }
  return std::move(*held);
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

}  // namespace

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
