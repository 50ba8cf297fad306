// The store's write side: one session holding the database read-write, which
// applies a batch of queued changes with the least-recently-used accounting
// and evicts past the size cap, and the rebuild of a damaged database. Used
// by store.cpp's background writer only.
//
// Column families: "default" holds the entries (16-byte key -> entry_format
// value); "lru" holds one empty record per entry under (8-byte big-endian
// tick, key), so the oldest entry is the first record; "meta" holds per key
// its tick, size and kernel identity, and under "total" the store's entry
// bytes and count; "kernels" holds per (kernel identity, key) an empty
// record while the entry is stored, and its eviction time (8 bytes, unix
// seconds) once it was evicted. Readers open "default" and "kernels" (a
// miss's reason: the same kernel stored for another environment, or this
// key evicted). An entry used again gets a new tick: its old record is
// deleted in the same batch. Eviction walks "lru" from the start and stops as
// soon as the store fits, so a write never rescans the store.
#pragma once

#include <rocksdb/db.h>

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/cache.h"

namespace kiln::cache::detail {

rocksdb::Options base_options();

// A key as the database holds it: its 16 bytes, high word first, so that the
// store's order is the hex order `list` prints. A kernel identity of {0, 0}
// (unknown: an entry of format 1) is "".
std::string key_bytes(const Key& key);
std::string kernel_bytes(const Key& kernel);
Key key_of(std::string_view bytes);  // from 16 bytes

// The column family of kernel records.
constexpr const char* kKernelsFamily = "kernels";

enum class Change {
  Put,              // a new entry
  Delete,           // an entry found bad
  Touch,            // an entry used by a reader: now the most recently used
  ForgetEvictions,  // `cache clear`: the records of evicted entries go too
};

struct Pending {
  Change change;
  std::string key, value;   // value: Put only
  std::string kernel = "";  // Put: the 16-byte kernel identity, or "" when unknown (format 1)
};

struct BatchOutcome {
  std::string failure;  // "" when the batch is in the database; else RocksDB's status
  uint64_t evicted = 0;
  uint64_t lock_wait_us = 0;  // waiting for another process's hold of the database
};

// Opens the database (creating it), retrying while another process holds it
// until `give_up` says to stop, writes `batch` and evicts the least recently
// used entries until the entries' bytes fit `max_bytes` (0: no cap), in one
// synced write.
BatchOutcome write_batch(const std::string& db_path, const std::vector<Pending>& batch, uint64_t max_bytes,
                         const std::function<bool(int attempt)>& give_up);

// A database whose tables RocksDB found damaged, replaced by a new one that
// holds every entry that still reads back whole (checksum and all): those
// its families list up to their first damaged block, and `known_keys` (the
// entries the calling process read or wrote, which may lie past one).
// Returns a sentence saying what was kept and lost.
std::string rebuild_damaged(const std::string& db_path, const std::vector<std::string>& known_keys,
                            const std::function<bool(int attempt)>& give_up);

}  // namespace kiln::cache::detail
