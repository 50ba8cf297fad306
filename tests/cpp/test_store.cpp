// The persistent store: entry format checks, directory safety rules, and the
// store itself (written by one opener, read by another as a second process
// would). No torch, no LLVM: objects are opaque bytes here.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "kiln/cache_directory.h"
#include "kiln/entry_format.h"
#include "kiln/store.h"

using namespace kiln;
namespace fs = std::filesystem;

namespace {

cache::StoredEntry sample_entry() {
  cache::StoredEntry e;
  e.key = cache::make_key("kernel", "fp");
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

// A fresh private directory, removed at the end of the test.
struct TempDir {
  std::string path;
  TempDir() {
    std::string t = (fs::temp_directory_path() / "kiln-store-test-XXXXXX").string();
    path = ::mkdtemp(t.data());
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

std::unique_ptr<cache::Store> open_store(const std::string& dir, bool read_only = false) {
  std::string why;
  auto s = cache::Store::open({dir, read_only}, why);
  EXPECT_TRUE(s) << why;
  return s;
}

}  // namespace

TEST(EntryFormat, RoundTripsEveryField) {
  const cache::StoredEntry e = sample_entry();
  cache::StoredEntry back;
  EXPECT_EQ(cache::decode_entry(cache::encode_entry(e), back), "");
  EXPECT_EQ(back.key, e.key);
  EXPECT_EQ(back.fingerprint, e.fingerprint);
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
