// `cache export|import|prune` and run statistics below the Python CLI: the
// export file format, moving entries between stores, pruning, and runs.log.
// No torch, no LLVM: objects are opaque bytes here.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "kiln/entry_format.h"
#include "kiln/export_file.h"
#include "kiln/run_log.h"
#include "kiln/store.h"
#include "store_test_support.h"

using namespace kiln;
using kiln::test_support::open_store;
using kiln::test_support::TempDir;

namespace {

std::string entry(const std::string& kernel, const std::string& fingerprint, size_t object_bytes = 40) {
  cache::StoredEntry e;
  e.key = cache::make_key(kernel, fingerprint);
  e.fingerprint = fingerprint;
  e.object = std::string(object_bytes, 'o') + kernel;
  e.compile_ms = 3.5;
  e.written_unix_s = 1764700000;
  return cache::encode_entry(e);
}

std::vector<std::string> two_entries() { return {entry("a", "fp-here"), entry("b", "fp-here", 7)}; }

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

}  // namespace

TEST(ExportFile, RoundTripsTheEntriesByteForByte) {
  const std::vector<std::string> entries = two_entries();
  std::vector<std::string> back;
  EXPECT_EQ(cache::decode_export(cache::encode_export(entries), back), "");
  EXPECT_EQ(back, entries);
  EXPECT_EQ(cache::decode_export(cache::encode_export({}), back), "");
  EXPECT_TRUE(back.empty());
}

TEST(ExportFile, EveryFlippedByteIsCaught) {
  const std::string bytes = cache::encode_export(two_entries());
  for (size_t i = 0; i < bytes.size(); ++i) {
    std::string bad = bytes;
    bad[i] ^= 0x01;
    std::vector<std::string> out;
    EXPECT_NE(cache::decode_export(bad, out), "") << "a flip at byte " << i << " went unnoticed";
    EXPECT_TRUE(out.empty()) << "a damaged file yielded entries (flip at " << i << ")";
  }
}

TEST(ExportFile, EveryTruncationIsCaught) {
  const std::string bytes = cache::encode_export(two_entries());
  for (size_t n = 0; n < bytes.size(); ++n) {
    std::vector<std::string> out;
    EXPECT_NE(cache::decode_export(std::string_view(bytes).substr(0, n), out), "") << n << " bytes";
    EXPECT_TRUE(out.empty());
  }
  std::vector<std::string> out;
  EXPECT_NE(cache::decode_export(bytes + "x", out), "");
}

TEST(ExportFile, OtherFilesAndVersionsAreNamed) {
  std::vector<std::string> out;
  EXPECT_NE(cache::decode_export(std::string(64, 'z'), out).find("bad magic"), std::string::npos);
  std::string newer = cache::encode_export(two_entries());
  newer[8] = static_cast<char>(cache::kExportFormatVersion + 1);
  EXPECT_NE(cache::decode_export(newer, out).find("export format"), std::string::npos);
}

TEST(ExportFile, ForeignAndBadEntriesAreSortedOut) {
  std::string broken = entry("c", "fp-here");
  broken[broken.size() / 2] ^= 0x20;  // an entry damaged before it was exported: its own checksum fails
  const cache::ImportSelection s =
      cache::select_for_import({entry("a", "fp-here"), entry("x", "fp-elsewhere"), broken}, "fp-here");
  ASSERT_EQ(s.matching.size(), 1u);
  EXPECT_EQ(s.matching[0], entry("a", "fp-here"));
  EXPECT_EQ(s.foreign, 1u);
  EXPECT_EQ(s.bad, 1u);
}

TEST(ExportFile, IsWrittenWholeAndReadBack) {
  TempDir t;
  const std::string path = t.path + "/kernels.kiln";
  ASSERT_EQ(cache::write_export_file(path, two_entries()), "");
  std::vector<std::string> back;
  EXPECT_EQ(cache::read_export_file(path, back), "");
  EXPECT_EQ(back, two_entries());
  size_t files = 0;
  for (const auto& d : std::filesystem::directory_iterator(t.path)) files += d.is_regular_file();
  EXPECT_EQ(files, 1u) << "the temporary file was left behind";

  const std::string bytes = slurp(path);
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes.substr(0, bytes.size() - 3);
  EXPECT_NE(cache::read_export_file(path, back).find("is refused"), std::string::npos);
  EXPECT_TRUE(back.empty());
  EXPECT_NE(cache::read_export_file(t.path + "/missing", back).find("cannot read"), std::string::npos);
  EXPECT_NE(cache::write_export_file(t.path + "/no/such/dir/f", two_entries()), "");
}

TEST(StoreTooling, EntriesMoveBetweenStoresAsStored) {
  TempDir a, b;
  const cache::Key k1 = cache::make_key("k1", "fp-here"), k2 = cache::make_key("k2", "fp-elsewhere");
  {
    auto s = open_store(a.path);
    s->put(k1, "fp-here", "object one", 2.0);
    s->put(k2, "fp-elsewhere", "object two", 2.0);
    ASSERT_TRUE(s->flush(std::chrono::seconds(10)));
  }
  auto from = open_store(a.path);
  const std::vector<std::string> exported = from->encoded_entries("fp-here");
  ASSERT_EQ(exported.size(), 1u);  // the foreign entry is not exported
  auto to = open_store(b.path);
  EXPECT_EQ(to->put_encoded(exported[0]), "");
  EXPECT_NE(to->put_encoded("not an entry"), "");
  ASSERT_TRUE(to->flush(std::chrono::seconds(10)));
  auto reader = open_store(b.path, /*read_only=*/true);
  const cache::StoreLookupResult r = reader->get(k1, "fp-here");
  EXPECT_EQ(r.outcome, cache::Lookup::Hit);
  EXPECT_EQ(r.object, "object one");
  EXPECT_EQ(reader->list("fp-here").size(), 1u);
  EXPECT_NE(reader->put_encoded(exported[0]), "") << "a read-only store took an entry";
}

TEST(StoreTooling, PruneDeletesForeignEntriesAndKeepsTheRest) {
  TempDir t;
  {
    auto s = open_store(t.path);
    for (int i = 0; i < 3; ++i) s->put(cache::make_key("k" + std::to_string(i), "fp-here"), "fp-here", "obj", 1.0);
    s->put(cache::make_key("other", "fp-elsewhere"), "fp-elsewhere", "obj", 1.0);
    ASSERT_TRUE(s->flush(std::chrono::seconds(10)));
  }
  auto ro = open_store(t.path, /*read_only=*/true);
  EXPECT_EQ(ro->prune("fp-here").deleted, 0u) << "read-only mode pruned";
  auto s = open_store(t.path);
  const cache::Store::PruneResult r = s->prune("fp-here");
  EXPECT_EQ(r.deleted, 1u);
  EXPECT_EQ(r.kept, 3u);
  ASSERT_TRUE(s->flush(std::chrono::seconds(10)));
  const std::vector<cache::StoreListing> left = s->list("fp-here");
  ASSERT_EQ(left.size(), 3u);
  for (const cache::StoreListing& l : left) EXPECT_EQ(l.problem, "");
}

TEST(RunLog, AppendsPrivateLinesAndReadsThemBack) {
  TempDir t;
  ASSERT_EQ(cache::append_run(t.path, {100, 7, 3, 2, 2, 0}), "");
  ASSERT_EQ(cache::append_run(t.path, {101, 8, 5, 0, 0, 1}), "");
  struct stat st{};
  ASSERT_EQ(::stat(cache::run_log_path(t.path).c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  const std::vector<cache::RunRecord> runs = cache::read_runs(t.path);
  ASSERT_EQ(runs.size(), 2u);
  EXPECT_EQ(runs[0].unix_s, 100);
  EXPECT_EQ(runs[0].pid, 7);
  EXPECT_EQ(runs[0].hits, 3u);
  EXPECT_EQ(runs[0].misses, 2u);
  EXPECT_EQ(runs[0].compiles, 2u);
  EXPECT_EQ(runs[1].hits, 5u);
  EXPECT_EQ(runs[1].evicted, 1u);
  std::ofstream(cache::run_log_path(t.path), std::ios::app) << "t=garbage\n";  // a torn line is skipped
  EXPECT_EQ(cache::read_runs(t.path).size(), 2u);
  EXPECT_TRUE(cache::read_runs(t.path + "/none").empty());
}

TEST(RunLog, StaysBoundedKeepingTheNewest) {
  TempDir t;
  for (int i = 0; i < 25; ++i) ASSERT_EQ(cache::append_run(t.path, {1764700000 + i, i, 1, 0, 0, 0}, 10, 5), "");
  const std::vector<cache::RunRecord> runs = cache::read_runs(t.path);
  ASSERT_GE(runs.size(), 5u);
  ASSERT_LE(runs.size(), 10u);
  EXPECT_EQ(runs.back().pid, 24);
  for (size_t i = 1; i < runs.size(); ++i) EXPECT_EQ(runs[i].pid, runs[i - 1].pid + 1);
  struct stat st{};
  ASSERT_EQ(::stat(cache::run_log_path(t.path).c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
}
