// LaunchQueue: ordering, asynchrony, error delivery, waiting and task times.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <latch>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "kiln/runtime.h"

using kiln::runtime::LaunchError;
using kiln::runtime::LaunchQueue;

namespace {

TEST(LaunchQueue, FreshQueueIsIdle) {
  LaunchQueue q(0);
  EXPECT_EQ(q.submitted(), 0u);
  EXPECT_EQ(q.completed(), 0u);
  EXPECT_TRUE(q.idle());
  EXPECT_FALSE(q.has_pending_error());
  EXPECT_NO_THROW(q.synchronize());
}

TEST(LaunchQueue, RunsLaunchesInSubmissionOrder) {
  LaunchQueue q(0);
  std::vector<int> order;  // only the worker touches it until synchronize()
  for (int i = 0; i < 1000; ++i) {
    uint64_t seq = q.submit("append", [&order, i] { order.push_back(i); });
    EXPECT_EQ(seq, uint64_t(i + 1));
  }
  q.synchronize();
  ASSERT_EQ(order.size(), 1000u);
  for (int i = 0; i < 1000; ++i) ASSERT_EQ(order[i], i);
  EXPECT_EQ(q.completed(), 1000u);
  EXPECT_TRUE(q.idle());
}

TEST(LaunchQueue, OrderedUnderLaunchesFromSeveralThreads) {
  constexpr int kThreads = 4;
  constexpr int kPerThread = 2000;
  LaunchQueue q(0);
  // The queue runs launches one at a time on its worker, so the vectors need
  // no lock of their own: the serial execution guards them.
  std::vector<std::pair<int, int>> executed;
  std::vector<uint64_t> executed_seq;
  executed.reserve(kThreads * kPerThread);
  executed_seq.reserve(kThreads * kPerThread);
  // Each launch is told its own sequence number through a future, which is
  // set right after submit() returns it.
  std::vector<std::vector<uint64_t>> returned_seq(kThreads);

  std::latch start(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      start.arrive_and_wait();
      for (int i = 0; i < kPerThread; ++i) {
        auto seq_promise = std::make_shared<std::promise<uint64_t>>();
        std::shared_future<uint64_t> seq_future = seq_promise->get_future().share();
        uint64_t seq = q.submit("append", [&executed, &executed_seq, t, i, seq_future] {
          executed.emplace_back(t, i);
          executed_seq.push_back(seq_future.get());
        });
        seq_promise->set_value(seq);
        returned_seq[t].push_back(seq);
      }
    });
  }
  for (auto& th : threads) th.join();
  q.synchronize();

  ASSERT_EQ(executed.size(), size_t(kThreads * kPerThread));
  ASSERT_EQ(q.submitted(), uint64_t(kThreads * kPerThread));
  ASSERT_EQ(q.completed(), uint64_t(kThreads * kPerThread));

  // Each thread's launches ran in the order that thread submitted them.
  std::vector<int> next(kThreads, 0);
  for (const auto& [t, i] : executed) {
    ASSERT_GE(t, 0);
    ASSERT_LT(t, kThreads);
    ASSERT_EQ(i, next[t]) << "thread " << t << " ran out of order";
    ++next[t];
  }
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(next[t], kPerThread);

  // Sequence numbers returned by submit() are exactly the execution order.
  for (size_t k = 0; k < executed_seq.size(); ++k) {
    ASSERT_EQ(executed_seq[k], uint64_t(k + 1)) << "launch #" << k << " ran out of seq order";
  }
  // And every thread got increasing numbers.
  for (int t = 0; t < kThreads; ++t) {
    for (size_t k = 1; k < returned_seq[t].size(); ++k) {
      ASSERT_LT(returned_seq[t][k - 1], returned_seq[t][k]);
    }
  }
}

TEST(LaunchQueue, SubmitReturnsBeforeASlowLaunchFinishes) {
  LaunchQueue q(0);
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  std::promise<void> started;
  std::atomic<bool> finished{false};
  std::atomic<bool> ran_inline{false};
  const auto submitter = std::this_thread::get_id();
  q.submit("slow", [released, &started, &finished, &ran_inline, submitter] {
    started.set_value();
    // Run on the caller's thread, waiting would deadlock: record it instead.
    if (std::this_thread::get_id() == submitter) {
      ran_inline.store(true);
      return;
    }
    released.wait();
    finished.store(true);
  });
  // We got here while the launch is blocked on `released`: submit is async.
  EXPECT_FALSE(ran_inline.load()) << "submit() ran the launch on the calling thread";
  started.get_future().wait();  // the worker is inside the launch
  EXPECT_FALSE(finished.load());
  EXPECT_FALSE(q.idle());
  EXPECT_EQ(q.completed(), 0u);
  // Later submissions also return at once and queue behind it.
  std::atomic<int> ran_after{0};
  uint64_t seq2 = q.submit("after", [&] { ran_after.fetch_add(1); });
  EXPECT_EQ(seq2, 2u);
  EXPECT_EQ(ran_after.load(), 0);

  release.set_value();
  q.synchronize();
  EXPECT_TRUE(finished.load());
  EXPECT_EQ(ran_after.load(), 1);
  EXPECT_TRUE(q.idle());
}

TEST(LaunchQueue, ErrorIsDeliveredAtNextSynchronizeNamingTheLaunch) {
  LaunchQueue q(5);
  std::atomic<int> after{0};
  q.submit("fine", [] {});
  q.submit("aten::index.Tensor", [] { throw std::runtime_error("boom"); });
  q.submit("later", [&] { after.fetch_add(1); });
  try {
    q.synchronize();
    FAIL() << "expected LaunchError";
  } catch (const LaunchError& e) {
    EXPECT_EQ(e.device, 5);
    EXPECT_EQ(e.launch_name, "aten::index.Tensor");
    EXPECT_EQ(e.message, "boom");
    const std::string msg = e.what();
    EXPECT_NE(msg.find("aten::index.Tensor"), std::string::npos) << msg;
    EXPECT_NE(msg.find("boom"), std::string::npos) << msg;
    EXPECT_NE(msg.find("device 5"), std::string::npos) << msg;
  }
  // The queue kept running the launch after the failing one.
  EXPECT_EQ(after.load(), 1);
  EXPECT_FALSE(q.has_pending_error());
  // The error was delivered once.
  EXPECT_NO_THROW(q.synchronize());
  // And the queue still runs new launches.
  q.submit("again", [&] { after.fetch_add(1); });
  EXPECT_NO_THROW(q.synchronize());
  EXPECT_EQ(after.load(), 2);
}

TEST(LaunchQueue, LaunchErrorIsARuntimeError) {
  LaunchQueue q(0);
  q.submit("bad", [] { throw std::logic_error("nope"); });
  EXPECT_THROW(q.synchronize(), std::runtime_error);
}

TEST(LaunchQueue, NonStandardExceptionsBecomeLaunchErrors) {
  LaunchQueue q(0);
  q.submit("weird", [] { throw 42; });
  try {
    q.synchronize();
    FAIL() << "expected LaunchError";
  } catch (const LaunchError& e) {
    EXPECT_EQ(e.launch_name, "weird");
    EXPECT_NE(std::string(e.what()).find("unknown exception"), std::string::npos) << e.what();
  }
}

TEST(LaunchQueue, OnlyTheFirstErrorIsDelivered) {
  LaunchQueue q(0);
  q.submit("first", [] { throw std::runtime_error("first failure"); });
  q.submit("second", [] { throw std::runtime_error("second failure"); });
  try {
    q.synchronize();
    FAIL() << "expected LaunchError";
  } catch (const LaunchError& e) {
    EXPECT_EQ(e.launch_name, "first");
    EXPECT_EQ(e.message, "first failure");
    EXPECT_EQ(std::string(e.what()).find("second"), std::string::npos) << e.what();
  }
  EXPECT_NO_THROW(q.synchronize());
}

TEST(LaunchQueue, ErrorAfterDeliveryIsDeliveredAtTheFollowingSync) {
  LaunchQueue q(0);
  q.submit("a", [] { throw std::runtime_error("one"); });
  EXPECT_THROW(q.synchronize(), LaunchError);
  q.submit("b", [] { throw std::runtime_error("two"); });
  try {
    q.synchronize();
    FAIL() << "expected LaunchError";
  } catch (const LaunchError& e) {
    EXPECT_EQ(e.launch_name, "b");
    EXPECT_EQ(e.message, "two");
  }
}

TEST(LaunchQueue, WaitForDoesNotDeliverErrorsButRaisePendingErrorDoes) {
  LaunchQueue q(0);
  uint64_t seq = q.submit("bad", [] { throw std::runtime_error("boom"); });
  EXPECT_NO_THROW(q.wait_for(seq));
  EXPECT_TRUE(q.has_pending_error());
  EXPECT_THROW(q.raise_pending_error(), LaunchError);
  EXPECT_FALSE(q.has_pending_error());
  EXPECT_NO_THROW(q.raise_pending_error());
  EXPECT_NO_THROW(q.synchronize());
}

TEST(LaunchQueue, WaitForWaitsForThatLaunchOnly) {
  LaunchQueue q(0);
  std::atomic<bool> first_done{false};
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  uint64_t s1 = q.submit("first", [&] { first_done.store(true); });
  uint64_t s2 = q.submit("blocked", [released] { released.wait(); });
  q.wait_for(s1);  // returns although launch 2 is still blocked
  EXPECT_TRUE(first_done.load());
  EXPECT_GE(q.completed(), s1);
  EXPECT_LT(q.completed(), s2);
  EXPECT_FALSE(q.idle());
  release.set_value();
  q.wait_for(s2);
  EXPECT_EQ(q.completed(), s2);
  EXPECT_TRUE(q.idle());
  // Waiting for an already-completed launch returns at once.
  q.wait_for(s1);
  q.wait_for(0);
}

TEST(LaunchQueue, DestructorDrainsPendingLaunches) {
  std::atomic<int> ran{0};
  {
    LaunchQueue q(0);
    for (int i = 0; i < 100; ++i) q.submit("count", [&] { ran.fetch_add(1); });
  }
  EXPECT_EQ(ran.load(), 100);
}

}  // namespace

namespace {

using kiln::runtime::TaskKind;

void sleep_ms(int ms) { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); }

TEST(LaunchQueue, TheWorkerTimesEachTaskByKindAndLibraryTasksByName) {
  LaunchQueue q(0);
  q.submit("aten::mm", [] { sleep_ms(30); }, TaskKind::Library);
  q.submit("aten::mm", [] { sleep_ms(10); }, TaskKind::Library);
  q.submit("copy host->device", [] { sleep_ms(5); }, TaskKind::Library);
  q.submit("kiln_0123", [] { sleep_ms(20); }, TaskKind::Fused);
  q.submit("free", [] { sleep_ms(5); });  // TaskKind::Other
  q.submit(
      "throws",
      [] {
        sleep_ms(5);
        throw std::runtime_error("bad");
      },
      TaskKind::Library);
  EXPECT_THROW(q.synchronize(), LaunchError);
  const kiln::DeviceTimes t = q.times();
  const auto s = [](int64_t ticks) { return kiln::ticks_to_seconds(ticks); };
  EXPECT_GE(s(t.library_ticks_by_name.at("aten::mm")), 0.038);
  EXPECT_GE(s(t.library_ticks_by_name.at("copy host->device")), 0.0045);
  EXPECT_GE(s(t.library_ticks_by_name.at("throws")), 0.0045);  // a failed task ran too
  EXPECT_EQ(t.library_ticks_by_name.size(), 3u);               // fused kernels and frees are not library kernels
  EXPECT_GE(s(t.fused_ticks), 0.019);
  EXPECT_LT(s(t.fused_ticks), 0.5);
  int64_t by_name = 0;
  for (const auto& [name, ticks] : t.library_ticks_by_name) by_name += ticks;
  EXPECT_EQ(by_name, t.library_ticks);
  EXPECT_GE(t.busy_ticks - t.library_ticks - t.fused_ticks, int64_t(0.0045 / kiln::seconds_per_tick()));
  q.reset_times();
  const kiln::DeviceTimes zero = q.times();
  EXPECT_EQ(zero.busy_ticks, 0);
  EXPECT_EQ(zero.library_ticks, 0);
  EXPECT_EQ(zero.fused_ticks, 0);
  EXPECT_TRUE(zero.library_ticks_by_name.empty());
}

TEST(LaunchQueue, AHostWaitIsTimedAsWaiting) {
  kiln::Timers::global().reset();
  LaunchQueue q(0);
  q.submit("slow", [] { sleep_ms(30); }, TaskKind::Library);
  q.synchronize();
  const double waited = kiln::Timers::global().breakdown({}).host_wait_s;
  EXPECT_GE(waited, 0.015);  // the submit itself takes a moment of the 30 ms
  EXPECT_LT(waited, 0.5);
}

}  // namespace

namespace {

TEST(LaunchQueue, ATaskSpanningAResetCountsFromTheReset) {
  LaunchQueue q(0);
  std::promise<void> started;
  q.submit(
      "aten::mm",
      [&started] {
        started.set_value();
        sleep_ms(60);
      },
      kiln::runtime::TaskKind::Library);
  started.get_future().wait();
  sleep_ms(30);
  kiln::Timers::global().reset();
  q.reset_times();
  q.synchronize();
  const double seconds = kiln::ticks_to_seconds(q.times().library_ticks);
  EXPECT_GT(seconds, 0.0);
  EXPECT_LT(seconds, 0.045);  // about 30 ms of its 60
}

}  // namespace
