// The record files (include/cache/kiln/record_file.h): what a warm start
// trusts (to skip eager's argument checks, to reserve device memory) must be
// exactly what was written, for this kind and identity, or nothing at all.
// No torch, no LLVM.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "kiln/record_file.h"
#include "store_test_support.h"

using namespace kiln;
using kiln::test_support::TempDir;

namespace {

std::vector<cache::Record> sample() {
  std::vector<cache::Record> r;
  for (uint64_t i = 0; i < 50; ++i) r.push_back({0x1234567890abcdefull ^ i, i * 7919});
  return r;
}

}  // namespace

TEST(RecordFile, RoundTripsThroughTheFile) {
  TempDir t;
  const std::string path = cache::record_file_path(t.path, cache::kRecordVerdicts, "dispatch=abc;torch=2.13.0");
  EXPECT_NE(path.find("/verdicts-"), std::string::npos);
  EXPECT_NE(path, cache::record_file_path(t.path, cache::kRecordVerdicts,
                                          "dispatch=abd;torch=2.13.0"));  // one file per identity
  ASSERT_EQ(cache::write_records(path, cache::kRecordVerdicts, "dispatch=abc;torch=2.13.0", sample()), "");
  struct stat st;
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  std::string problem;
  EXPECT_EQ(cache::read_records(path, cache::kRecordVerdicts, "dispatch=abc;torch=2.13.0", problem), sample());
  EXPECT_EQ(problem, "");
}

TEST(RecordFile, AMissingFileIsEmptyAndNoProblem) {
  TempDir t;
  std::string problem = "stale";
  EXPECT_TRUE(cache::read_records(t.path + "/none.bin", cache::kRecordVerdicts, "id", problem).empty());
  EXPECT_EQ(problem, "");
}

TEST(RecordFile, EveryFlippedByteAndEveryTruncationIsRefusedWhole) {
  const std::string bytes = cache::encode_records(cache::kRecordVerdicts, "id", sample());
  std::vector<cache::Record> out;
  for (size_t i = 0; i < bytes.size(); ++i) {
    std::string bad = bytes;
    bad[i] ^= 0x01;
    EXPECT_NE(cache::decode_records(cache::kRecordVerdicts, bad, "id", out), "") << "byte " << i;
    EXPECT_TRUE(out.empty());
  }
  for (size_t n = 0; n < bytes.size(); n += 7) {
    EXPECT_NE(cache::decode_records(cache::kRecordVerdicts, bytes.substr(0, n), "id", out), "")
        << "first " << n << " bytes";
  }
  EXPECT_EQ(cache::decode_records(cache::kRecordVerdicts, bytes, "id", out), "");
  EXPECT_EQ(out.size(), 50u);
}

TEST(RecordFile, AnotherIdentitysFileIsRefused) {
  std::vector<cache::Record> out;
  const std::string problem = cache::decode_records(
      cache::kRecordVerdicts, cache::encode_records(cache::kRecordVerdicts, "torch=2.12.0", sample()), "torch=2.13.0",
      out);
  EXPECT_NE(problem.find("another identity"), std::string::npos) << problem;
  EXPECT_TRUE(out.empty());
}

TEST(RecordFile, AWriteIntoAnUnwritableDirectoryFailsAndSaysWhy) {
  const std::string why = cache::write_records("/nonexistent-dir/verdicts.bin", cache::kRecordVerdicts, "id", sample());
  EXPECT_NE(why.find("temporary file"), std::string::npos) << why;
}

TEST(RecordFile, KindsHaveTheirOwnFilesAndRefuseEachOther) {
  TempDir t;
  EXPECT_NE(cache::record_file_path(t.path, cache::kRecordVerdicts, "id"),
            cache::record_file_path(t.path, cache::kRecordDeviceMemory, "id"));
  EXPECT_NE(cache::record_file_path(t.path, cache::kRecordDeviceMemory, "id").find("/memory-"), std::string::npos);
  std::vector<cache::Record> out;
  const std::string problem = cache::decode_records(
      cache::kRecordDeviceMemory, cache::encode_records(cache::kRecordVerdicts, "id", sample()), "id", out);
  EXPECT_NE(problem.find("bad magic"), std::string::npos) << problem;
  EXPECT_TRUE(out.empty());
}
