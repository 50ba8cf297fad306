// Device: copies, frees in queue order, blocking mode, events, executables, Runtime.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <future>
#include <memory>
#include <numeric>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "kiln/runtime.h"

using kiln::runtime::Device;
using kiln::runtime::Event;
using kiln::runtime::Executable;
using kiln::runtime::LaunchArgs;
using kiln::runtime::LaunchError;
using kiln::runtime::OutOfMemoryError;
using kiln::runtime::Runtime;
using kiln::runtime::RuntimeOptions;

namespace {

constexpr size_t kCap = size_t(16) << 20;

// A gate a launch can block on: the test opens it when it is ready.
struct Gate {
  std::promise<void> promise;
  std::shared_future<void> future = promise.get_future().share();
  void open() { promise.set_value(); }
  // The work to submit: blocks the queue until open().
  auto blocker() {
    return [f = future] { f.wait(); };
  }
  // Opens the gate from another thread a little later, so that the calling
  // thread is (almost always) already waiting in the call under test when the
  // queue unblocks. Correct code passes whatever the timing; the delay only
  // makes a missing wait show up reliably.
  // A jthread, so a failing assertion that skips join() cannot terminate the run.
  std::jthread open_soon() {
    return std::jthread([this] {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      open();
    });
  }
};

std::vector<int> iota_vec(size_t n, int start = 0) {
  std::vector<int> v(n);
  std::iota(v.begin(), v.end(), start);
  return v;
}

TEST(Device, BasicProperties) {
  Device dev(7, kCap, false);
  EXPECT_EQ(dev.index(), 7);
  EXPECT_FALSE(dev.launch_blocking());
  EXPECT_EQ(dev.memory().capacity(), kCap);
  EXPECT_TRUE(dev.idle());
}

TEST(Device, CopyFromHostThenToHostRoundTrips) {
  Device dev(0, kCap, false);
  auto src = iota_vec(1000);
  void* d = dev.allocate(src.size() * sizeof(int));
  dev.copy_from_host(d, src.data(), src.size() * sizeof(int));
  std::vector<int> out(src.size(), -1);
  dev.copy_to_host(out.data(), d, out.size() * sizeof(int));
  EXPECT_EQ(out, src);
  dev.free(d);
  dev.synchronize();
  EXPECT_EQ(dev.memory().stats().allocated_bytes, 0);
}

TEST(Device, CopyFromHostSnapshotsTheSource) {
  Device dev(0, kCap, false);
  Gate gate;
  const size_t n = 256;
  void* d = dev.allocate(n * sizeof(int));
  // Keep the queue busy so the copy cannot have run when copy_from_host returns.
  dev.launch("hold", gate.blocker());
  auto host = iota_vec(n);
  dev.copy_from_host(d, host.data(), n * sizeof(int));
  EXPECT_FALSE(dev.idle());
  std::fill(host.begin(), host.end(), -7);  // caller reuses its buffer at once
  gate.open();
  dev.synchronize();
  std::vector<int> out(n, 0);
  std::memcpy(out.data(), d, n * sizeof(int));
  EXPECT_EQ(out, iota_vec(n));
  dev.free(d);
}

TEST(Device, CopyToHostWaitsForPendingLaunches) {
  Device dev(0, kCap, false);
  void* d = dev.allocate(sizeof(int) * 4);
  const int zeros[4] = {0, 0, 0, 0};
  dev.copy_from_host(d, zeros, sizeof zeros);
  Gate gate;
  // A launch writes the buffer, but only after the gate opens, which happens
  // from another thread once the host is waiting in copy_to_host.
  dev.launch("write", [f = gate.future, d] {
    f.wait();
    int* p = static_cast<int*>(d);
    for (int i = 0; i < 4; ++i) p[i] = 10 + i;
  });
  std::jthread opener = gate.open_soon();
  int out[4] = {-1, -1, -1, -1};
  dev.copy_to_host(out, d, sizeof out);
  opener.join();
  for (int i = 0; i < 4; ++i) EXPECT_EQ(out[i], 10 + i);
  EXPECT_TRUE(dev.idle());
  dev.free(d);
}

TEST(Device, CopyToHostDeliversAPendingLaunchError) {
  Device dev(0, kCap, false);
  void* d = dev.allocate(16);
  dev.launch("aten::bad", [] { throw std::runtime_error("boom"); });
  char out[16];
  EXPECT_THROW(dev.copy_to_host(out, d, sizeof out), LaunchError);
  dev.free(d);
}

TEST(Device, CopyOnDevice) {
  Device dev(0, kCap, false);
  const size_t n = 512;
  auto host = iota_vec(n, 100);
  void* a = dev.allocate(n * sizeof(int));
  void* b = dev.allocate(n * sizeof(int));
  dev.copy_from_host(a, host.data(), n * sizeof(int));
  dev.copy_on_device(b, a, n * sizeof(int));
  std::vector<int> out(n, 0);
  dev.copy_to_host(out.data(), b, n * sizeof(int));
  EXPECT_EQ(out, host);

  // Overlapping copies behave like memmove.
  dev.copy_on_device(static_cast<int*>(b) + 1, b, (n - 1) * sizeof(int));
  dev.copy_to_host(out.data(), b, n * sizeof(int));
  EXPECT_EQ(out[0], 100);
  for (size_t i = 1; i < n; ++i) ASSERT_EQ(out[i], int(100 + i - 1));
  dev.free(a);
  dev.free(b);
}

TEST(Device, ZeroByteCopiesAreNoOps) {
  Device dev(0, kCap, false);
  dev.copy_from_host(nullptr, nullptr, 0);
  dev.copy_on_device(nullptr, nullptr, 0);
  dev.copy_to_host(nullptr, nullptr, 0);
  EXPECT_EQ(dev.submitted(), 0u);
}

TEST(Device, FreeIsImmediateAndQueuesNothing) {
  Device dev(0, kCap, false);
  void* d = dev.allocate(4096);
  dev.free(d);
  EXPECT_EQ(dev.memory().stats().allocated_bytes, 0);
  EXPECT_EQ(dev.submitted(), 0u);
  dev.free(nullptr);
  EXPECT_EQ(dev.memory().stats().free_count, 1);
}

TEST(Device, FreedBlockIsReusedAtOnceInQueueOrder) {
  Device dev(0, kCap, false);
  const size_t n = 256;
  auto first = iota_vec(n, 1);
  auto second = iota_vec(n, 1000);
  int* a = static_cast<int*>(dev.allocate(n * sizeof(int)));
  Gate gate;
  dev.launch("hold", gate.blocker());
  dev.copy_from_host(a, first.data(), n * sizeof(int));
  std::vector<int> seen(n, 0);
  dev.launch("read a", [&] { std::copy(a, a + n, seen.begin()); });
  dev.free(a);  // pending launches still use it
  EXPECT_EQ(dev.memory().stats().allocated_bytes, 0);
  // Same size: the pool hands the block out again while the queue is held,
  // and the new owner's write runs after the old owner's read.
  void* b = dev.allocate(n * sizeof(int));
  EXPECT_EQ(b, a);
  dev.copy_from_host(b, second.data(), n * sizeof(int));
  gate.open();
  std::vector<int> now(n, 0);
  dev.copy_to_host(now.data(), b, n * sizeof(int));
  EXPECT_EQ(seen, first);
  EXPECT_EQ(now, second);
  EXPECT_EQ(dev.memory().stats().reserved_bytes, static_cast<int64_t>(n * sizeof(int)));
  dev.free(b);
}

TEST(Device, AllocateWaitsForMemoryPendingLaunchesHoldWhenOutOfMemory) {
  Device dev(0, 64 * 1024, false);
  void* a = dev.allocate(48 * 1024);
  Gate gate;
  // A launch whose arguments keep `a` alive (as a library kernel's captured
  // tensors do): it is freed when the finished launch lets go of them.
  auto held = std::shared_ptr<void>(a, [&dev](void* p) { dev.free(p); });
  dev.launch("hold", [block = gate.blocker(), held = std::move(held)] { block(); });
  EXPECT_EQ(dev.memory().stats().allocated_bytes, 48 * 1024);
  std::jthread opener = gate.open_soon();
  // Does not fit until the launch ran; allocate waits for it.
  void* b = dev.allocate(32 * 1024);
  opener.join();
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(dev.memory().stats().allocated_bytes, 32 * 1024);
  dev.free(b);
  // With an idle queue the OOM is raised at once.
  void* c = dev.allocate(40 * 1024);
  EXPECT_THROW(dev.allocate(40 * 1024), OutOfMemoryError);
  dev.free(c);
}

TEST(Device, LaunchBlockingRaisesAtTheLaunch) {
  Device dev(0, kCap, true);
  EXPECT_TRUE(dev.launch_blocking());
  try {
    dev.launch("aten::index.Tensor", [] { throw std::runtime_error("boom"); });
    FAIL() << "expected LaunchError at launch()";
  } catch (const LaunchError& e) {
    EXPECT_EQ(e.launch_name, "aten::index.Tensor");
    EXPECT_NE(std::string(e.what()).find("boom"), std::string::npos);
  }
  // A blocking launch has completed by the time launch() returns.
  std::atomic<bool> ran{false};
  dev.launch("ok", [&] { ran.store(true); });
  EXPECT_TRUE(ran.load());
  EXPECT_TRUE(dev.idle());
  EXPECT_NO_THROW(dev.synchronize());
}

TEST(Device, NonBlockingLaunchDefersTheError) {
  Device dev(0, kCap, false);
  Gate gate;
  dev.launch("hold", gate.blocker());
  EXPECT_NO_THROW(dev.launch("aten::bad", [] { throw std::runtime_error("boom"); }));
  gate.open();
  EXPECT_THROW(dev.synchronize(), LaunchError);
  EXPECT_NO_THROW(dev.synchronize());
}

TEST(Event, UnrecordedEventIsComplete) {
  Event e;
  EXPECT_FALSE(e.recorded());
  EXPECT_TRUE(e.query());
  EXPECT_NO_THROW(e.synchronize());
  Event f;
  EXPECT_THROW(Event::elapsed_ms(e, f), std::invalid_argument);
}

TEST(Event, RecordQuerySynchronize) {
  Device dev(2, kCap, false);
  Gate gate;
  dev.launch("hold", gate.blocker());
  Event e;
  dev.record(e);
  EXPECT_TRUE(e.recorded());
  EXPECT_EQ(e.device(), 2);
  EXPECT_FALSE(e.query());  // the queue is blocked before the marker
  gate.open();
  e.synchronize();
  EXPECT_TRUE(e.query());
}

TEST(Event, ElapsedTimeIsNonNegativeAndOrdered) {
  Device dev(0, kCap, false);
  Event a, b, c;
  dev.record(a);
  dev.launch("work", [] {
    volatile int x = 0;
    for (int i = 0; i < 1000; ++i) x = x + i;
  });
  dev.record(b);
  dev.record(c);
  // Not yet completed events cannot be measured; after synchronize they can.
  dev.synchronize();
  ASSERT_TRUE(a.query() && b.query() && c.query());
  double ab = Event::elapsed_ms(a, b);
  double ac = Event::elapsed_ms(a, c);
  double bc = Event::elapsed_ms(b, c);
  EXPECT_GE(ab, 0.0);
  EXPECT_GE(bc, 0.0);
  EXPECT_GE(ac, ab);
  EXPECT_LE(Event::elapsed_ms(c, a), 0.0);
  EXPECT_DOUBLE_EQ(Event::elapsed_ms(a, a), 0.0);
}

TEST(Event, ElapsedTimeNeedsCompletedEvents) {
  Device dev(0, kCap, false);
  Gate gate;
  Event a, b;
  dev.record(a);
  dev.launch("hold", gate.blocker());
  dev.record(b);
  a.synchronize();
  EXPECT_THROW(Event::elapsed_ms(a, b), std::invalid_argument);
  gate.open();
  b.synchronize();
  EXPECT_GE(Event::elapsed_ms(a, b), 0.0);
}

TEST(Event, ElapsedTimeCoversHostTimeBetweenTheEvents) {
  // a completes before t1 and b after t2 (b waits for the gate opened at t2),
  // so elapsed(a, b) >= t2 - t1 > 0 by the clock's monotonicity alone.
  Device dev(0, kCap, false);
  Gate gate;
  Event a, b;
  dev.record(a);
  dev.launch("hold", gate.blocker());
  dev.record(b);
  a.synchronize();
  const auto t1 = kiln::runtime::Clock::now();
  auto t2 = kiln::runtime::Clock::now();
  while (t2 <= t1) t2 = kiln::runtime::Clock::now();
  gate.open();
  b.synchronize();
  const double host_ms = std::chrono::duration<double, std::milli>(t2 - t1).count();
  ASSERT_GT(host_ms, 0.0);
  EXPECT_GE(Event::elapsed_ms(a, b), host_ms);
  EXPECT_LE(Event::elapsed_ms(b, a), -host_ms);
}

TEST(Event, ReRecordingReplacesTheMarker) {
  Device dev(0, kCap, false);
  Event e;
  dev.record(e);
  e.synchronize();
  EXPECT_TRUE(e.query());
  Gate gate;
  dev.launch("hold", gate.blocker());
  dev.record(e);
  EXPECT_FALSE(e.query());
  gate.open();
  e.synchronize();
  EXPECT_TRUE(e.query());
}

TEST(Device, CopyBetweenDevices) {
  Device d0(0, kCap, false);
  Device d1(1, kCap, false);
  const size_t n = 300;
  auto host = iota_vec(n, 5);
  void* src = d0.allocate(n * sizeof(int));
  void* dst = d1.allocate(n * sizeof(int));
  // The source's pending write (behind a gate) must land before the copy.
  Gate gate;
  d0.launch("hold", gate.blocker());
  d0.copy_from_host(src, host.data(), n * sizeof(int));
  std::jthread opener = gate.open_soon();
  kiln::runtime::copy_between_devices(d1, dst, d0, src, n * sizeof(int));
  opener.join();
  std::vector<int> out(n, 0);
  d1.copy_to_host(out.data(), dst, n * sizeof(int));
  EXPECT_EQ(out, host);

  // Same device degenerates to copy_on_device.
  void* other = d1.allocate(n * sizeof(int));
  kiln::runtime::copy_between_devices(d1, other, d1, dst, n * sizeof(int));
  std::fill(out.begin(), out.end(), 0);
  d1.copy_to_host(out.data(), other, n * sizeof(int));
  EXPECT_EQ(out, host);
  d0.free(src);
  d1.free(dst);
  d1.free(other);
}

class ScaleExecutable : public Executable {
 public:
  const std::string& name() const override { return name_; }
  const char* kind() const override { return "scale"; }
  // out[i] = in[i] * scalars[0] + ints[1], for i < ints[0]
  void run(const LaunchArgs& args) override {
    if (args.buffers.size() != 2 || args.ints.size() != 2 || args.scalars.size() != 1) {
      throw std::runtime_error("bad arity");
    }
    const double* in = static_cast<const double*>(args.buffers[0]);
    double* out = static_cast<double*>(args.buffers[1]);
    for (int64_t i = 0; i < args.ints[0]; ++i) out[i] = in[i] * args.scalars[0] + double(args.ints[1]);
    runs.fetch_add(1);
  }
  std::atomic<int> runs{0};

 private:
  std::string name_ = "kiln::scale";
};

TEST(Device, ExecutableLaunchRunsWithTheGivenArgs) {
  Device dev(0, kCap, false);
  const int64_t n = 64;
  std::vector<double> host(n);
  for (int64_t i = 0; i < n; ++i) host[i] = double(i);
  void* in = dev.allocate(n * sizeof(double));
  void* out = dev.allocate(n * sizeof(double));
  dev.copy_from_host(in, host.data(), n * sizeof(double));
  auto exe = std::make_shared<ScaleExecutable>();
  LaunchArgs args;
  args.buffers = {in, out};
  args.ints = {n, 3};
  args.scalars = {2.5};
  uint64_t seq = dev.launch(exe, args);
  EXPECT_GT(seq, 0u);
  std::vector<double> result(n, -1.0);
  dev.copy_to_host(result.data(), out, n * sizeof(double));
  for (int64_t i = 0; i < n; ++i) ASSERT_DOUBLE_EQ(result[i], double(i) * 2.5 + 3.0);
  EXPECT_EQ(exe->runs.load(), 1);

  // A failing executable is reported under its name.
  dev.launch(exe, LaunchArgs{});
  try {
    dev.synchronize();
    FAIL() << "expected LaunchError";
  } catch (const LaunchError& e) {
    EXPECT_EQ(e.launch_name, "kiln::scale");
    EXPECT_EQ(e.message, "bad arity");
  }
  dev.free(in);
  dev.free(out);
}

// Runtime is a process-wide singleton: this is the only test that creates it.
TEST(Runtime, InitDevicesAndOutOfRangeIndex) {
  RuntimeOptions opts;
  opts.device_count = 2;
  opts.capacity_bytes = kCap;
  Runtime& rt = Runtime::init(opts);
  EXPECT_TRUE(Runtime::initialized());
  EXPECT_EQ(&Runtime::get(), &rt);
  // Idempotent: a second init with other options returns the same runtime.
  RuntimeOptions other;
  other.device_count = 5;
  EXPECT_EQ(&Runtime::init(other), &rt);
  ASSERT_EQ(rt.device_count(), 2);
  EXPECT_EQ(rt.device(0).index(), 0);
  EXPECT_EQ(rt.device(1).index(), 1);
  EXPECT_EQ(rt.device(1).memory().capacity(), kCap);

  for (int bad : {2, -1, 17}) {
    try {
      rt.device(bad);
      FAIL() << "expected std::out_of_range for " << bad;
    } catch (const std::out_of_range& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find("device index " + std::to_string(bad)), std::string::npos) << msg;
      EXPECT_NE(msg.find("0..1"), std::string::npos) << msg;
    }
  }

  std::atomic<int> ran{0};
  rt.device(0).launch("a", [&] { ran.fetch_add(1); });
  rt.device(1).launch("b", [&] { ran.fetch_add(1); });
  rt.synchronize_all();
  EXPECT_EQ(ran.load(), 2);
}

}  // namespace
