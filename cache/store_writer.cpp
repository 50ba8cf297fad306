// The store's write side (see store_writer.h).
#include "store_writer.h"

#include <rocksdb/env.h>
#include <rocksdb/options.h>
#include <rocksdb/utilities/write_batch_with_index.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <memory>
#include <random>
#include <set>
#include <thread>

#include "kiln/entry_format.h"

namespace kiln::cache::detail {
namespace {

// RocksDB's info LOG files would pile up in the cache directory (and a
// secondary needs a writable directory of its own for them): kiln logs what
// matters through KILN_LOG=cache instead.
class SilentLogger final : public rocksdb::Logger {
 public:
  using rocksdb::Logger::Logv;
  void Logv(const char*, va_list) override {}
};

constexpr const char* kLru = "lru";
constexpr const char* kMeta = "meta";
constexpr const char* kTotalKey = "total";  // in "meta"; entry keys are 16 bytes, so it never collides
constexpr size_t kEntryKeyBytes = 16;

std::string u64_pair(uint64_t a, uint64_t b) {
  std::string s(16, '\0');
  std::memcpy(s.data(), &a, 8);
  std::memcpy(s.data() + 8, &b, 8);
  return s;
}

bool read_u64_pair(const std::string& s, uint64_t& a, uint64_t& b) {
  if (s.size() != 16) return false;
  std::memcpy(&a, s.data(), 8);
  std::memcpy(&b, s.data() + 8, 8);
  return true;
}

// An entry's bookkeeping in "meta": its tick and size, then its kernel
// identity's 16 bytes when known (a store of an older kiln has 16-byte
// records without it).
struct EntryMeta {
  uint64_t tick = 0, bytes = 0;
  std::string kernel;
};

std::string encode_meta(const EntryMeta& m) { return u64_pair(m.tick, m.bytes) + m.kernel; }

bool decode_meta(const std::string& s, EntryMeta& m) {
  if (s.size() != 16 && s.size() != 16 + kEntryKeyBytes) return false;
  read_u64_pair(s.substr(0, 16), m.tick, m.bytes);
  m.kernel = s.substr(16);
  return true;
}

std::string kernel_record(const std::string& kernel, const std::string& key) { return kernel + key; }

std::string unix_seconds_now() {
  std::string s(8, '\0');
  const auto now = static_cast<uint64_t>(std::time(nullptr));
  std::memcpy(s.data(), &now, 8);
  return s;
}

// Big-endian, so that RocksDB's byte order is the ticks' order.
std::string lru_key(uint64_t tick, const std::string& key) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = static_cast<char>(tick >> (56 - 8 * i));
  return s + key;
}

uint64_t tick_of(const rocksdb::Slice& lru) {
  uint64_t t = 0;
  for (int i = 0; i < 8; ++i) t = (t << 8) | static_cast<uint8_t>(lru[i]);
  return t;
}

// Microseconds since the epoch, strictly increasing within this process:
// processes on one host share the clock, so ticks order uses across them.
uint64_t next_tick() {
  static std::atomic<uint64_t> last{0};
  const auto now = static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::system_clock::now().time_since_epoch())
          .count());
  uint64_t prev = last.load();
  uint64_t t;
  do {
    t = std::max(now, prev + 1);
  } while (!last.compare_exchange_weak(prev, t));
  return t;
}

std::vector<rocksdb::ColumnFamilyDescriptor> families() {
  rocksdb::ColumnFamilyOptions cf(base_options());
  return {{rocksdb::kDefaultColumnFamilyName, cf}, {kLru, cf}, {kMeta, cf}, {kKernelsFamily, cf}};
}

// One read-write hold of the database, with its accounting.
class Session {
 public:
  ~Session() { close(); }

  rocksdb::Status open(const std::string& path, const std::function<bool(int)>& give_up) {
    std::minstd_rand jitter(static_cast<unsigned>(::getpid()));
    rocksdb::Options o = base_options();
    o.create_if_missing = true;
    o.create_missing_column_families = true;  // older stores lack "lru", "meta" or "kernels"
    for (int attempt = 0;; ++attempt) {
      rocksdb::Status s = rocksdb::DB::Open(o, path, families(), &cf_, &db_);
      if (s.ok()) return load_totals();
      // Another process holds the LOCK for its batch: wait for it.
      if (!(s.IsIOError() && s.ToString().find("lock") != std::string::npos) || give_up(attempt)) return s;
      const auto start = std::chrono::steady_clock::now();
      std::this_thread::sleep_for(std::chrono::milliseconds(5 + jitter() % 15));
      lock_wait_us_ += static_cast<uint64_t>(
          std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - start).count());
    }
  }

  // Time open() slept while other processes held the database.
  uint64_t lock_wait_us() const { return lock_wait_us_; }

  // Applies one change at `tick`.
  void apply(const Pending& p, uint64_t tick) {
    if (p.change == Change::ForgetEvictions) return forget_evictions();
    EntryMeta old;
    const bool had = meta_of(p.key, old);
    if (had && (p.change != Change::Touch || old.tick < tick)) forget(p.key, old);
    switch (p.change) {
      case Change::Put:
        batch_.Put(cf_[0], p.key, p.value);
        remember(p.key, {tick, p.value.size(), p.kernel});
        break;
      case Change::Delete: batch_.Delete(cf_[0], p.key); break;
      case Change::Touch:
        if (had && old.tick < tick) remember(p.key, {tick, old.bytes, old.kernel});
        break;
      case Change::ForgetEvictions: break;
    }
  }

  // Evicts least recently used entries until the entries fit `max_bytes`.
  uint64_t evict(uint64_t max_bytes) {
    uint64_t evicted = 0;
    while (max_bytes > 0 && total_bytes_ > max_bytes) {
      std::vector<std::string> oldest;  // read first: the batch is not changed under its iterator
      {
        std::unique_ptr<rocksdb::Iterator> it(
            batch_.NewIteratorWithBase(cf_[1], db_->NewIterator(rocksdb::ReadOptions(), cf_[1])));
        for (it->SeekToFirst(); it->Valid() && oldest.size() < 64; it->Next()) oldest.push_back(it->key().ToString());
      }
      if (oldest.empty()) break;
      for (const std::string& record : oldest) {
        if (total_bytes_ <= max_bytes) break;
        const std::string key = record.substr(8);
        EntryMeta m;
        if (meta_of(key, m) && m.tick == tick_of(record)) {
          forget(key, m, /*evicted=*/true);
          batch_.Delete(cf_[0], key);
          ++evicted;
        } else {
          // A record whose entry has another tick or none: every batch
          // deletes an entry's old record with it, so this is defensive; it
          // keeps the walk from meeting the same record twice.
          batch_.Delete(cf_[1], record);
        }
      }
    }
    return evicted;
  }

  rocksdb::Status write() {
    batch_.Put(cf_[2], kTotalKey, u64_pair(total_bytes_, count_));
    rocksdb::WriteOptions wo;
    wo.sync = true;  // an entry a reader was told about survives a power loss too
    rocksdb::Status s = db_->Write(wo, batch_.GetWriteBatch());
    batch_.Clear();
    return s;
  }

  rocksdb::Status close() {
    if (!db_) return rocksdb::Status::OK();
    for (rocksdb::ColumnFamilyHandle* h : cf_) db_->DestroyColumnFamilyHandle(h);
    cf_.clear();
    rocksdb::Status s = db_->Close();
    delete db_;
    db_ = nullptr;
    return s;
  }

 private:
  bool meta_of(const std::string& key, EntryMeta& m) {
    std::string v;
    return batch_.GetFromBatchAndDB(db_, rocksdb::ReadOptions(), cf_[2], key, &v).ok() && decode_meta(v, m);
  }
  // An evicted entry leaves its kernel record, with the time, so that a
  // later miss of its key can say "evicted".
  void forget(const std::string& key, const EntryMeta& m, bool evicted = false) {
    batch_.Delete(cf_[1], lru_key(m.tick, key));
    batch_.Delete(cf_[2], key);
    if (!m.kernel.empty()) {
      if (evicted) {
        batch_.Put(cf_[3], kernel_record(m.kernel, key), unix_seconds_now());
      } else {
        batch_.Delete(cf_[3], kernel_record(m.kernel, key));
      }
    }
    total_bytes_ -= std::min(total_bytes_, m.bytes);
    count_ -= count_ > 0;
  }
  void remember(const std::string& key, const EntryMeta& m) {
    batch_.Put(cf_[2], key, encode_meta(m));
    batch_.Put(cf_[1], lru_key(m.tick, key), "");
    if (!m.kernel.empty()) batch_.Put(cf_[3], kernel_record(m.kernel, key), "");
    total_bytes_ += m.bytes;
    ++count_;
  }
  void forget_evictions() {
    std::vector<std::string> doomed;  // read first: the batch is not changed under its iterator
    {
      std::unique_ptr<rocksdb::Iterator> it(
          batch_.NewIteratorWithBase(cf_[3], db_->NewIterator(rocksdb::ReadOptions(), cf_[3])));
      for (it->SeekToFirst(); it->Valid(); it->Next())
        if (!it->value().empty()) doomed.push_back(it->key().ToString());
    }
    for (const std::string& record : doomed) batch_.Delete(cf_[3], record);
  }

  // The totals, or, for a store that has none (format 1, or rebuilt), the
  // accounting built once from its entries.
  rocksdb::Status load_totals() {
    std::string v;
    rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), cf_[2], kTotalKey, &v);
    if (s.ok() && read_u64_pair(v, total_bytes_, count_)) return s;
    if (!s.ok() && !s.IsNotFound()) return s;
    std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions(), cf_[0]));
    for (it->SeekToFirst(); it->Valid(); it->Next()) {
      const std::string key = it->key().ToString();
      StoredEntry e;
      if (key.size() != kEntryKeyBytes ||
          !decode_entry(std::string_view(it->value().data(), it->value().size()), e).empty()) {
        batch_.Delete(cf_[0], key);
        continue;
      }
      remember(key, {static_cast<uint64_t>(e.written_unix_s) * 1000000, it->value().size(), kernel_bytes(e.kernel)});
    }
    if (!it->status().ok()) return it->status();
    return write();
  }

  rocksdb::DB* db_ = nullptr;
  std::vector<rocksdb::ColumnFamilyHandle*> cf_;  // default, lru, meta, kernels
  rocksdb::WriteBatchWithIndex batch_{rocksdb::BytewiseComparator(), 0, /*overwrite_key=*/true};
  uint64_t total_bytes_ = 0, count_ = 0;
  uint64_t lock_wait_us_ = 0;
};

}  // namespace

std::string key_bytes(const Key& k) {
  std::string s(16, '\0');
  for (int i = 0; i < 8; ++i) {
    s[i] = static_cast<char>(k.high >> (56 - 8 * i));
    s[8 + i] = static_cast<char>(k.low >> (56 - 8 * i));
  }
  return s;
}

std::string kernel_bytes(const Key& kernel) { return kernel == Key{} ? "" : key_bytes(kernel); }

Key key_of(std::string_view s) {
  Key k;
  for (int i = 0; i < 8; ++i) {
    k.high = (k.high << 8) | static_cast<uint8_t>(s[i]);
    k.low = (k.low << 8) | static_cast<uint8_t>(s[8 + i]);
  }
  return k;
}

rocksdb::Options base_options() {
  rocksdb::Options o;
  o.info_log = std::make_shared<SilentLogger>();
  o.compression = rocksdb::kLZ4Compression;  // objects are mostly zeros and relocations: ~2-3x
  o.max_open_files = -1;                     // a secondary must keep every file open
  o.keep_log_file_num = 1;
  // A compaction that meets a damaged table would otherwise be retried every
  // second, and closing the database waits for the retry: the damage is
  // handled by rebuilding instead (rebuild_damaged).
  o.max_bgerror_resume_count = 0;
  return o;
}

BatchOutcome write_batch(const std::string& db_path, const std::vector<Pending>& batch, uint64_t max_bytes,
                         const std::function<bool(int)>& give_up) {
  BatchOutcome out;
  Session session;
  rocksdb::Status s = session.open(db_path, give_up);
  if (s.ok()) {
    const uint64_t tick = next_tick();  // one tick per batch: its entries were used together
    for (const Pending& p : batch) session.apply(p, tick);
    out.evicted = session.evict(max_bytes);
    s = session.write();
  }
  const rocksdb::Status closed = session.close();
  if (s.ok()) s = closed;
  if (!s.ok()) out = {s.ToString(), 0};
  out.lock_wait_us = session.lock_wait_us();
  return out;
}

std::string rebuild_damaged(const std::string& db_path, const std::vector<std::string>& known_keys,
                            const std::function<bool(int)>& give_up) {
  const std::string aside = db_path + ".damaged-" + std::to_string(::getpid());
  std::error_code ec;
  std::filesystem::remove_all(aside, ec);
  std::filesystem::rename(db_path, aside, ec);
  if (ec) return "moving it aside to rebuild it failed (" + ec.message() + ")";
  ::mkdir(db_path.c_str(), 0700);

  // Only the entries and the "meta" family that lists them are opened: a
  // damaged table of another family (the LRU or kernel records, whose small
  // tables the damage hits as often as any) must not fail the open and lose
  // every entry. Without "meta" if that is what fails.
  std::vector<std::string> names;
  rocksdb::DB* old = nullptr;
  std::vector<rocksdb::ColumnFamilyHandle*> handles;
  rocksdb::ColumnFamilyHandle* meta = nullptr;
  rocksdb::Options o = base_options();
  const bool has_meta = rocksdb::DB::ListColumnFamilies(o, aside, &names).ok() &&
                        std::find(names.begin(), names.end(), kMeta) != names.end();
  rocksdb::Status opened;
  for (const bool with_meta : {has_meta, false}) {
    std::vector<rocksdb::ColumnFamilyDescriptor> want{{rocksdb::kDefaultColumnFamilyName, o}};
    if (with_meta) want.push_back({kMeta, o});
    opened = rocksdb::DB::OpenForReadOnly(o, aside, want, &handles, &old);
    if (opened.ok()) {
      meta = with_meta ? handles[1] : nullptr;
      break;
    }
    old = nullptr;
    handles.clear();
  }
  uint64_t kept = 0, lost = 0;
  bool cut_short = false;  // a family's listing stopped at a damaged block
  std::string result;
  if (old) {
    rocksdb::ColumnFamilyHandle* entries = handles[0];
    // Every key any source names, each read once by itself: an iterator
    // stops for good at the first damaged block it meets, a point read only
    // fails for the entries in one.
    std::set<std::string> keys(known_keys.begin(), known_keys.end());
    for (rocksdb::ColumnFamilyHandle* family : {entries, meta}) {
      if (!family) continue;
      std::unique_ptr<rocksdb::Iterator> it(old->NewIterator(rocksdb::ReadOptions(), family));
      for (it->SeekToFirst(); it->Valid(); it->Next())
        if (it->key().size() == kEntryKeyBytes) keys.insert(it->key().ToString());
      if (!it->status().ok()) cut_short = true;
    }
    // Written in slices as they are read, so that a large store is never
    // held in memory.
    std::vector<Pending> slice;
    auto write_slice = [&] {
      if (result.empty() && !slice.empty()) result = write_batch(db_path, slice, 0, give_up).failure;
      slice.clear();
    };
    for (const std::string& key : keys) {
      std::string value;
      const rocksdb::Status s = old->Get(rocksdb::ReadOptions(), entries, key, &value);
      if (s.IsNotFound()) continue;  // a known key deleted or evicted meanwhile
      StoredEntry e;
      if (!s.ok() || !decode_entry(value, e).empty()) {
        ++lost;
        continue;
      }
      slice.push_back({Change::Put, key, std::move(value), kernel_bytes(e.kernel)});
      ++kept;
      if (slice.size() == 64) write_slice();
    }
    write_slice();
    for (rocksdb::ColumnFamilyHandle* h : handles) old->DestroyColumnFamilyHandle(h);
    delete old;
    if (!result.empty()) result = "; writing them back failed (" + result + ")";
  }
  std::filesystem::remove_all(aside, ec);
  if (!opened.ok()) return "nothing of it could be read back (" + opened.ToString() + "), and a new one was started";
  return "it was rebuilt with the " + std::to_string(kept) + " entries that read back whole (" + std::to_string(lost) +
         (cut_short ? " lost, and any past a damaged block that this process had not used," : " lost,") +
         " to be compiled again)" + result;
}

}  // namespace kiln::cache::detail
