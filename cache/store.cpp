// The RocksDB level of the executable cache (see include/cache/kiln/store.h).
#include "kiln/store.h"

#include <fcntl.h>
#include <rocksdb/db.h>
#include <rocksdb/env.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <deque>
#include <filesystem>
#include <functional>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <unordered_set>

#include "kiln/background_thread.h"
#include "kiln/cache_directory.h"
#include "kiln/entry_format.h"
#include "kiln/fingerprint_difference.h"
#include "store_writer.h"

namespace kiln::cache {
namespace {

using detail::key_bytes;
using detail::key_of;

// The marker's modification time in nanoseconds; 0 when it does not exist.
int64_t mtime_ns(const std::string& path) {
  struct stat st{};
  if (::stat(path.c_str(), &st) != 0) return 0;
  return static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
}

// "" when `value` is an intact entry of `key` built for `fingerprint` (then
// in `out`); else what is wrong with it.
std::string check_entry(std::string_view value, const Key& key, std::string_view fingerprint, StoredEntry& out) {
  std::string problem = decode_entry(value, out);
  if (problem.empty() && !(out.key == key)) problem = "stored under another key";
  if (problem.empty() && out.fingerprint != fingerprint) problem = "built for another environment";
  return problem;
}

// The secondary's own directory (RocksDB requires one; SilentLogger keeps it
// empty): private to this process, removed at exit. Those of processes that
// died without their exit (killed) are removed here: their names carry the
// pid, and only this user's are touched.
std::string make_reader_dir() {
  std::error_code ec;
  const std::filesystem::path tmp = std::filesystem::temp_directory_path(ec);
  if (ec) return "";
  const std::string prefix = "kiln-reader-";
  for (const auto& d : std::filesystem::directory_iterator(tmp, ec)) {
    const std::string name = d.path().filename().string();
    if (name.rfind(prefix, 0) != 0) continue;
    const long pid = std::strtol(name.c_str() + prefix.size(), nullptr, 10);
    struct stat st;
    if (pid <= 0 || ::lstat(d.path().c_str(), &st) != 0 || st.st_uid != ::getuid()) continue;
    if (::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH) std::filesystem::remove_all(d.path(), ec);
  }
  std::string path = (tmp / (prefix + std::to_string(::getpid()) + "-XXXXXX")).string();
  return ::mkdtemp(path.data()) ? path : "";
}

}  // namespace

struct Store::Impl {
  std::string dir, db_path, marker_path, reader_path;
  bool read_only = false;

  // ---- reading (any thread)
  std::mutex read_mu;
  rocksdb::DB* reader = nullptr;                              // the secondary instance; null until the database exists
  std::vector<rocksdb::ColumnFamilyHandle*> reader_families;  // default, then "kernels" if the store has it
  int64_t caught_up_to = -1;                                  // marker time of the last open or catch-up
  bool reader_saw_damage = false;  // reopened once the writer wrote again (it rebuilds first)

  // ---- writing (the background writer)
  using Pending = detail::Pending;
  using Clock = std::chrono::steady_clock;
  uint64_t max_bytes = 0;  // KILN_CACHE_MAX_MB; 0: no cap
  std::atomic<uint64_t> evicted{0}, lock_wait_us{0};
  std::atomic<bool> damaged{false};  // a reader met RocksDB's Corruption: rebuild before the next batch
  std::mutex write_mu;
  std::condition_variable wake;
  std::deque<Pending> queue;
  bool stopping = false;
  bool writes_failed = false;  // a write failed for good (disk full, ...): memory-only from then on
  std::string warning;         // for take_warning
  std::atomic<bool> has_warning{false};
  std::thread writer;

  ~Impl() {
    {
      std::lock_guard<std::mutex> lock(write_mu);
      stopping = true;
    }
    wake.notify_all();
    if (writer.joinable()) writer.join();
    write_queued(Clock::time_point::max());  // what the writer left
    close_reader();
    std::error_code ec;
    if (!reader_path.empty()) std::filesystem::remove_all(reader_path, ec);
  }

  // The secondary, opened on first need: the database may not exist yet.
  // Caller holds read_mu.
  rocksdb::DB* ensure_reader() {
    if (reader) return reader;
    const int64_t marker = mtime_ns(marker_path);
    if (marker == 0) return nullptr;  // nothing was ever written
    if (reader_path.empty()) {
      reader_path = make_reader_dir();
      if (reader_path.empty()) return nullptr;
    }
    // "kernels" too when it exists: a store written by an older kiln lacks it
    // until its next write.
    const rocksdb::Options options = detail::base_options();
    std::vector<rocksdb::ColumnFamilyDescriptor> families{{rocksdb::kDefaultColumnFamilyName, options}};
    std::vector<std::string> names;
    if (rocksdb::DB::ListColumnFamilies(options, db_path, &names).ok() &&
        std::find(names.begin(), names.end(), detail::kKernelsFamily) != names.end()) {
      families.push_back({detail::kKernelsFamily, options});
    }
    rocksdb::DB* db = nullptr;
    if (rocksdb::DB::OpenAsSecondary(options, db_path, reader_path, families, &reader_families, &db).ok()) {
      reader = db;
      caught_up_to = marker;
    }
    return reader;
  }

  void close_reader() {
    for (rocksdb::ColumnFamilyHandle* h : reader_families) reader->DestroyColumnFamilyHandle(h);
    reader_families.clear();
    delete reader;
    reader = nullptr;
  }

  // Sees what writers added since the secondary was opened. A reopen, not
  // TryCatchUpWithPrimary: every writer session starts a new MANIFEST, and
  // RocksDB 7.8's catch-up across MANIFESTs fails an assertion (an abort in
  // Debian's build) once the writers have reopened a few times.
  // Caller holds read_mu.
  rocksdb::DB* reopen_reader() {
    close_reader();
    return ensure_reader();
  }

  // Why `key`, just found absent, is not stored: its own kernel record says
  // it was evicted, or the same kernel is stored for another environment
  // (the fields that differ from `fingerprint` in `detail`); else Absent.
  static constexpr int kMaxRecordsRead = 16;  // environments of one kernel compared at most
  Lookup why_absent(const std::string& key, const std::string& kernel, std::string_view fingerprint,
                    std::string& detail) {
    if (kernel.empty()) return Lookup::Absent;
    std::lock_guard<std::mutex> lock(read_mu);
    if (!reader || reader_families.size() < 2) return Lookup::Absent;
    std::unique_ptr<rocksdb::Iterator> it(reader->NewIterator(rocksdb::ReadOptions(), reader_families[1]));
    std::string closest;
    size_t closest_fields = SIZE_MAX;
    int read = 0;
    for (it->Seek(kernel); it->Valid() && it->key().starts_with(kernel) && read < kMaxRecordsRead; it->Next(), ++read) {
      const std::string other = it->key().ToString().substr(kernel.size());
      if (other == key) {
        if (it->value().size() != 8) continue;  // stored meanwhile: a new kernel as far as this lookup knows
        int64_t at = 0;
        std::memcpy(&at, it->value().data(), 8);
        detail = "evicted " + std::to_string(std::max<int64_t>(0, std::time(nullptr) - at)) +
                 " s ago, the least recently used past the size cap";
        return Lookup::Evicted;
      }
      std::string value;
      StoredEntry e;
      if (!it->value().empty() || !reader->Get(rocksdb::ReadOptions(), other, &value).ok() ||
          !decode_entry(value, e).empty()) {
        continue;  // evicted or gone: nothing to compare with
      }
      std::string difference = fingerprint_difference(e.fingerprint, fingerprint);
      const size_t fields = static_cast<size_t>(std::count(difference.begin(), difference.end(), ';'));
      if (!difference.empty() && fields < closest_fields) {
        closest = std::move(difference);
        closest_fields = fields;
      }
    }
    if (closest.empty()) return Lookup::Absent;
    detail = std::move(closest);
    return Lookup::OtherEnvironment;
  }

  // OK with the value, NotFound, or what RocksDB met instead (its own block
  // checksums catch a flipped byte on disk: Corruption). `damaged_view`:
  // whether the value came from a database this reader has seen damaged.
  rocksdb::Status read(const std::string& key, std::string& value, bool& damaged_view) {
    std::lock_guard<std::mutex> lock(read_mu);
    rocksdb::DB* db = ensure_reader();
    if (db && reader_saw_damage && mtime_ns(marker_path) != caught_up_to) {
      db = reopen_reader();  // the writer has rebuilt the database since
      reader_saw_damage = false;
    }
    if (!db) return rocksdb::Status::NotFound();
    rocksdb::Status s = db->Get(rocksdb::ReadOptions(), key, &value);
    if (s.IsCorruption() && !std::exchange(reader_saw_damage, true)) note_damage(s.ToString());
    damaged_view = reader_saw_damage;
    if (!s.IsNotFound()) return s;
    if (mtime_ns(marker_path) == caught_up_to) return s;  // nothing written since we last looked
    db = reopen_reader();
    if (!db) return rocksdb::Status::NotFound();
    return db->Get(rocksdb::ReadOptions(), key, &value);
  }

  std::string damage_seen;  // under write_mu
  void note_damage(const std::string& what) {
    {
      std::lock_guard<std::mutex> lock(write_mu);
      damage_seen = what;
    }
    damaged.store(true);
  }

  // Whether a use of `key` now should move it to the front of the LRU order:
  // at most once per key and kTouchInterval, so that a kernel used on every
  // flush queues a touch now and then, not per use. Records the use.
  static constexpr auto kTouchInterval = std::chrono::seconds(1);
  std::mutex touch_mu;
  std::unordered_map<Key, std::chrono::steady_clock::time_point, KeyHash> last_use;
  bool used_now(const Key& key) {
    const auto now = std::chrono::steady_clock::now();
    std::lock_guard<std::mutex> lock(touch_mu);
    if (last_use.size() >= 65536) last_use.clear();  // bounded; a cleared key is touched once more
    auto [it, fresh] = last_use.try_emplace(key, now);
    if (!fresh && now - it->second < kTouchInterval) return false;
    it->second = now;
    return true;
  }

  // Entries this process read whole or wrote: a rebuild keeps them even
  // where they lie past a damaged block of a table, where the database's own
  // listing of its entries stops. Bounded: past the bound, only the listing.
  static constexpr size_t kMaxKnownKeys = size_t{1} << 16;
  std::mutex known_mu;
  std::unordered_set<Key, KeyHash> known;
  void know(const Key& key) {
    std::lock_guard<std::mutex> lock(known_mu);
    if (known.size() < kMaxKnownKeys) known.insert(key);
  }
  std::vector<std::string> known_keys() {
    std::lock_guard<std::mutex> lock(known_mu);
    std::vector<std::string> keys;
    keys.reserve(known.size());
    for (const Key& k : known) keys.push_back(key_bytes(k));
    return keys;
  }

  void enqueue(Pending p) {
    {
      std::lock_guard<std::mutex> lock(write_mu);
      if (writes_failed || stopping) return;
      queue.push_back(std::move(p));
    }
    wake.notify_one();
  }

  // The writer thread: gathers a burst of changes and writes them (a
  // database open, a synced write, a close). It runs at idle priority: at
  // the program's, it took a core from the device's kernels in the steps
  // that store the program's first kernels (gpt_train's fifth step;
  // docs/cache.md, "Writing"). A thread that must see the writes done
  // writes them itself, at its own priority (flush, and the close).
  void write_loop() {
    become_background_thread("kiln-store");
    for (;;) {
      {
        std::unique_lock<std::mutex> lock(write_mu);
        wake.wait(lock, [&] { return stopping || !queue.empty(); });
        // Gather what arrives within a moment: one open per burst of compiles.
        if (!stopping) wake.wait_for(lock, std::chrono::milliseconds(20), [&] { return stopping; });
        if (stopping) return;  // the closing thread writes what is left
      }
      write_queued(Clock::time_point::max());
    }
  }

  std::timed_mutex batch_mu;  // one batch at a time, taken from the queue in order

  // Writes what is queued, on the calling thread, after the batch another
  // thread is writing. False when `deadline` passed first: waiting for
  // that batch, or for another process's hold of the database (the changes
  // stay queued). A write that fails otherwise makes the store memory-only.
  bool write_queued(Clock::time_point deadline) {
    std::unique_lock<std::timed_mutex> order(batch_mu, std::defer_lock);
    if (!order.try_lock_until(deadline)) return false;
    std::vector<Pending> batch;
    {
      std::lock_guard<std::mutex> lock(write_mu);
      batch.assign(std::make_move_iterator(queue.begin()), std::make_move_iterator(queue.end()));
      queue.clear();
    }
    if (batch.empty()) return true;
    bool late = false;
    std::string failure = write_batch(batch, [&] { return late = Clock::now() >= deadline; });
    {
      std::lock_guard<std::mutex> lock(write_mu);
      if (late) {
        queue.insert(queue.begin(), std::make_move_iterator(batch.begin()), std::make_move_iterator(batch.end()));
      } else if (!failure.empty()) {
        writes_failed = true;
        queue.clear();
        warning = "kiln: the executable cache in '" + dir + "' could not be written (" + failure +
                  "); this process goes on with its in-memory cache only";
        has_warning.store(true, std::memory_order_release);
      }
    }
    return !late;
  }

  // Writes one batch; a database RocksDB finds damaged is rebuilt from what
  // still reads back and the batch written to that. Returns "" or the failure.
  // `too_late`: whether the caller stops waiting for another process's hold.
  std::string write_batch(const std::vector<Pending>& batch, const std::function<bool()>& too_late) {
    auto give_up = [&](int attempt) {
      std::lock_guard<std::mutex> lock(write_mu);
      // At exit, after ~2-4 s: give up and lose the batch.
      return (stopping && attempt >= 200) || too_late();
    };
    // A damaged table fails every write and compaction from the moment a
    // compaction meets it, so the database is rebuilt from what reads back
    // whole as soon as a reader or a write meets the damage (moving it aside
    // would lose what this run and others stored since).
    auto rebuild = [&](const std::string& why) {
      const std::string what = detail::rebuild_damaged(db_path, known_keys(), give_up);
      std::lock_guard<std::mutex> lock(write_mu);
      warning = "kiln: the executable cache database in '" + db_path + "' was damaged (" + why + "); " + what;
      has_warning.store(true, std::memory_order_release);
    };
    if (damaged.exchange(false)) {
      std::string why;
      {
        std::lock_guard<std::mutex> lock(write_mu);
        why = damage_seen;
      }
      rebuild(why);
    }
    detail::BatchOutcome out = detail::write_batch(db_path, batch, max_bytes, give_up);
    if (out.failure.rfind("Corruption", 0) == 0) {
      rebuild(out.failure);
      out = detail::write_batch(db_path, batch, max_bytes, give_up);
    }
    evicted.fetch_add(out.evicted, std::memory_order_relaxed);
    lock_wait_us.fetch_add(out.lock_wait_us, std::memory_order_relaxed);
    if (out.failure.empty()) touch_marker();
    return out.failure;
  }

  void touch_marker() {
    if (FILE* f = std::fopen(marker_path.c_str(), "a")) std::fclose(f);
    ::utimensat(AT_FDCWD, marker_path.c_str(), nullptr, 0);
  }
};

namespace {

// RocksDB's flush and compaction threads (its default Env's pools, used
// only by the store in this process) at idle priority, as the writer.
void lower_rocksdb_threads() {
  static std::once_flag lowered;
  std::call_once(lowered, [] {
    for (auto pool : {rocksdb::Env::Priority::LOW, rocksdb::Env::Priority::HIGH}) {
      rocksdb::Env::Default()->LowerThreadPoolCPUPriority(pool, rocksdb::CpuPriority::kIdle);
    }
  });
}

}  // namespace

std::unique_ptr<Store> Store::open(const StoreOptions& options, std::string& why) {
  why = prepare_private_directory(options.dir, !options.read_only);
  if (!why.empty()) return nullptr;
  if (!options.read_only && !directory_is_writable(options.dir)) {
    why = "'" + options.dir + "' is not writable by this user";
    return nullptr;
  }
  auto impl = std::make_unique<Impl>();
  impl->dir = options.dir;
  impl->read_only = options.read_only;
  impl->max_bytes = options.max_bytes;
  impl->db_path = options.dir + "/store";
  impl->marker_path = options.dir + "/store.written";
  if (std::filesystem::exists(impl->db_path)) {
    why = prepare_private_directory(impl->db_path, false);
    if (!why.empty()) return nullptr;
  } else if (!options.read_only) {
    why = prepare_private_directory(impl->db_path, true);
    if (!why.empty()) return nullptr;
  }
  Impl* raw = impl.get();
  if (!options.read_only) {
    lower_rocksdb_threads();
    raw->writer = std::thread([raw] { raw->write_loop(); });
  }
  return std::unique_ptr<Store>(new Store(std::move(impl)));
}

Store::Store(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Store::~Store() = default;

const std::string& Store::dir() const { return impl_->dir; }

Store::Counters Store::counters() const {
  return {impl_->evicted.load(std::memory_order_relaxed), impl_->lock_wait_us.load(std::memory_order_relaxed)};
}

StoreLookupResult Store::get(const Key& key, std::string_view fingerprint, const Key& kernel) {
  StoreLookupResult r;
  std::string value;
  const std::string raw = key_bytes(key);
  bool damaged_view = false;
  const rocksdb::Status s = impl_->read(raw, value, damaged_view);
  if (s.IsNotFound()) {
    r.outcome = impl_->why_absent(raw, detail::kernel_bytes(kernel), fingerprint, r.detail);
    return r;
  }
  StoredEntry e;
  r.problem = s.ok() ? check_entry(value, key, fingerprint, e) : s.ToString();
  if (!r.problem.empty()) {
    r.outcome = Lookup::Corrupt;
    discard(key);
    return r;
  }
  r.outcome = Lookup::Hit;
  impl_->know(key);
  if (damaged_view && !impl_->read_only) {
    // Read whole from a database that is being rebuilt, perhaps after the
    // rebuild listed what this process knew: written again, so that the
    // rebuilt database keeps it (the next run would compile it otherwise).
    impl_->enqueue({detail::Change::Put, raw, value, detail::kernel_bytes(e.kernel)});
  } else {
    touch(key);
  }
  r.object = std::move(e.object);
  r.compile_ms = e.compile_ms;
  return r;
}

void Store::put(const Key& key, std::string_view fingerprint, std::string object, double compile_ms,
                const Key& kernel) {
  if (impl_->read_only) return;
  StoredEntry e;
  e.key = key;
  e.kernel = kernel;
  e.fingerprint.assign(fingerprint);
  e.object = std::move(object);
  e.compile_ms = compile_ms;
  e.written_unix_s = static_cast<int64_t>(std::time(nullptr));
  impl_->enqueue({detail::Change::Put, key_bytes(key), encode_entry(e), detail::kernel_bytes(kernel)});
  impl_->used_now(key);  // a put is a use: no touch for it within the interval
  impl_->know(key);
}

void Store::touch(const Key& key) {
  if (!impl_->read_only && impl_->used_now(key)) impl_->enqueue({detail::Change::Touch, key_bytes(key), ""});
}

void Store::discard(const Key& key) {
  if (!impl_->read_only) impl_->enqueue({detail::Change::Delete, key_bytes(key), ""});
}

bool Store::flush(std::chrono::milliseconds timeout) {
  if (impl_->read_only) return true;
  // Written here, at the caller's priority: on a busy machine the idle
  // writer may wait seconds for a core.
  const auto deadline = Impl::Clock::now() + timeout;
  for (;;) {
    if (!impl_->write_queued(deadline)) return false;
    std::lock_guard<std::mutex> lock(impl_->write_mu);
    if (impl_->queue.empty()) return true;  // a failed write empties it too: the store is memory-only
  }
}

std::string Store::take_warning() {
  if (!impl_->has_warning.load(std::memory_order_acquire)) return "";  // once per flush: no lock
  std::lock_guard<std::mutex> lock(impl_->write_mu);
  impl_->has_warning.store(false, std::memory_order_relaxed);
  return std::exchange(impl_->warning, "");
}

// Calls `visit(raw key, value)` for every entry, as of now (the reader is
// reopened first, so that what any writer wrote is seen).
template <typename Visit>
static void for_each_entry(Store::Impl& impl, Visit visit) {
  std::lock_guard<std::mutex> lock(impl.read_mu);
  rocksdb::DB* db = impl.reopen_reader();
  if (!db) return;
  std::unique_ptr<rocksdb::Iterator> it(db->NewIterator(rocksdb::ReadOptions()));
  for (it->SeekToFirst(); it->Valid(); it->Next()) {
    visit(std::string_view(it->key().data(), it->key().size()),
          std::string_view(it->value().data(), it->value().size()));
  }
}

// "" when `value` under the raw key `k` is intact and built for `fingerprint`.
static std::string check_raw(std::string_view k, std::string_view value, std::string_view fingerprint, StoredEntry& e) {
  if (k.size() != 16) return "a key of " + std::to_string(k.size()) + " bytes, not 16";
  return check_entry(value, key_of(k), fingerprint, e);
}

std::vector<StoreListing> Store::list(std::string_view fingerprint) {
  std::vector<StoreListing> out;
  for_each_entry(*impl_, [&](std::string_view k, std::string_view v) {
    StoreListing l;
    l.bytes = v.size();
    if (k.size() == 16) l.key = key_of(k);
    StoredEntry e;
    l.problem = check_raw(k, v, fingerprint, e);
    l.written_unix_s = e.written_unix_s;
    l.compile_ms = e.compile_ms;
    out.push_back(std::move(l));
  });
  return out;
}

Store::PruneResult Store::prune(std::string_view fingerprint) {
  PruneResult r;
  if (impl_->read_only) return r;
  std::vector<std::string> doomed;  // queued after the walk: the reader's lock is not held while enqueuing
  for_each_entry(*impl_, [&](std::string_view k, std::string_view v) {
    StoredEntry e;
    if (check_raw(k, v, fingerprint, e).empty()) {
      ++r.kept;
    } else {
      doomed.emplace_back(k);  // the raw key: a malformed key goes too
    }
  });
  for (std::string& k : doomed) impl_->enqueue({detail::Change::Delete, std::move(k), ""});
  r.deleted = doomed.size();
  return r;
}

std::vector<std::string> Store::encoded_entries(std::string_view fingerprint) {
  std::vector<std::string> out;
  for_each_entry(*impl_, [&](std::string_view k, std::string_view v) {
    StoredEntry e;
    if (check_raw(k, v, fingerprint, e).empty()) out.emplace_back(v);
  });
  return out;
}

std::string Store::put_encoded(std::string value) {
  if (impl_->read_only) return "the store is read-only (KILN_CACHE_READONLY)";
  StoredEntry e;
  std::string problem = decode_entry(value, e);
  if (!problem.empty()) return problem;
  impl_->enqueue({detail::Change::Put, key_bytes(e.key), std::move(value), detail::kernel_bytes(e.kernel)});
  impl_->used_now(e.key);
  impl_->know(e.key);
  return "";
}

bool Store::read_only() const { return impl_->read_only; }

size_t Store::clear() {
  if (impl_->read_only) return 0;
  const std::vector<StoreListing> all = list("");
  for (const StoreListing& l : all) discard(l.key);
  impl_->enqueue({detail::Change::ForgetEvictions, "", ""});
  return all.size();
}

}  // namespace kiln::cache
