// The verdict file (include/cache/kiln/verdict_file.h): what a warm start
// trusts to skip eager's argument checks must be exactly what was written,
// for this identity, or nothing at all. No torch, no LLVM.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "kiln/verdict_file.h"
#include "store_test_support.h"

using namespace kiln;
using kiln::test_support::TempDir;

namespace {

std::vector<cache::VerdictRecord> sample() {
  std::vector<cache::VerdictRecord> r;
  for (uint64_t i = 0; i < 50; ++i) r.push_back({0x1234567890abcdefull ^ i, i * 7919});
  return r;
}

}  // namespace

TEST(VerdictFile, RoundTripsThroughTheFile) {
  TempDir t;
  const std::string path = cache::verdict_file_path(t.path, "dispatch=abc;torch=2.13.0");
  EXPECT_NE(path.find("/verdicts-"), std::string::npos);
  EXPECT_NE(path, cache::verdict_file_path(t.path, "dispatch=abd;torch=2.13.0"));  // one file per identity
  ASSERT_EQ(cache::write_verdicts(path, "dispatch=abc;torch=2.13.0", sample()), "");
  struct stat st;
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  std::string problem;
  EXPECT_EQ(cache::read_verdicts(path, "dispatch=abc;torch=2.13.0", problem), sample());
  EXPECT_EQ(problem, "");
}

TEST(VerdictFile, AMissingFileIsEmptyAndNoProblem) {
  TempDir t;
  std::string problem = "stale";
  EXPECT_TRUE(cache::read_verdicts(t.path + "/none.bin", "id", problem).empty());
  EXPECT_EQ(problem, "");
}

TEST(VerdictFile, EveryFlippedByteAndEveryTruncationIsRefusedWhole) {
  const std::string bytes = cache::encode_verdicts("id", sample());
  std::vector<cache::VerdictRecord> out;
  for (size_t i = 0; i < bytes.size(); ++i) {
    std::string bad = bytes;
    bad[i] ^= 0x01;
    EXPECT_NE(cache::decode_verdicts(bad, "id", out), "") << "byte " << i;
    EXPECT_TRUE(out.empty());
  }
  for (size_t n = 0; n < bytes.size(); n += 7) {
    EXPECT_NE(cache::decode_verdicts(bytes.substr(0, n), "id", out), "") << "first " << n << " bytes";
  }
  EXPECT_EQ(cache::decode_verdicts(bytes, "id", out), "");
  EXPECT_EQ(out.size(), 50u);
}

TEST(VerdictFile, AnotherIdentitysFileIsRefused) {
  std::vector<cache::VerdictRecord> out;
  const std::string problem =
      cache::decode_verdicts(cache::encode_verdicts("torch=2.12.0", sample()), "torch=2.13.0", out);
  EXPECT_NE(problem.find("another build"), std::string::npos) << problem;
  EXPECT_TRUE(out.empty());
}

TEST(VerdictFile, AWriteIntoAnUnwritableDirectoryFailsAndSaysWhy) {
  const std::string why = cache::write_verdicts("/nonexistent-dir/verdicts.bin", "id", sample());
  EXPECT_NE(why.find("temporary file"), std::string::npos) << why;
}
