// The store's write side: one session holding the database read-write, which
// applies a batch of queued changes with the least-recently-used accounting
// and evicts past the size cap, and the rebuild of a damaged database. Used
// by store.cpp's background writer only.
//
// Column families: "default" holds the entries (16-byte key -> entry_format
// value), which is all a reader opens; "lru" holds one empty record per entry
// under (8-byte big-endian tick, key), so the oldest entry is the first record;
// "meta" holds per key its tick and size, and under "total" the store's entry
// bytes and count. An entry used again gets a new tick: its old record is
// deleted in the same batch. Eviction walks "lru" from the start and stops as
// soon as the store fits, so a write never rescans the store.
#pragma once

#include <rocksdb/db.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace kiln::cache::detail {

rocksdb::Options base_options();

enum class Change {
  Put,     // a new entry
  Delete,  // an entry found bad
  Touch,   // an entry used by a reader: now the most recently used
};

struct Pending {
  Change change;
  std::string key, value;  // value: Put only
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
// holds every entry that still reads back whole (checksum and all). Returns a
// sentence saying what was kept and lost.
std::string rebuild_damaged(const std::string& db_path, const std::function<bool(int attempt)>& give_up);

}  // namespace kiln::cache::detail
