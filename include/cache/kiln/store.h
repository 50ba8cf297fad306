// The persistent level of the executable cache: a RocksDB database in one
// directory (KILN_CACHE_DIR), shared by every process of the user on the
// host. No torch, no LLVM.
//
// RocksDB lets one process open a database read-write (its LOCK file) and
// any number open it as secondaries, which read and catch up with what the
// writer wrote. So every process reads through a secondary, and writes from a
// background thread that opens the database read-write only for the moment
// it takes to write one batch of new entries, retrying with backoff while
// another process holds it. Nobody waits for another process on the way to a
// kernel: a lookup never takes the lock, and a write is queued. A writer
// touches a marker file after each batch, and a reader whose lookup missed
// catches up only when the marker changed since it last did.
// docs/cache.md lists the failure modes.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/cache.h"

namespace kiln::cache {

struct StoreOptions {
  std::string dir;         // created 0700 if missing; see cache_directory.h for what is refused
  bool read_only = false;  // KILN_CACHE_READONLY: serve what is there, never write
  uint64_t max_bytes = 0;  // KILN_CACHE_MAX_MB: entries' bytes past which the least recently used go; 0: no cap
};

enum class Lookup {
  Hit,
  Absent,            // no entry under this key, and none of its kernel elsewhere: a new kernel
  Evicted,           // this key was stored, and evicted past the size cap
  OtherEnvironment,  // the same kernel is stored, built for another environment
  Corrupt,           // an entry that failed its checks: counted, deleted, recompiled
};

struct StoreLookupResult {
  Lookup outcome = Lookup::Absent;
  std::string object;     // on a hit
  double compile_ms = 0;  // on a hit: what the entry cost to build
  std::string problem;    // on Corrupt: what was wrong
  std::string detail;     // on Evicted: when; on OtherEnvironment: the fingerprint fields that differ
};

// One entry as `list` and `verify` see it.
struct StoreListing {
  Key key;
  size_t bytes = 0;
  int64_t written_unix_s = 0;
  double compile_ms = 0;
  std::string problem;  // "" when the entry is intact and was built for `fingerprint`
};

class Store {
 public:
  // Never throws. When the directory cannot be used (refused, not
  // creatable, not writable outside read-only mode), returns null and sets
  // `why` to a sentence naming the directory and the fix.
  static std::unique_ptr<Store> open(const StoreOptions& options, std::string& why);
  ~Store();
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;

  // Looks `key` up; an entry must carry `key` and `fingerprint` and pass its
  // checksum to count as a hit. A miss with the key's `kernel` identity
  // (cache::kernel_identity) says why: Evicted, OtherEnvironment or Absent;
  // without it ({0, 0}), Absent. Thread-safe.
  StoreLookupResult get(const Key& key, std::string_view fingerprint, const Key& kernel = {});
  // Queues an entry for the background writer; no-op in read-only mode.
  // `kernel`: the kernel's identity, which lets another environment's miss
  // of the same kernel say what differed ({0, 0}: not recorded).
  void put(const Key& key, std::string_view fingerprint, std::string object, double compile_ms, const Key& kernel = {});
  // A use of an entry this process already holds in memory: it becomes the
  // most recently used in the store's LRU order (a queued touch, at most
  // once a second per key; get's hits and put count as uses too). No-op in
  // read-only mode.
  void touch(const Key& key);
  // Queues the deletion of a key whose object failed to load.
  void discard(const Key& key);
  // Writes what is queued on the calling thread, at its priority (after a
  // batch the idle-priority writer thread may be writing), until the queue
  // is empty or `timeout` passed; returns whether it is empty.
  bool flush(std::chrono::milliseconds timeout);

  // Every entry, checked against `fingerprint`: for `python -m kiln cache`.
  std::vector<StoreListing> list(std::string_view fingerprint);
  // Deletes every entry (`cache clear`); returns how many.
  size_t clear();
  // Deletes the entries that fail their checks or were built for another
  // environment than `fingerprint` (`cache prune`); they can never be hits
  // here, yet take room under the cap. No-op in read-only mode.
  struct PruneResult {
    size_t deleted = 0, kept = 0;
  };
  PruneResult prune(std::string_view fingerprint);
  // The intact entries built for `fingerprint`, each exactly as stored
  // (entry_format.h), for `cache export`.
  std::vector<std::string> encoded_entries(std::string_view fingerprint);
  // Queues an encoded entry (from an export file) for the writer, under the
  // key it carries, as put() would: the cap applies. Returns "" or what is
  // wrong with it (it is then not queued). The caller checks its
  // fingerprint. Refused in read-only mode.
  std::string put_encoded(std::string value);
  bool read_only() const;

  // A warning the background writer met (disk full, lost database), once:
  // "" when there is none new. The caller shows it to the user.
  std::string take_warning();

  const std::string& dir() const;
  // What this process's writer did, since the store opened.
  struct Counters {
    uint64_t evicted = 0;       // entries evicted to stay within max_bytes
    uint64_t lock_wait_us = 0;  // time spent waiting for other processes' batches (the LOCK)
  };
  Counters counters() const;

  struct Impl;

 private:
  explicit Store(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace kiln::cache
