// The persistent store: entry format checks, directory safety rules, and the
// store itself (written by one opener, read by another as a second process
// would). No torch, no LLVM: objects are opaque bytes here.
#include <gtest/gtest.h>
#include <rocksdb/db.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>

#include <xxhash.h>

#include "kiln/cache_directory.h"
#include "kiln/entry_format.h"
#include "kiln/store.h"
#include "store_test_support.h"

using namespace kiln;
using kiln::test_support::open_store;
using kiln::test_support::TempDir;
namespace fs = std::filesystem;

namespace {

cache::StoredEntry sample_entry() {
  cache::StoredEntry e;
  e.key = cache::make_key("kernel", "fp");
  e.kernel = cache::kernel_identity("kernel");
  e.fingerprint = "kiln-codegen-7;llvm=19.1.7;cpu=znver4";
  e.object = std::string(
                 "\x7f"
                 "ELF object bytes",
                 17) +
             std::string(300, '\0');
  e.compile_ms = 12.5;
  e.written_unix_s = 1764700000;
  return e;
}

}  // namespace

TEST(EntryFormat, RoundTripsEveryField) {
  const cache::StoredEntry e = sample_entry();
  cache::StoredEntry back;
  EXPECT_EQ(cache::decode_entry(cache::encode_entry(e), back), "");
  EXPECT_EQ(back.key, e.key);
  EXPECT_EQ(back.kernel, e.kernel);
  EXPECT_EQ(back.fingerprint, e.fingerprint);
  EXPECT_EQ(back.object, e.object);
  EXPECT_EQ(back.compile_ms, e.compile_ms);
  EXPECT_EQ(back.written_unix_s, e.written_unix_s);
}

// An entry of format 1 (an older kiln's: no kernel identity) still reads.
TEST(EntryFormat, AnEntryOfFormatOneStillReads) {
  cache::StoredEntry e = sample_entry();
  std::string v2 = cache::encode_entry(e);
  // Format 1: the same fields without the 16 bytes of kernel identity after
  // the key (at 32), with its own checksum.
  std::string v1 = v2.substr(0, 32) + v2.substr(48, v2.size() - 48 - 8);
  v1[8] = 1;
  const uint64_t sum = XXH3_64bits(v1.data(), v1.size());
  v1.append(reinterpret_cast<const char*>(&sum), 8);
  cache::StoredEntry back;
  ASSERT_EQ(cache::decode_entry(v1, back), "");
  EXPECT_EQ(back.key, e.key);
  EXPECT_EQ(back.kernel, cache::Key{});
  EXPECT_EQ(back.object, e.object);
  EXPECT_EQ(back.compile_ms, e.compile_ms);
  EXPECT_EQ(back.written_unix_s, e.written_unix_s);
}

TEST(EntryFormat, EveryFlippedByteIsCaught) {
  const std::string bytes = cache::encode_entry(sample_entry());
  for (size_t i = 0; i < bytes.size(); ++i) {
    std::string bad = bytes;
    bad[i] ^= 0x10;
    cache::StoredEntry out;
    EXPECT_NE(cache::decode_entry(bad, out), "") << "a flip at byte " << i << " went unnoticed";
  }
}

TEST(EntryFormat, TruncatedAndForeignValuesAreRefused) {
  const std::string bytes = cache::encode_entry(sample_entry());
  cache::StoredEntry out;
  for (size_t n : {size_t{0}, size_t{7}, size_t{60}, bytes.size() - 1})
    EXPECT_NE(cache::decode_entry(std::string_view(bytes).substr(0, n), out), "") << n << " bytes";
  EXPECT_NE(cache::decode_entry(bytes + "x", out), "");
  std::string other_version = bytes;
  other_version[8] = static_cast<char>(cache::kEntryFormatVersion + 1);
  EXPECT_NE(cache::decode_entry(other_version, out).find("entry format"), std::string::npos);
}

TEST(CacheDirectory, IsCreatedPrivate) {
  TempDir t;
  const std::string dir = t.path + "/a/b/kiln";
  EXPECT_EQ(cache::prepare_private_directory(dir, true), "");
  struct stat st{};
  ASSERT_EQ(::stat(dir.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  EXPECT_NE(cache::prepare_private_directory(t.path + "/missing", false), "");
}

TEST(CacheDirectory, OneOthersCanWriteIsRefused) {
  TempDir t;
  ASSERT_EQ(::chmod(t.path.c_str(), 0777), 0);
  const std::string why = cache::prepare_private_directory(t.path, true);
  EXPECT_NE(why.find("writable by other users (mode 0777)"), std::string::npos) << why;
  ASSERT_EQ(::chmod(t.path.c_str(), 0720), 0);
  EXPECT_NE(cache::prepare_private_directory(t.path, true), "");
}

TEST(CacheDirectory, OneAnotherUserOwnsIsRefused) {
  if (::geteuid() != 0) GTEST_SKIP() << "giving a directory to another user needs root";
  TempDir t;
  ASSERT_EQ(::chown(t.path.c_str(), 65534, 65534), 0);
  const std::string why = cache::prepare_private_directory(t.path, true);
  EXPECT_NE(why.find("is owned by user 65534"), std::string::npos) << why;
}

TEST(CacheDirectory, AFileOrAnUncreatablePathIsRefused) {
  TempDir t;
  const std::string file = t.path + "/file";
  std::fclose(std::fopen(file.c_str(), "w"));
  EXPECT_NE(cache::prepare_private_directory(file, true).find("is not a directory"), std::string::npos);
  EXPECT_NE(cache::prepare_private_directory(file + "/kiln", true).find("cannot be"), std::string::npos);
}

TEST(Store, AnEntryWrittenByOneOpenerIsAHitForAnother) {
  TempDir t;
  const cache::Key key = cache::make_key("kernel", "fp");
  auto writer = open_store(t.path);
  auto reader = open_store(t.path);  // opened before the write, as a second process would be
  ASSERT_TRUE(writer && reader);
  EXPECT_EQ(reader->get(key, "fp").outcome, cache::Lookup::Absent);
  writer->put(key, "fp", "object bytes", 3.5);
  ASSERT_TRUE(writer->flush(std::chrono::seconds(10)));
  const cache::StoreLookupResult r = reader->get(key, "fp");
  EXPECT_EQ(r.outcome, cache::Lookup::Hit);
  EXPECT_EQ(r.object, "object bytes");
  EXPECT_EQ(r.compile_ms, 3.5);
  EXPECT_EQ(open_store(t.path)->get(key, "fp").outcome, cache::Lookup::Hit);  // and for a later opener
}

TEST(Store, AnEntryForAnotherFingerprintIsNeverAHit) {
  TempDir t;
  const cache::Key key = cache::make_key("kernel", "fp");
  auto s = open_store(t.path);
  s->put(key, "fp-of-another-cpu", "object", 1);
  ASSERT_TRUE(s->flush(std::chrono::seconds(10)));
  const cache::StoreLookupResult r = s->get(key, "fp");
  EXPECT_EQ(r.outcome, cache::Lookup::Corrupt);
  EXPECT_NE(r.problem.find("another environment"), std::string::npos);
  ASSERT_TRUE(s->flush(std::chrono::seconds(10)));  // the bad entry's deletion
  EXPECT_EQ(open_store(t.path)->get(key, "fp").outcome, cache::Lookup::Absent);
}

TEST(Store, ReadOnlyNeverWrites) {
  TempDir t;
  const cache::Key key = cache::make_key("kernel", "fp");
  {
    auto s = open_store(t.path);
    s->put(key, "fp", "object", 1);
    ASSERT_TRUE(s->flush(std::chrono::seconds(10)));
  }
  auto ro = open_store(t.path, true);
  ASSERT_TRUE(ro);
  EXPECT_EQ(ro->get(key, "fp").outcome, cache::Lookup::Hit);
  ro->put(cache::make_key("other", "fp"), "fp", "object", 1);
  EXPECT_EQ(ro->clear(), 0u);
  EXPECT_TRUE(ro->flush(std::chrono::seconds(1)));
  EXPECT_EQ(open_store(t.path)->list("fp").size(), 1u);
}

TEST(Store, ListChecksEveryEntryAndClearEmptiesIt) {
  TempDir t;
  auto s = open_store(t.path);
  for (int i = 0; i < 5; ++i) s->put(cache::make_key("k" + std::to_string(i), "fp"), i < 4 ? "fp" : "old", "o", i);
  ASSERT_TRUE(s->flush(std::chrono::seconds(10)));
  const std::vector<cache::StoreListing> all = s->list("fp");
  ASSERT_EQ(all.size(), 5u);
  int bad = 0;
  for (const auto& l : all) bad += !l.problem.empty();
  EXPECT_EQ(bad, 1);
  EXPECT_EQ(s->clear(), 5u);
  ASSERT_TRUE(s->flush(std::chrono::seconds(10)));
  EXPECT_EQ(s->list("fp").size(), 0u);
}

TEST(Store, AReadOnlyStoreOfAMissingDirectoryIsRefused) {
  TempDir t;
  std::string why;
  EXPECT_FALSE(cache::Store::open({t.path + "/none", true}, why));
  EXPECT_NE(why.find("does not exist"), std::string::npos) << why;
}

namespace {

// Flips a run of bytes in the data blocks of the largest table file (one of
// entries, not of the small LRU records), or of every table file, as a
// failing disk would.
void corrupt_tables(const std::string& db, bool every_table) {
  std::vector<fs::path> tables;
  for (const auto& f : fs::directory_iterator(db))
    if (f.path().extension() == ".sst") tables.push_back(f.path());
  ASSERT_GE(tables.size(), 2u);
  std::sort(tables.begin(), tables.end(), [](auto& a, auto& b) { return fs::file_size(a) > fs::file_size(b); });
  if (!every_table) tables.resize(1);
  for (const fs::path& f : tables) {
    std::string bytes;
    {
      std::FILE* in = std::fopen(f.c_str(), "rb");
      ASSERT_TRUE(in);
      char buf[4096];
      for (size_t n; (n = std::fread(buf, 1, sizeof buf, in)) > 0;) bytes.append(buf, n);
      std::fclose(in);
    }
    for (size_t i = bytes.size() / 4; i < bytes.size() / 2; i += 97) bytes[i] ^= 0x5A;
    std::FILE* out = std::fopen(f.c_str(), "wb");
    ASSERT_TRUE(out);
    std::fwrite(bytes.data(), 1, bytes.size(), out);
    std::fclose(out);
  }
}

}  // namespace

// A damaged table: the database is rebuilt from what reads back whole, so the
// entries of intact tables, the intact blocks of the damaged one, and what is
// stored after the damage all survive (moving the database aside lost them,
// and the run after the recompiling one compiled again).
TEST(Store, ADamagedTableIsRebuiltKeepingEveryEntryThatReadsBack) {
  TempDir t;
  const int n = 12;
  auto key = [](int i) { return cache::make_key("kernel" + std::to_string(i), "fp"); };
  std::string object(4000, '\0');  // incompressible, so that a table file is mostly data blocks
  uint32_t x = 12345;
  for (char& c : object) c = static_cast<char>((x = x * 1664525 + 1013904223) >> 24);
  {
    auto s = open_store(t.path);
    for (int i = 0; i < n; ++i) {
      s->put(key(i), "fp", object + std::to_string(i), 1);
      if (i % 4 == 3) ASSERT_TRUE(s->flush(std::chrono::seconds(10)));  // one table file per batch
    }
  }
  corrupt_tables(t.path + "/store", false);
  {
    auto s = open_store(t.path);
    for (int i = 0; i < n; ++i) {
      if (s->get(key(i), "fp").outcome == cache::Lookup::Hit) continue;
      s->put(key(i), "fp", object + std::to_string(i), 1);  // as a recompile would
      ASSERT_TRUE(s->flush(std::chrono::seconds(10)));      // a batch each: table files pile up
    }
    const std::string warning = s->take_warning();
    EXPECT_NE(warning.find("was damaged"), std::string::npos) << warning;
    EXPECT_NE(warning.find("rebuilt with the"), std::string::npos) << warning;
  }
  EXPECT_FALSE(fs::exists(t.path + "/store.damaged-" + std::to_string(::getpid())));
  auto s = open_store(t.path);
  for (int i = 0; i < n; ++i) {
    const cache::StoreLookupResult r = s->get(key(i), "fp");
    EXPECT_EQ(r.outcome, cache::Lookup::Hit) << "kernel " << i << ": " << r.problem;
    if (r.outcome == cache::Lookup::Hit) EXPECT_EQ(r.object, object + std::to_string(i));
  }
}

// Every table damaged, the small one listing the entries too: the listings
// stop at their first damaged block, yet the entries this process read whole
// past it are kept (they were lost, and the next run compiled them again).
TEST(Store, AnEntryReadWholePastADamagedBlockSurvivesTheRebuild) {
  TempDir t;
  const int n = 12;
  auto key = [](int i) { return cache::make_key("kernel" + std::to_string(i), "fp"); };
  std::string object(4000, '\0');
  uint32_t x = 54321;
  for (char& c : object) c = static_cast<char>((x = x * 1664525 + 1013904223) >> 24);
  {
    auto s = open_store(t.path);
    for (int i = 0; i < n; ++i) s->put(key(i), "fp", object + std::to_string(i), 1);
    ASSERT_TRUE(s->flush(std::chrono::seconds(10)));
    // A second writer session: the first batch is in table files now, one of
    // entries and one listing them.
    s->put(key(n), "fp", "o", 1);
    ASSERT_TRUE(s->flush(std::chrono::seconds(10)));
  }
  corrupt_tables(t.path + "/store", true);
  int read_whole = 0;
  {
    auto s = open_store(t.path);
    for (int i = 0; i < n; ++i) {
      if (s->get(key(i), "fp").outcome == cache::Lookup::Hit) {
        ++read_whole;
        continue;
      }
      s->put(key(i), "fp", object + std::to_string(i), 1);  // as a recompile would
    }
    ASSERT_TRUE(s->flush(std::chrono::seconds(10)));
    EXPECT_NE(s->take_warning().find("rebuilt with the"), std::string::npos);
  }
  ASSERT_GT(read_whole, 0);
  ASSERT_LT(read_whole, n);  // the damage hit entries
  auto s = open_store(t.path);
  for (int i = 0; i < n; ++i) EXPECT_EQ(s->get(key(i), "fp").outcome, cache::Lookup::Hit) << "kernel " << i;
}

// A cap: the least recently used entries go, an entry read since is kept,
// and the store's entry bytes stay within the cap.
TEST(Store, PastItsCapTheLeastRecentlyUsedEntriesAreEvicted) {
  TempDir t;
  const uint64_t cap = 20000;
  auto key = [](int i) { return cache::make_key("kernel" + std::to_string(i), "fp"); };
  const std::string object(1000, 'o');  // about 1.1 KB an entry with its header
  std::string why;
  auto s = cache::Store::open({t.path, false, cap}, why);
  ASSERT_TRUE(s) << why;
  for (int i = 0; i < 10; ++i) {
    s->put(key(i), "fp", object, 1);
    ASSERT_TRUE(s->flush(std::chrono::seconds(10)));  // a batch each: key 0 is the oldest
  }
  {
    auto other = open_store(t.path, false, cap);                      // another process's use
    EXPECT_EQ(other->get(key(0), "fp").outcome, cache::Lookup::Hit);  // now the most recently used
    ASSERT_TRUE(other->flush(std::chrono::seconds(10)));
  }
  for (int i = 10; i < 20; ++i) s->put(key(i), "fp", object, 1);  // a little past the cap
  ASSERT_TRUE(s->flush(std::chrono::seconds(10)));
  const uint64_t evicted = s->counters().evicted;
  EXPECT_GT(evicted, 0u);
  {
    // A reader opened now (this process's secondary may still see what it
    // saw when it opened: RocksDB keeps the files it holds open).
    auto reader = open_store(t.path, /*read_only=*/true);
    EXPECT_EQ(reader->get(key(0), "fp").outcome, cache::Lookup::Hit);  // read since: kept
    uint64_t first_batch_left = 0;                                     // the oldest unused went first
    for (int i = 1; i < 10; ++i) first_batch_left += reader->get(key(i), "fp").outcome == cache::Lookup::Hit;
    EXPECT_EQ(first_batch_left, 9 - evicted);
    for (int i = 10; i < 20; ++i) EXPECT_EQ(reader->get(key(i), "fp").outcome, cache::Lookup::Hit) << i;
  }
  for (int i = 20; i < 60; ++i) {  // three times the cap in all
    s->put(key(i), "fp", object, 1);
    if (i % 5 == 0) ASSERT_TRUE(s->flush(std::chrono::seconds(10)));
  }
  ASSERT_TRUE(s->flush(std::chrono::seconds(10)));
  const std::vector<cache::StoreListing> all = s->list("fp");
  uint64_t bytes = 0;
  for (const auto& l : all) bytes += l.bytes;
  EXPECT_LE(bytes, cap);
  EXPECT_GE(bytes, cap - 2 * (object.size() + 200));  // evicted no more than it had to
  EXPECT_EQ(s->counters().evicted, 60 - all.size());
  EXPECT_EQ(open_store(t.path, true)->get(key(59), "fp").outcome, cache::Lookup::Hit);  // the newest
}

// A store written before the LRU accounting existed (entries only) gets its
// accounting from its entries at the first write, and the cap holds.
TEST(Store, AStoreWithoutAccountingIsAccountedAtTheFirstWrite) {
  TempDir t;
  {
    rocksdb::Options o;
    o.create_if_missing = true;
    rocksdb::DB* db = nullptr;
    ASSERT_TRUE(rocksdb::DB::Open(o, t.path + "/store", &db).ok());
    for (int i = 0; i < 10; ++i) {
      cache::StoredEntry e;
      e.key = cache::make_key("old" + std::to_string(i), "fp");
      e.fingerprint = "fp";
      e.object = std::string(1000, 'o');
      e.written_unix_s = 1000 + i;
      std::string k(16, '\0');
      for (int b = 0; b < 8; ++b) {
        k[b] = static_cast<char>(e.key.high >> (56 - 8 * b));
        k[8 + b] = static_cast<char>(e.key.low >> (56 - 8 * b));
      }
      ASSERT_TRUE(db->Put(rocksdb::WriteOptions(), k, cache::encode_entry(e)).ok());
    }
    delete db;
    std::fclose(std::fopen((t.path + "/store.written").c_str(), "w"));
  }
  std::string why;
  auto s = cache::Store::open({t.path, false, 6000}, why);
  ASSERT_TRUE(s) << why;
  s->put(cache::make_key("new", "fp"), "fp", std::string(1000, 'n'), 1);
  ASSERT_TRUE(s->flush(std::chrono::seconds(10)));
  EXPECT_EQ(s->list("fp").size(), 5u);  // 11 entries of ~1.1 KB in 6000 bytes
  auto reader = open_store(t.path, true);
  EXPECT_EQ(reader->get(cache::make_key("old0", "fp"), "fp").outcome, cache::Lookup::Absent);  // the oldest written
  EXPECT_EQ(reader->get(cache::make_key("new", "fp"), "fp").outcome, cache::Lookup::Hit);
}

// A kernel a process keeps using from memory is touched in the store (at most
// once a second), so another process's new entries evict older ones first.
TEST(Store, AUseFromMemoryKeepsAnEntryRecent) {
  TempDir t;
  const uint64_t cap = 12000;
  auto key = [](int i) { return cache::make_key("kernel" + std::to_string(i), "fp"); };
  const std::string object(1000, 'o');
  auto s = open_store(t.path, false, cap);
  for (int i = 0; i < 10; ++i) {
    s->put(key(i), "fp", object, 1);
    ASSERT_TRUE(s->flush(std::chrono::seconds(10)));  // a batch each: key 0 is the oldest
  }
  s->touch(key(9));  // within a second of its put: no touch queued
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));
  s->touch(key(0));
  s->touch(key(0));  // once per interval
  ASSERT_TRUE(s->flush(std::chrono::seconds(10)));
  auto other = open_store(t.path, false, cap);
  for (int i = 10; i < 13; ++i) other->put(key(i), "fp", object, 1);
  ASSERT_TRUE(other->flush(std::chrono::seconds(10)));
  auto reader = open_store(t.path, true);
  EXPECT_EQ(reader->get(key(0), "fp").outcome, cache::Lookup::Hit);
  int first_batch_left = 0;
  for (int i = 1; i < 10; ++i) first_batch_left += reader->get(key(i), "fp").outcome == cache::Lookup::Hit;
  EXPECT_EQ(first_batch_left, 9 - static_cast<int>(other->counters().evicted));
  EXPECT_GT(other->counters().evicted, 0u);
}
