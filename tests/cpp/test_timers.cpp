// Timers: exclusive host time by category, per thread, the main thread's
// share, reset, and the breakdown of host and device times (support layer only).
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "kiln/metrics.h"

using kiln::DeviceTimes;
using kiln::TimeBreakdown;
using kiln::TimeCategory;
using kiln::Timers;
using kiln::TimeScope;

namespace {

constexpr double kMs = 1e-3;

void sleep_ms(int ms) { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); }

// A sleep of `ms` measures at least that, and not wildly more on a loaded machine.
void expect_about(double seconds, int ms, const char* what) {
  EXPECT_GE(seconds, ms * kMs * 0.95) << what;
  EXPECT_LT(seconds, ms * kMs + 0.5) << what;
}

TimeBreakdown host_only() { return Timers::global().breakdown({}); }

class TimersTest : public ::testing::Test {
 protected:
  void SetUp() override {
    Timers::global().mark_main_thread();  // gtest runs tests on the main thread
    Timers::global().reset();
  }
};

TEST(Clock, TicksAreMonotonicAndConvertToSeconds) {
  EXPECT_GT(kiln::seconds_per_tick(), 0.0);
  const int64_t a = kiln::clock_ticks();
  const auto t0 = std::chrono::steady_clock::now();
  sleep_ms(30);
  const int64_t b = kiln::clock_ticks();
  const double steady = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_GT(b, a);
  // The two clocks agree on 30 ms within a few percent.
  EXPECT_NEAR(kiln::ticks_to_seconds(b - a), steady, steady * 0.05 + 1e-4);
}

TEST_F(TimersTest, AScopeChargesItsCategory) {
  {
    const TimeScope scope(TimeCategory::HostRecord);
    sleep_ms(20);
  }
  const TimeBreakdown t = host_only();
  expect_about(t.host_record_s, 20, "host_record_s");
  EXPECT_EQ(t.flush_s, 0.0);
  EXPECT_EQ(t.compile_s, 0.0);
  EXPECT_EQ(t.host_wait_s, 0.0);
  EXPECT_GE(t.wall_s, t.host_record_s);
}

TEST_F(TimersTest, NestedScopesChargeTheInnermostCategoryOnly) {
  {
    const TimeScope record(TimeCategory::HostRecord);
    sleep_ms(10);
    {
      const TimeScope flush(TimeCategory::Flush);
      sleep_ms(20);
      {
        const TimeScope compile(TimeCategory::Compile);
        sleep_ms(30);
      }
      {
        const TimeScope wait(TimeCategory::HostWait);
        sleep_ms(15);
      }
    }
    sleep_ms(10);
  }
  const TimeBreakdown t = host_only();
  expect_about(t.host_record_s, 20, "host_record_s");
  expect_about(t.flush_s, 20, "flush_s");
  expect_about(t.compile_s, 30, "compile_s");
  expect_about(t.host_wait_s, 15, "host_wait_s");
  // Nothing counted twice: the parts fit in the wall time.
  EXPECT_LE(t.host_record_s + t.flush_s + t.compile_s + t.host_wait_s, t.wall_s);
}

TEST_F(TimersTest, AScopeInsideOneOfItsOwnCategoryCountsOnce) {
  {
    const TimeScope outer(TimeCategory::HostRecord);
    const TimeScope inner(TimeCategory::HostRecord);  // an op dispatching an op
    sleep_ms(20);
  }
  expect_about(host_only().host_record_s, 20, "host_record_s");
}

TEST_F(TimersTest, TimeOutsideEveryScopeIsTheMainThreadsPythonTime) {
  sleep_ms(30);  // outside kiln
  {
    const TimeScope wait(TimeCategory::HostWait);
    sleep_ms(20);
  }
  const TimeBreakdown t = host_only();
  expect_about(t.host_python_s, 30, "host_python_s");
  expect_about(t.host_wait_s, 20, "host_wait_s");
  EXPECT_NEAR(t.host_python_s + t.host_wait_s, t.wall_s, 1e-3);
}

TEST_F(TimersTest, OtherThreadsCountButAreNotTakenFromTheMainThread) {
  std::thread other([] {
    const TimeScope record(TimeCategory::HostRecord);
    sleep_ms(40);
  });
  other.join();  // its times outlive it
  const TimeBreakdown t = host_only();
  expect_about(t.host_record_s, 40, "host_record_s");
  // The main thread spent the whole time outside kiln (waiting in join).
  EXPECT_NEAR(t.host_python_s, t.wall_s, 1e-3);
}

TEST_F(TimersTest, ResetZeroesTheTimesAndRestartsTheWallClock) {
  {
    const TimeScope flush(TimeCategory::Flush);
    sleep_ms(20);
  }
  std::thread([] {
    const TimeScope compile(TimeCategory::Compile);
    sleep_ms(20);
  }).join();
  ASSERT_GT(host_only().flush_s, 0.0);
  ASSERT_GT(host_only().compile_s, 0.0);
  Timers::global().reset();
  const TimeBreakdown t = host_only();
  EXPECT_EQ(t.host_record_s, 0.0);
  EXPECT_EQ(t.flush_s, 0.0);
  EXPECT_EQ(t.compile_s, 0.0);
  EXPECT_EQ(t.host_wait_s, 0.0);
  EXPECT_LT(t.wall_s, 0.015);
}

TEST_F(TimersTest, ScopesAcrossAResetCountTheirTimeAfterIt) {
  {
    const TimeScope record(TimeCategory::HostRecord);
    sleep_ms(20);
    Timers::global().reset();
    sleep_ms(20);
  }
  const TimeBreakdown t = host_only();
  expect_about(t.host_record_s, 20, "host_record_s");  // the stretch after the reset only
  EXPECT_LT(t.host_record_s, 0.035);
  EXPECT_LE(t.host_record_s, t.wall_s);
}

TEST_F(TimersTest, DeviceTimesAddUpOverDevicesAndIdleIsOverDevicesThatRan) {
  sleep_ms(20);
  const double per_tick = kiln::seconds_per_tick();
  const auto ticks = [&](double seconds) { return static_cast<int64_t>(seconds / per_tick); };
  DeviceTimes d0, d1, d2;
  d0.fused_ticks = ticks(0.004);
  d0.library_ticks = ticks(0.006);
  d0.library_ticks_by_name = {{"aten::mm", ticks(0.005)}, {"copy host->device", ticks(0.001)}};
  d0.busy_ticks = ticks(0.011);  // and a queued free
  d1.library_ticks = ticks(0.002);
  d1.library_ticks_by_name = {{"aten::mm", ticks(0.002)}};
  d1.busy_ticks = ticks(0.002);
  // d2 ran nothing: its idle time is not counted.
  const TimeBreakdown t = Timers::global().breakdown({d0, d1, d2});
  EXPECT_NEAR(t.fused_kernel_s, 0.004, 1e-6);
  EXPECT_NEAR(t.library_kernel_s, 0.008, 1e-6);
  EXPECT_NEAR(t.device_busy_s, 0.013, 1e-6);
  ASSERT_EQ(t.library_kernels_by_op.size(), 2u);
  EXPECT_NEAR(t.library_kernels_by_op.at("aten::mm"), 0.007, 1e-6);
  EXPECT_NEAR(t.library_kernels_by_op.at("copy host->device"), 0.001, 1e-6);
  EXPECT_NEAR(t.device_idle_s, 2 * t.wall_s - 0.013, 1e-3);
}

TEST_F(TimersTest, NoDeviceRanSoTheDeviceWasIdleTheWholeTime) {
  sleep_ms(10);
  const TimeBreakdown t = Timers::global().breakdown({DeviceTimes{}, DeviceTimes{}});
  EXPECT_EQ(t.fused_kernel_s, 0.0);
  EXPECT_EQ(t.library_kernel_s, 0.0);
  EXPECT_TRUE(t.library_kernels_by_op.empty());
  EXPECT_DOUBLE_EQ(t.device_idle_s, t.wall_s);
}

TEST_F(TimersTest, ReportShowsTheBreakdownInMillisecondsAndPercent) {
  TimeBreakdown t;
  t.wall_s = 2.0;
  t.host_record_s = 0.5;
  t.compile_s = 0.25;
  t.host_python_s = 1.25;
  t.library_kernel_s = 0.75;
  t.device_idle_s = 1.25;
  for (int i = 0; i < 7; ++i) t.library_kernels_by_op["aten::op" + std::to_string(i)] = 0.1 * (i + 1);
  const std::string r = kiln::Metrics().report(t);
  EXPECT_NE(r.find("kiln metrics"), std::string::npos) << r;
  EXPECT_NE(r.find("time breakdown"), std::string::npos) << r;
  EXPECT_NE(r.find("500.0      25.0"), std::string::npos) << r;   // host_record: ms, % of wall
  EXPECT_NE(r.find("1250.0      62.5"), std::string::npos) << r;  // host_python
  // The top 5 library kernels, largest first, then how many more.
  EXPECT_LT(r.find("aten::op6"), r.find("aten::op2")) << r;
  EXPECT_EQ(r.find("aten::op1 "), std::string::npos) << r;
  EXPECT_NE(r.find("... 2 more"), std::string::npos) << r;
  // The table sits inside the report's closing rule.
  EXPECT_LT(r.find("time breakdown"), r.rfind("=====")) << r;
}

}  // namespace
