// The store killed at random moments: 50 processes writing, reading and
// evicting are each killed with SIGKILL after a random delay, and after each
// the store opens, holds only entries that pass every check, stays within
// its cap, and takes new writes; the private directories of the killed
// processes' readers do not pile up. The writer process is
// tests/cpp/store_crash_child.cpp. No torch, no LLVM.
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "kiln/store.h"
#include "store_test_support.h"

extern char** environ;

using namespace kiln;
using kiln::test_support::open_store;
using kiln::test_support::TempDir;

namespace {

pid_t start_writer(const std::string& dir, int seed, uint64_t cap) {
  const std::string seed_arg = std::to_string(seed), cap_arg = std::to_string(cap);
  const char* argv[] = {KILN_STORE_CRASH_CHILD, dir.c_str(), seed_arg.c_str(), cap_arg.c_str(), nullptr};
  pid_t pid = -1;
  EXPECT_EQ(::posix_spawn(&pid, KILN_STORE_CRASH_CHILD, nullptr, nullptr, const_cast<char**>(argv), environ), 0);
  return pid;
}

}  // namespace

TEST(StoreCrash, SurvivesFiftyKillsAtRandomMoments) {
  TempDir t;
  const uint64_t cap = 2u << 20;             // most batches past the first few evict
  const uint64_t largest = 64 * 1024 + 512;  // a child's largest entry with its header
  std::mt19937 rng(20261203);
  size_t most_entries = 0;
  std::vector<pid_t> killed;
  for (int run = 0; run < 50; ++run) {
    const pid_t pid = start_writer(t.path, run, cap);
    ASSERT_GT(pid, 0);
    // From the child's start-up (no write yet) through many batches.
    std::this_thread::sleep_for(std::chrono::milliseconds(rng() % 400));
    ASSERT_EQ(::kill(pid, SIGKILL), 0);
    killed.push_back(pid);
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFSIGNALED(status)) << "run " << run << ": the writer exited by itself (status " << status << ")";

    auto s = open_store(t.path, false, cap);
    ASSERT_TRUE(s) << "run " << run;
    const std::vector<cache::StoreListing> all = s->list("fp");
    uint64_t bytes = 0;
    for (const cache::StoreListing& l : all) {
      EXPECT_EQ(l.problem, "") << "run " << run << ": entry " << l.key.hex();
      bytes += l.bytes;
    }
    EXPECT_LE(bytes, cap + largest) << "run " << run;
    most_entries = std::max(most_entries, all.size());
    // It takes writes: an entry put now is read back by another opener.
    const cache::Key probe = cache::make_key("probe" + std::to_string(run), "fp");
    s->put(probe, "fp", "object " + std::to_string(run), 1);
    ASSERT_TRUE(s->flush(std::chrono::seconds(10))) << "run " << run;
    EXPECT_EQ(s->take_warning(), "") << "run " << run;
    EXPECT_EQ(open_store(t.path, true)->get(probe, "fp").outcome, cache::Lookup::Hit) << "run " << run;
  }
  EXPECT_GT(most_entries, 20u);  // the children did write: the kills landed in busy stores
  // The killed readers' private directories were swept by the next opener.
  for (pid_t pid : killed) {
    for (const auto& d : std::filesystem::directory_iterator(std::filesystem::temp_directory_path()))
      EXPECT_NE(d.path().filename().string().rfind("kiln-reader-" + std::to_string(pid) + "-", 0), 0u) << d.path();
  }
}
