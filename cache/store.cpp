// The RocksDB level of the executable cache (see include/cache/kiln/store.h).
#include "kiln/store.h"

#include <fcntl.h>
#include <rocksdb/db.h>
#include <rocksdb/env.h>
#include <rocksdb/options.h>
#include <rocksdb/write_batch.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <deque>
#include <filesystem>
#include <mutex>
#include <random>
#include <thread>

#include "kiln/cache_directory.h"
#include "kiln/entry_format.h"

namespace kiln::cache {
namespace {

// RocksDB's info LOG files would pile up in the cache directory (and a
// secondary needs a writable directory of its own for them): kiln logs what
// matters through KILN_LOG=cache instead.
class SilentLogger final : public rocksdb::Logger {
 public:
  using rocksdb::Logger::Logv;
  void Logv(const char*, va_list) override {}
};

rocksdb::Options base_options() {
  rocksdb::Options o;
  o.info_log = std::make_shared<SilentLogger>();
  o.compression = rocksdb::kLZ4Compression;  // objects are mostly zeros and relocations: ~2-3x
  o.max_open_files = -1;                     // a secondary must keep every file open
  o.keep_log_file_num = 1;
  return o;
}

// Keys are the 16 bytes of the 128-bit key, high word first, so that the
// store's order is the hex order `list` prints.
std::string db_key(const Key& k) {
  std::string s(16, '\0');
  for (int i = 0; i < 8; ++i) {
    s[i] = static_cast<char>(k.high >> (56 - 8 * i));
    s[8 + i] = static_cast<char>(k.low >> (56 - 8 * i));
  }
  return s;
}

Key key_of(std::string_view s) {
  Key k;
  for (int i = 0; i < 8; ++i) {
    k.high = (k.high << 8) | static_cast<uint8_t>(s[i]);
    k.low = (k.low << 8) | static_cast<uint8_t>(s[8 + i]);
  }
  return k;
}

// The marker's modification time in nanoseconds; 0 when it does not exist.
int64_t mtime_ns(const std::string& path) {
  struct stat st{};
  if (::stat(path.c_str(), &st) != 0) return 0;
  return static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
}

bool lock_is_held_elsewhere(const rocksdb::Status& s) {
  return s.IsIOError() && s.ToString().find("lock") != std::string::npos;
}

}  // namespace

struct Store::Impl {
  std::string dir, db_path, marker_path, reader_path;
  bool read_only = false;

  // ---- reading (any thread)
  std::mutex read_mu;
  rocksdb::DB* reader = nullptr;  // the secondary instance; null until the database exists
  int64_t caught_up_to = -1;      // marker time of the last open or catch-up

  // ---- writing (the background writer)
  struct Pending {
    std::string key, value;  // value empty: a deletion
  };
  std::mutex write_mu;
  std::condition_variable wake, drained;
  std::deque<Pending> queue;
  size_t in_flight = 0;  // taken from the queue, not yet written
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
    delete reader;
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
      // The secondary's own directory (RocksDB requires one; SilentLogger
      // keeps it empty): private to this process, removed at exit.
      std::error_code ec;
      std::string path = (std::filesystem::temp_directory_path(ec) / "kiln-reader-XXXXXX").string();
      if (::mkdtemp(path.data()) == nullptr) return nullptr;
      reader_path = path;
    }
    rocksdb::DB* db = nullptr;
    if (rocksdb::DB::OpenAsSecondary(base_options(), db_path, reader_path, &db).ok()) {
      reader = db;
      caught_up_to = marker;
    }
    return reader;
  }

  // OK with the value, NotFound, or what RocksDB met instead (its own block
  // checksums catch a flipped byte on disk: Corruption).
  rocksdb::Status read(const std::string& key, std::string& value) {
    std::lock_guard<std::mutex> lock(read_mu);
    rocksdb::DB* db = ensure_reader();
    if (!db) return rocksdb::Status::NotFound();
    rocksdb::Status s = db->Get(rocksdb::ReadOptions(), key, &value);
    if (!s.IsNotFound()) return s;
    const int64_t marker = mtime_ns(marker_path);
    if (marker == caught_up_to) return s;  // nothing written since we last looked
    caught_up_to = marker;                 // before catching up: a later write moves it again
    if (!db->TryCatchUpWithPrimary().ok()) {
      delete reader;  // files it knew were compacted away: reopened at the next lookup
      reader = nullptr;
      return rocksdb::Status::NotFound();
    }
    return db->Get(rocksdb::ReadOptions(), key, &value);
  }

  void enqueue(Pending p) {
    {
      std::lock_guard<std::mutex> lock(write_mu);
      if (writes_failed || stopping) return;
      queue.push_back(std::move(p));
    }
    wake.notify_one();
  }

  // Opens the database read-write, retrying while another process holds it.
  // Returns null (and the status) for any other failure.
  rocksdb::DB* open_for_writing(rocksdb::Status& status) {
    std::minstd_rand jitter(static_cast<unsigned>(::getpid()));
    for (int attempt = 0;; ++attempt) {
      rocksdb::Options o = base_options();
      o.create_if_missing = true;
      rocksdb::DB* db = nullptr;
      status = rocksdb::DB::Open(o, db_path, &db);
      if (status.ok()) return db;
      if (!lock_is_held_elsewhere(status)) return nullptr;
      {
        std::unique_lock<std::mutex> lock(write_mu);
        if (stopping && attempt >= 200) return nullptr;  // ~2-4 s at exit: give up, lose the batch
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5 + jitter() % 15));
    }
  }

  void write_loop() {
    for (;;) {
      std::vector<Pending> batch;
      {
        std::unique_lock<std::mutex> lock(write_mu);
        wake.wait(lock, [&] { return stopping || !queue.empty(); });
        if (queue.empty()) return;  // stopping, nothing left
        // Gather what arrives within a moment: one open per burst of compiles.
        if (!stopping) wake.wait_for(lock, std::chrono::milliseconds(20), [&] { return stopping; });
        batch.assign(std::make_move_iterator(queue.begin()), std::make_move_iterator(queue.end()));
        queue.clear();
        in_flight = batch.size();
      }
      std::string failure = write_batch(batch);
      {
        std::lock_guard<std::mutex> lock(write_mu);
        in_flight = 0;
        if (!failure.empty()) {
          writes_failed = true;
          queue.clear();
          warning = "kiln: the executable cache in '" + dir + "' could not be written (" + failure +
                    "); this process goes on with its in-memory cache only";
          has_warning.store(true, std::memory_order_release);
        }
      }
      drained.notify_all();
    }
  }

  std::string write_batch(const std::vector<Pending>& batch) {
    std::string failure = try_write_batch(batch);
    if (failure.rfind("Corruption", 0) != 0) return failure;
    // A database RocksDB finds corrupt (a damaged file) would fail every
    // write and compaction from now on: it is moved aside, and the batch
    // goes into a new one. Readers move over at their next catch-up.
    const std::string aside =
        db_path + ".corrupt-" + std::to_string(std::time(nullptr)) + "-" + std::to_string(::getpid());
    std::error_code ec;
    std::filesystem::rename(db_path, aside, ec);
    if (ec) return failure + "; moving it aside failed: " + ec.message();
    ::mkdir(db_path.c_str(), 0700);
    {
      std::lock_guard<std::mutex> lock(write_mu);
      warning = "kiln: the executable cache database in '" + db_path + "' was corrupt (" + failure +
                "); it was moved to '" + aside + "' and a new one started";
      has_warning.store(true, std::memory_order_release);
    }
    return try_write_batch(batch);
  }

  std::string try_write_batch(const std::vector<Pending>& batch) {
    rocksdb::Status s;
    rocksdb::DB* db = open_for_writing(s);
    if (!db) return s.ToString();
    rocksdb::WriteBatch wb;
    for (const Pending& p : batch) {
      if (p.value.empty()) {
        wb.Delete(p.key);
      } else {
        wb.Put(p.key, p.value);
      }
    }
    rocksdb::WriteOptions wo;
    wo.sync = true;  // an entry a reader was told about survives a power loss too
    s = db->Write(wo, &wb);
    const rocksdb::Status closed = db->Close();
    delete db;
    if (!s.ok()) return s.ToString();
    if (!closed.ok()) return closed.ToString();
    touch_marker();
    return "";
  }

  void touch_marker() {
    if (FILE* f = std::fopen(marker_path.c_str(), "a")) std::fclose(f);
    ::utimensat(AT_FDCWD, marker_path.c_str(), nullptr, 0);
  }
};

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
  if (!options.read_only) raw->writer = std::thread([raw] { raw->write_loop(); });
  return std::unique_ptr<Store>(new Store(std::move(impl)));
}

Store::Store(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Store::~Store() = default;

const std::string& Store::dir() const { return impl_->dir; }

StoreLookupResult Store::get(const Key& key, std::string_view fingerprint) {
  StoreLookupResult r;
  std::string value;
  const rocksdb::Status s = impl_->read(db_key(key), value);
  if (s.IsNotFound()) return r;
  StoredEntry e;
  r.problem = s.ok() ? decode_entry(value, e) : s.ToString();
  if (r.problem.empty() && !(e.key == key)) r.problem = "stored under another key";
  if (r.problem.empty() && e.fingerprint != fingerprint) r.problem = "built for another environment";
  if (!r.problem.empty()) {
    r.outcome = Lookup::Corrupt;
    discard(key);
    return r;
  }
  r.outcome = Lookup::Hit;
  r.object = std::move(e.object);
  r.compile_ms = e.compile_ms;
  return r;
}

void Store::put(const Key& key, std::string_view fingerprint, std::string object, double compile_ms) {
  if (impl_->read_only) return;
  StoredEntry e;
  e.key = key;
  e.fingerprint.assign(fingerprint);
  e.object = std::move(object);
  e.compile_ms = compile_ms;
  e.written_unix_s = static_cast<int64_t>(std::time(nullptr));
  impl_->enqueue({db_key(key), encode_entry(e)});
}

void Store::discard(const Key& key) {
  if (!impl_->read_only) impl_->enqueue({db_key(key), ""});
}

bool Store::flush(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(impl_->write_mu);
  return impl_->drained.wait_for(lock, timeout, [&] { return impl_->queue.empty() && impl_->in_flight == 0; });
}

std::string Store::take_warning() {
  if (!impl_->has_warning.load(std::memory_order_acquire)) return "";  // once per flush: no lock
  std::lock_guard<std::mutex> lock(impl_->write_mu);
  impl_->has_warning.store(false, std::memory_order_relaxed);
  return std::exchange(impl_->warning, "");
}

std::vector<StoreListing> Store::list(std::string_view fingerprint) {
  std::vector<StoreListing> out;
  std::lock_guard<std::mutex> lock(impl_->read_mu);
  rocksdb::DB* db = impl_->ensure_reader();
  if (!db) return out;
  db->TryCatchUpWithPrimary();
  std::unique_ptr<rocksdb::Iterator> it(db->NewIterator(rocksdb::ReadOptions()));
  for (it->SeekToFirst(); it->Valid(); it->Next()) {
    StoreListing l;
    const rocksdb::Slice k = it->key(), v = it->value();
    l.bytes = v.size();
    if (k.size() != 16) {
      l.problem = "a key of " + std::to_string(k.size()) + " bytes, not 16";
      out.push_back(std::move(l));
      continue;
    }
    l.key = key_of(std::string_view(k.data(), k.size()));
    StoredEntry e;
    l.problem = decode_entry(std::string_view(v.data(), v.size()), e);
    if (l.problem.empty() && !(e.key == l.key)) l.problem = "stored under another key";
    if (l.problem.empty() && e.fingerprint != fingerprint) l.problem = "built for another environment";
    l.written_unix_s = e.written_unix_s;
    l.compile_ms = e.compile_ms;
    out.push_back(std::move(l));
  }
  return out;
}

size_t Store::clear() {
  if (impl_->read_only) return 0;
  const std::vector<StoreListing> all = list("");
  for (const StoreListing& l : all) discard(l.key);
  return all.size();
}

}  // namespace kiln::cache
