// Metrics: counters by key, snapshot, report, reset and thread-safety.
#include <gtest/gtest.h>

#include <latch>
#include <string>
#include <thread>
#include <vector>

#include "kiln/metrics.h"

using kiln::Counter;
using kiln::Metrics;

namespace {

const Counter kAllCounters[] = {Counter::Launches,        Counter::TracedOps,          Counter::LibraryKernels,
                                Counter::Fallbacks,       Counter::SyncPoints,         Counter::Errors,
                                Counter::BytesCopied,     Counter::TraceFlushes,       Counter::Regions,
                                Counter::KernelsCompiled, Counter::CompileTime,        Counter::ExecutableCache,
                                Counter::PlanCache,       Counter::ExecutableLaunches, Counter::BytesNotWritten,
                                Counter::BytesReused,     Counter::ExecutableStore,    Counter::StoreTime,
                                Counter::StoredVerdicts,  Counter::WarmStart,          Counter::Tiers,
                                Counter::FirstSightChecks};

bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

TEST(Metrics, AddAndGet) {
  Metrics m;
  EXPECT_EQ(m.get(Counter::Launches, "aten::add.Tensor"), 0);
  m.add(Counter::Launches, "aten::add.Tensor");
  m.add(Counter::Launches, "aten::add.Tensor");
  m.add(Counter::Launches, "aten::mul.Tensor", 5);
  m.add(Counter::BytesCopied, "host_to_device", 4096);
  m.add(Counter::BytesCopied, "host_to_device", -96);
  EXPECT_EQ(m.get(Counter::Launches, "aten::add.Tensor"), 2);
  EXPECT_EQ(m.get(Counter::Launches, "aten::mul.Tensor"), 5);
  EXPECT_EQ(m.get(Counter::BytesCopied, "host_to_device"), 4000);
  // Counters are separate tables.
  EXPECT_EQ(m.get(Counter::Fallbacks, "aten::add.Tensor"), 0);
  EXPECT_EQ(m.get(Counter::Launches, "host_to_device"), 0);
}

TEST(Metrics, CounterNamesAreDistinct) {
  std::vector<std::string> names;
  for (Counter c : kAllCounters) names.push_back(Metrics::counter_name(c));
  EXPECT_EQ(names, (std::vector<std::string>{"launches",          "traced_ops",          "library_kernels",
                                             "fallbacks",         "sync_points",         "errors",
                                             "bytes_copied",      "trace_flushes",       "regions",
                                             "kernels_compiled",  "compile_time",        "executable_cache",
                                             "plan_cache",        "executable_launches", "bytes_not_written",
                                             "bytes_reused",      "executable_store",    "store_time",
                                             "stored_verdicts",   "warm_start",          "tiers",
                                             "first_sight_checks"}));
}

TEST(Metrics, SnapshotHasEveryCounter) {
  Metrics m;
  m.add(Counter::Fallbacks, "aten::nonzero", 3);
  m.add(Counter::SyncPoints, "item");
  auto snap = m.snapshot();
  ASSERT_EQ(snap.size(), std::size(kAllCounters));
  for (Counter c : kAllCounters) EXPECT_EQ(snap.count(Metrics::counter_name(c)), 1u);
  EXPECT_EQ(snap["fallbacks"].size(), 1u);
  EXPECT_EQ(snap["fallbacks"]["aten::nonzero"], 3);
  EXPECT_EQ(snap["sync_points"]["item"], 1);
  EXPECT_TRUE(snap["launches"].empty());
  // A snapshot is a copy: later adds do not change it.
  m.add(Counter::Fallbacks, "aten::nonzero", 10);
  EXPECT_EQ(snap["fallbacks"]["aten::nonzero"], 3);
  EXPECT_EQ(m.get(Counter::Fallbacks, "aten::nonzero"), 13);
}

TEST(Metrics, ResetClearsEverything) {
  Metrics m;
  for (Counter c : kAllCounters) m.add(c, "k", 7);
  m.reset();
  for (Counter c : kAllCounters) EXPECT_EQ(m.get(c, "k"), 0);
  for (const auto& [name, table] : m.snapshot()) EXPECT_TRUE(table.empty()) << name;
  m.add(Counter::Errors, "k");
  EXPECT_EQ(m.get(Counter::Errors, "k"), 1);
}

TEST(Metrics, ReportListsTotalsAndKeys) {
  Metrics m;
  m.add(Counter::Launches, "aten::add.Tensor", 3);
  m.add(Counter::Launches, "aten::mul.Tensor", 9);
  m.add(Counter::Errors, "aten::index.Tensor");
  const std::string r = m.report();
  EXPECT_TRUE(contains(r, "kiln metrics")) << r;
  EXPECT_TRUE(contains(r, "launches: 12")) << r;
  EXPECT_TRUE(contains(r, "errors: 1")) << r;
  EXPECT_TRUE(contains(r, "fallbacks: 0")) << r;
  EXPECT_TRUE(contains(r, "aten::add.Tensor")) << r;
  EXPECT_TRUE(contains(r, "aten::index.Tensor")) << r;
  // Rows are sorted by count, largest first.
  EXPECT_LT(r.find("aten::mul.Tensor"), r.find("aten::add.Tensor")) << r;
}

TEST(Metrics, ReportTruncatesLongTables) {
  Metrics m;
  for (int i = 0; i < 20; ++i) m.add(Counter::Launches, "op" + std::to_string(i), 100 - i);
  const std::string r = m.report();
  EXPECT_TRUE(contains(r, "op0 ")) << r;
  EXPECT_TRUE(contains(r, "op14 ")) << r;
  EXPECT_FALSE(contains(r, "op15 ")) << r;
  EXPECT_TRUE(contains(r, "... 5 more")) << r;
}

TEST(Metrics, GlobalIsASingleton) {
  Metrics& g = Metrics::global();
  EXPECT_EQ(&g, &Metrics::global());
  const int64_t before = g.get(Counter::SyncPoints, "test_metrics.global");
  g.add(Counter::SyncPoints, "test_metrics.global", 2);
  EXPECT_EQ(Metrics::global().get(Counter::SyncPoints, "test_metrics.global"), before + 2);
}

TEST(Metrics, ConcurrentAddsSumCorrectly) {
  constexpr int kThreads = 8;
  constexpr int kPerThread = 20000;
  Metrics m;
  std::latch start(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      start.arrive_and_wait();
      const std::string own = "thread" + std::to_string(t);
      for (int i = 0; i < kPerThread; ++i) {
        m.add(Counter::Launches, "shared");
        m.add(Counter::BytesCopied, "host_to_device", 3);
        m.add(Counter::Launches, own);
        if (i % 1000 == 0) (void)m.snapshot();  // readers interleave with writers
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(m.get(Counter::Launches, "shared"), int64_t(kThreads) * kPerThread);
  EXPECT_EQ(m.get(Counter::BytesCopied, "host_to_device"), int64_t(kThreads) * kPerThread * 3);
  for (int t = 0; t < kThreads; ++t) {
    EXPECT_EQ(m.get(Counter::Launches, "thread" + std::to_string(t)), kPerThread);
  }
  EXPECT_EQ(m.snapshot()["launches"].size(), size_t(kThreads + 1));
}

}  // namespace

TEST(Metrics, RaiseToKeepsTheMaximum) {
  Metrics m;
  m.raise_to(Counter::CompileTime, "max_us", 30);
  m.raise_to(Counter::CompileTime, "max_us", 10);
  EXPECT_EQ(m.get(Counter::CompileTime, "max_us"), 30);
  m.raise_to(Counter::CompileTime, "max_us", 45);
  EXPECT_EQ(m.get(Counter::CompileTime, "max_us"), 45);
}
