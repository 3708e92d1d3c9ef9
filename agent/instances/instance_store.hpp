#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "common/unique_fd.hpp"
#include "wire/enums.hpp"

namespace garm_edge::agent {

/// What the agent was doing with an instance, written down before it acts so a crash in the
/// middle can be finished or rolled back.
enum class Intent { creating, created, deleting };

std::string_view to_string(Intent intent);

/// One status report a guest sent through the relay.
struct GuestMessage {
  std::string time;  // RFC 3339
  std::string status;
  std::string message;

  bool operator==(const GuestMessage&) const = default;
};

/// The runner archive a guest may fetch from the agent's cache: garm's tool for its OS and
/// architecture, and how to download it (the pool's proxy, GHES's temporary token).
struct RunnerArchiveRecord {
  std::string download_url;
  std::string sha256;
  std::string temp_download_token;
  std::string http_proxy;
  std::string https_proxy;
  std::string no_proxy;

  bool operator==(const RunnerArchiveRecord&) const = default;
};

/// A guest's access to the agent's guest service and what it reported there. Holds secrets
/// (user-data carries garm's instance token): it lives only in the 0600 record file.
struct GuestRecord {
  std::string network;
  std::string mac;
  std::string ip;                 // the address reserved for it; empty: none (token only)
  std::string seed_token_hash;    // hex SHA-256 of the token in its seed URL
  std::string bearer_token_hash;  // hex SHA-256 of garm's instance token
  std::string callback_url;       // garm's own, where the relay forwards to
  std::string metadata_url;
  std::string ca_cert_bundle;  // PEM garm's certificate is checked with (besides the system CAs)
  std::string meta_data;
  std::string user_data;
  std::string vendor_data;
  /// After the guest reported idle or failed: its seed and relay access are closed.
  bool closed = false;
  std::string seed_served_at;
  std::string runner_status;
  std::optional<std::int64_t> agent_id;
  std::string os_name;
  std::string os_version;
  std::vector<GuestMessage> messages;                 // the latest ones, oldest first
  std::optional<RunnerArchiveRecord> runner_archive;  // none: the guest downloads it itself
  /// garm's agent URL as garm rendered it into this guest's install script or runner
  /// metadata: where the relay carries garm-agent's socket. Empty: not seen yet.
  std::string garm_agent_url;

  bool operator==(const GuestRecord&) const = default;
};

/// One instance as the agent remembers it; the file is keyed by the libvirt domain name.
/// Where a warm guest is in its life: booting its generic part, ready for an assignment, or
/// bound to a garm instance (from then on it is that instance).
/// warming -> ready -> bound, or (a saved entry's) ready -> saving -> saved -> bound: a saved
/// guest's memory is a file, its domain is shut off, and binding restores it.
enum class WarmState { warming, ready, saving, saved, bound };

std::string_view to_string(WarmState state);

/// A guest the agent booted ahead of demand (docs/warm-guests.md).
struct WarmRecord {
  std::string spec;  // warm_spec_of its [[warm]] entry: a changed config retires it
  /// The controller whose create alone may bind it (its [[warm]] entry's). Empty in records
  /// written before warm guests had an owner: such a guest is never bound.
  std::string controller;
  WarmState state = WarmState::warming;
  std::string token_hash;  // hex SHA-256 of the token its seed script asks for its assignment with
  std::string ready_at;    // RFC 3339
  std::string bound_at;
  /// The per-instance script it runs once bound: holds garm's secrets, so it is cleared once
  /// the guest has fetched it (and the token then stops working).
  std::string assignment;
  bool delivered = false;
  std::string unpacked_sha256;  // the runner archive it unpacked while warming, if any
  std::string saved_at;         // RFC 3339; its memory is in memory_volume_for(its domain's name)

  bool operator==(const WarmRecord&) const = default;
};

/// A cache an instance got: a copy-on-write overlay in its storage pool on one generation of
/// the cache (docs/caches.md); the guest's writes go to the overlay and go with it.
struct CacheDiskRecord {
  std::string cache;  // its [[caches]] name
  std::uint64_t generation = 0;
  std::string generation_path;  // what the overlay backs onto
  std::string volume_name;      // the overlay, in the record's volume_pool
  std::string serial;           // the guest's /dev/disk/by-id/virtio-<serial>
  std::string mount;

  bool operator==(const CacheDiskRecord&) const = default;
};

/// An empty disk on a [[scratch_pools]] storage pool the guest formats and mounts; it goes
/// with the guest (docs/extra-specs.md).
struct ScratchDiskRecord {
  std::string pool;          // its [[scratch_pools]] name
  std::string storage_pool;  // the libvirt storage pool the volume is in
  std::string volume_name;
  std::uint64_t size_gib = 0;
  std::string serial;  // the guest's /dev/disk/by-id/virtio-<serial>
  std::string mount;

  bool operator==(const ScratchDiskRecord&) const = default;
};

/// A further NIC on one of the agent's [[networks]].
struct ExtraNicRecord {
  std::string network;  // its [[networks]] name
  std::string mac;

  bool operator==(const ExtraNicRecord&) const = default;
};

struct InstanceRecord {
  std::string domain_name;
  std::string domain_uuid;  // also garm's provider_id
  std::string controller_id;
  std::string pool_id;
  std::string name;  // garm's instance name
  std::string image;
  std::string flavor;
  wire::OsType os_type = wire::OsType::linux;
  std::string os_name;
  std::string os_version;
  wire::OsArch os_arch = wire::OsArch::amd64;
  std::string volume_pool;
  std::string volume_name;
  std::string base_path;  // the base its overlay backs onto; empty in records before 0.2
  std::string created_at;
  Intent intent = Intent::creating;
  std::optional<GuestRecord> guest;
  std::optional<WarmRecord> warm;  // only for warm guests, bound or not
  std::vector<CacheDiskRecord> caches;
  std::uint64_t root_disk_gib = 0;  // 0: the flavor's (records before pool shapes)
  std::vector<ScratchDiskRecord> scratch_disks;
  std::vector<ExtraNicRecord> extra_nics;

  bool operator==(const InstanceRecord&) const = default;
};

class StoreError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// Durable instance records. Implementations must make `put` atomic: after a crash a record is
/// either the old version or the new one, never a torn file.
class InstanceStore {
 public:
  virtual ~InstanceStore() = default;
  virtual void put(const InstanceRecord& record) = 0;
  virtual std::optional<InstanceRecord> get(std::string_view domain_name) = 0;
  /// Whether a record, readable or not, exists under that name: without reading it.
  virtual bool contains(std::string_view domain_name) = 0;
  virtual void remove(std::string_view domain_name) = 0;
  virtual std::vector<InstanceRecord> list() = 0;
  /// Domain names of records that exist but cannot be read (list() skips them).
  virtual std::vector<std::string> unreadable() = 0;
  /// A random ID created with the state directory. Domains carry it, so an agent whose state
  /// directory was wiped or not mounted does not mistake its earlier domains for leftovers.
  virtual const std::string& state_id() const = 0;
};

/// One JSON file per instance under `<state_dir>/instances/`, written as temp file + fsync +
/// rename + fsync of the directory. Files are 0600 and the directories 0700. One process at a
/// time: the state directory is locked (flock) for the store's lifetime.
class FileInstanceStore final : public InstanceStore {
 public:
  /// Creates the directories if needed; throws StoreError when the state dir is unusable or
  /// another process holds it.
  explicit FileInstanceStore(const std::filesystem::path& state_dir);
  ~FileInstanceStore() override;
  FileInstanceStore(const FileInstanceStore&) = delete;
  FileInstanceStore& operator=(const FileInstanceStore&) = delete;

  void put(const InstanceRecord& record) override;
  /// Throws StoreError when the record exists but cannot be read: callers must not mistake
  /// it for an absent one.
  std::optional<InstanceRecord> get(std::string_view domain_name) override;
  bool contains(std::string_view domain_name) override;
  void remove(std::string_view domain_name) override;
  /// Every readable record. Unreadable ones are skipped here and left in place; `get` keeps
  /// failing for them, so nothing that needs the record (create, delete, start, the guest's
  /// calls) acts on their instance until an operator looks. Lookups and stop, which need only
  /// the domain, still reach it (they use `contains`).
  std::vector<InstanceRecord> list() override;
  std::vector<std::string> unreadable() override;
  const std::string& state_id() const override { return state_id_; }

 private:
  /// Every record file: parsed, or its domain name when it cannot be read.
  void scan(std::vector<InstanceRecord>& records, std::vector<std::string>& unreadable);
  std::filesystem::path path_for(std::string_view domain_name) const;

  UniqueFd lock_;  // first: held from before anything is read until the last member is gone
  std::filesystem::path directory_;
  std::string state_id_;
};

std::string serialize_record(const InstanceRecord& record);
/// Throws StoreError when the text is not a record.
InstanceRecord parse_record(std::string_view text);

}  // namespace garm_edge::agent
