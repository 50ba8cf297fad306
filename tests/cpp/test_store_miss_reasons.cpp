// Why a store lookup missed: a new kernel, the same kernel stored for another
// environment (and which fingerprint fields differ), or an evicted entry.
// No torch, no LLVM: objects are opaque bytes here.
#include <gtest/gtest.h>

#include <chrono>
#include <string>

#include "kiln/fingerprint_difference.h"
#include "kiln/store.h"
#include "store_test_support.h"

using namespace kiln;
using kiln::test_support::open_store;
using kiln::test_support::TempDir;

namespace {

const std::string kHere =
    "kiln-codegen-7;build=abc;llvm=19.1.7;cpu=skylake-avx512;features=+avx,+avx2,+avx512f,;opt=O2";
const std::string kOtherCpu = "kiln-codegen-7;build=abc;llvm=19.1.7;cpu=znver3;features=+avx,+avx2,+sha,;opt=O2";
const std::string kFastMath = kHere + ";fast_math=1";

// One kernel's key in an environment, as the engine makes it.
struct Kernel {
  std::string ir;
  cache::Key key(const std::string& fingerprint) const { return cache::make_key(ir, fingerprint); }
  cache::Key identity() const { return cache::kernel_identity(ir); }
};

}  // namespace

TEST(FingerprintDifference, NamesEachFieldThatDiffersWithBothValues) {
  EXPECT_EQ(cache::fingerprint_difference(kHere, kHere), "");
  const std::string d = cache::fingerprint_difference(kOtherCpu, kHere);
  EXPECT_NE(d.find("cpu: 'znver3' there, 'skylake-avx512' here"), std::string::npos) << d;
  EXPECT_NE(d.find("features: here lacks +sha, there lacked +avx512f"), std::string::npos) << d;
  EXPECT_EQ(d.find("llvm"), std::string::npos) << d;  // the same there and here
  EXPECT_EQ(cache::fingerprint_difference(kHere, kFastMath), "fast_math: only here");
  EXPECT_EQ(cache::fingerprint_difference("kiln-codegen-6;llvm=18", "kiln-codegen-7;llvm=18"),
            "version: 'kiln-codegen-6' there, 'kiln-codegen-7' here");
}

TEST(StoreMissReasons, TheSameKernelStoredForAnotherEnvironmentSaysWhichFieldsDiffered) {
  TempDir t;
  const Kernel k{"add(mul(a, b), c)"};
  {
    auto other_machine = open_store(t.path);
    other_machine->put(k.key(kOtherCpu), kOtherCpu, "object", 1, k.identity());
    ASSERT_TRUE(other_machine->flush(std::chrono::seconds(10)));
  }
  auto s = open_store(t.path);
  const cache::StoreLookupResult r = s->get(k.key(kHere), kHere, k.identity());
  EXPECT_EQ(r.outcome, cache::Lookup::OtherEnvironment);
  EXPECT_NE(r.detail.find("cpu: 'znver3' there, 'skylake-avx512' here"), std::string::npos) << r.detail;
  EXPECT_EQ(r.detail.find("build"), std::string::npos) << r.detail;
  // Another kernel, and a lookup that does not say which kernel it is: new.
  EXPECT_EQ(s->get(Kernel{"sub(a, b)"}.key(kHere), kHere, Kernel{"sub(a, b)"}.identity()).outcome,
            cache::Lookup::Absent);
  EXPECT_EQ(s->get(k.key(kHere), kHere).outcome, cache::Lookup::Absent);
}

TEST(StoreMissReasons, AmongSeveralEnvironmentsTheClosestIsTold) {
  TempDir t;
  const Kernel k{"exp(a)"};
  auto s = open_store(t.path);
  s->put(k.key(kOtherCpu), kOtherCpu, "object", 1, k.identity());
  s->put(k.key(kFastMath), kFastMath, "object", 1, k.identity());
  ASSERT_TRUE(s->flush(std::chrono::seconds(10)));
  const cache::StoreLookupResult r = open_store(t.path)->get(k.key(kHere), kHere, k.identity());
  EXPECT_EQ(r.outcome, cache::Lookup::OtherEnvironment);
  EXPECT_EQ(r.detail, "fast_math: only there");
}

TEST(StoreMissReasons, APrunedEnvironmentIsNoLongerAReason) {
  TempDir t;
  const Kernel k{"neg(a)"};
  auto s = open_store(t.path);
  s->put(k.key(kOtherCpu), kOtherCpu, "object", 1, k.identity());
  ASSERT_TRUE(s->flush(std::chrono::seconds(10)));
  EXPECT_EQ(s->prune(kHere).deleted, 1u);
  ASSERT_TRUE(s->flush(std::chrono::seconds(10)));
  EXPECT_EQ(open_store(t.path)->get(k.key(kHere), kHere, k.identity()).outcome, cache::Lookup::Absent);
}

TEST(StoreMissReasons, AnEvictedKeySaysEvictedUntilItIsStoredAgainOrTheStoreCleared) {
  TempDir t;
  const std::string object(1000, 'o');
  auto kernel = [](int i) { return Kernel{"kernel" + std::to_string(i)}; };
  auto s = open_store(t.path, false, /*max_bytes=*/5000);
  for (int i = 0; i < 8; ++i) {
    s->put(kernel(i).key(kHere), kHere, object, 1, kernel(i).identity());
    ASSERT_TRUE(s->flush(std::chrono::seconds(10)));  // a batch each: kernel 0 is the oldest
  }
  ASSERT_GT(s->counters().evicted, 0u);
  const cache::StoreLookupResult r = open_store(t.path)->get(kernel(0).key(kHere), kHere, kernel(0).identity());
  EXPECT_EQ(r.outcome, cache::Lookup::Evicted);
  EXPECT_NE(r.detail.find("evicted"), std::string::npos) << r.detail;
  EXPECT_EQ(open_store(t.path)->get(kernel(7).key(kHere), kHere, kernel(7).identity()).outcome, cache::Lookup::Hit);

  s->put(kernel(0).key(kHere), kHere, object, 1, kernel(0).identity());  // compiled again: stored, the newest
  ASSERT_TRUE(s->flush(std::chrono::seconds(10)));
  EXPECT_EQ(open_store(t.path)->get(kernel(0).key(kHere), kHere, kernel(0).identity()).outcome, cache::Lookup::Hit);

  EXPECT_GT(s->clear(), 0u);
  ASSERT_TRUE(s->flush(std::chrono::seconds(10)));
  for (int i = 0; i < 8; ++i) {
    EXPECT_EQ(open_store(t.path)->get(kernel(i).key(kHere), kHere, kernel(i).identity()).outcome, cache::Lookup::Absent)
        << "kernel " << i << " after clear";
  }
}
