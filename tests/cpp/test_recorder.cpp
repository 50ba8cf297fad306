// The recorder, the flush and the runtime together, without torch: what
// the dispatch layer does for every traced op, and the frees that race it.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <future>
#include <thread>
#include <vector>

#include "kiln/engine.h"
#include "kiln/metrics.h"
#include "kiln/recorder.h"

using namespace kiln;
using ir::DType;
using ir::Op;

namespace {

constexpr size_t kCap = 1 << 24;

trace::View contiguous(int32_t buffer) {
  trace::View v;
  v.buffer = buffer;
  v.dtype = DType::Float32;
  v.strides = {1};
  return v;
}

// Records y = x * s + 1 over n floats; y is fresh (allocated for the trace).
void record_axpb(trace::PendingTrace& t, void* x, void* y, int64_t n, double s) {
  const int32_t bx = t.buffer(x, size_t(n) * 4, false, std::make_shared<int>(0));
  const int32_t by = t.buffer(y, size_t(n) * 4, true, nullptr);
  trace::TraceOp op;
  op.name = "test::axpb";
  op.sizes = {n};
  int32_t v =
      op.add_node(Op::Mul, DType::Float32, op.load(contiguous(bx)), op.cast(op.scalar_float(s), DType::Float32));
  op.store(contiguous(by), op.add_node(Op::Add, DType::Float32, v, op.constant(DType::Float32, 1)));
  t.append(std::move(op));
}

void flush(trace::Recorder& rec, runtime::Device& dev) {
  rec.flush([&](const trace::Trace& t) { engine::flush(dev, t, "test"); });
}

// Runs `fn` on another thread and says whether it returned within a second
// (a free that blocked on the recorder's lock would not).
bool returns_promptly(std::function<void()> fn) {
  auto done = std::async(std::launch::async, std::move(fn));
  return done.wait_for(std::chrono::seconds(1)) == std::future_status::ready;
}

}  // namespace

TEST(Recorder, RecordsFlushesAndRunsOnTheDevice) {
  runtime::Device dev(0, kCap, false);
  trace::Recorder rec(dev);
  const int64_t n = 1000;
  auto* x = static_cast<float*>(dev.allocate(n * 4));
  auto* y = static_cast<float*>(dev.allocate(n * 4));
  for (int64_t i = 0; i < n; ++i) x[i] = float(i);
  EXPECT_EQ(rec.record([&](trace::PendingTrace& t) { record_axpb(t, x, y, n, 3.0); }), 1u);
  EXPECT_EQ(rec.pending(), 1u);
  flush(rec, dev);
  EXPECT_EQ(rec.pending(), 0u);
  dev.synchronize();
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(y[i], float(i) * 3.f + 1.f);
  flush(rec, dev);  // nothing pending: no launch
  EXPECT_TRUE(dev.idle());
  rec.free(x);
  rec.free(y);
  dev.synchronize();
  EXPECT_EQ(dev.memory().stats().allocated_bytes, 0);
}

TEST(Recorder, AFreshOutputFreedBeforeTheFlushIsNeverWritten) {
  runtime::Device dev(0, kCap, false);
  trace::Recorder rec(dev);
  auto* x = static_cast<float*>(dev.allocate(64 * 4));
  void* y = dev.allocate(64 * 4);
  rec.record([&](trace::PendingTrace& t) { record_axpb(t, x, y, 64, 2.0); });
  Metrics::global().reset();
  rec.free(y);  // its owner let go: the store is dead
  flush(rec, dev);
  dev.synchronize();
  EXPECT_EQ(Metrics::global().get(Counter::BytesNotWritten, "dead intermediates"), 64 * 4);
  EXPECT_EQ(Metrics::global().get(Counter::ExecutableLaunches, "pointwise"), 0);
  rec.free(x);
  dev.synchronize();
  EXPECT_EQ(dev.memory().stats().allocated_bytes, 0);
}

// A free from another thread while the recorder is held (a queue worker
// dropping a library kernel's arguments during a flush) waits in a list, and
// its memory stays allocated until the recorder has seen it.
TEST(Recorder, AFreeDuringAFlushIsDeferredNotLost) {
  runtime::Device dev(0, kCap, false);
  trace::Recorder rec(dev);
  auto* x = static_cast<float*>(dev.allocate(64 * 4));
  void* y = dev.allocate(64 * 4);
  void* other = dev.allocate(64 * 4);
  rec.record([&](trace::PendingTrace& t) { record_axpb(t, x, y, 64, 2.0); });
  const int64_t live_before = dev.memory().stats().live_allocations;
  bool prompt = false;
  rec.flush([&](const trace::Trace& t) {
    prompt = returns_promptly([&] { rec.free(other); });
    engine::flush(dev, t, "test");
  });
  EXPECT_TRUE(prompt) << "a free blocked on the recorder held by a flush";
  dev.synchronize();
  EXPECT_EQ(dev.memory().stats().live_allocations, live_before) << "freed before the recorder saw it";
  EXPECT_EQ(rec.pending(), 0u);  // taking the lock drains the list
  dev.synchronize();
  EXPECT_EQ(dev.memory().stats().live_allocations, live_before - 1);
  rec.free(x);
  rec.free(y);
  dev.synchronize();
  EXPECT_EQ(dev.memory().stats().allocated_bytes, 0);
}

// A deferred free of a pending output still makes it dead at the flush.
TEST(Recorder, ADeferredFreeOfAPendingOutputMakesItDead) {
  runtime::Device dev(0, kCap, false);
  trace::Recorder rec(dev);
  auto* x = static_cast<float*>(dev.allocate(64 * 4));
  void* y = dev.allocate(64 * 4);
  bool prompt = false;
  rec.record([&](trace::PendingTrace& t) {
    record_axpb(t, x, y, 64, 2.0);
    prompt = returns_promptly([&] { rec.free(y); });
  });
  EXPECT_TRUE(prompt);
  Metrics::global().reset();
  flush(rec, dev);
  dev.synchronize();
  EXPECT_EQ(Metrics::global().get(Counter::BytesNotWritten, "dead intermediates"), 64 * 4);
  rec.free(x);
  dev.synchronize();
  EXPECT_EQ(dev.memory().stats().allocated_bytes, 0);
}

// The flush destroys the trace after letting go of the lock: a keepalive
// whose destructor frees into the recorder (a storage deleter) frees at once.
TEST(Recorder, TheTraceIsDestroyedAfterTheLockIsReleased) {
  runtime::Device dev(0, kCap, false);
  trace::Recorder rec(dev);
  auto* x = static_cast<float*>(dev.allocate(64 * 4));
  void* y = dev.allocate(64 * 4);
  void* held = dev.allocate(64 * 4);
  rec.record([&](trace::PendingTrace& t) {
    record_axpb(t, x, y, 64, 2.0);
    // The only owner of `held` is the trace, as for a tensor dropped after recording.
    t.buffer(held, 64 * 4, false, std::shared_ptr<void>(held, [&rec](void* p) { rec.free(p); }));
  });
  const int64_t live_before = dev.memory().stats().live_allocations;
  flush(rec, dev);
  dev.synchronize();
  EXPECT_EQ(dev.memory().stats().live_allocations, live_before - 1) << "the keepalive's free was deferred";
  rec.free(x);
  rec.free(y);
  dev.synchronize();
  EXPECT_EQ(dev.memory().stats().allocated_bytes, 0);
}

// Recording and flushing on one thread while another frees the outputs as
// soon as they are recorded, as autograd and a queue worker do: every free
// lands, once, and every output that lived to its flush is computed.
TEST(Recorder, FreesRacingFlushesAllLand) {
  runtime::Device dev(0, kCap, false);
  trace::Recorder rec(dev);
  const int64_t n = 256;
  auto* x = static_cast<float*>(dev.allocate(n * 4));
  for (int64_t i = 0; i < n; ++i) x[i] = float(i);
  std::mutex mu;
  std::condition_variable cv;
  std::vector<void*> to_free;
  bool done = false;
  std::thread freer([&] {
    for (;;) {
      std::unique_lock<std::mutex> lock(mu);
      cv.wait(lock, [&] { return done || !to_free.empty(); });
      if (to_free.empty()) return;
      void* p = to_free.back();
      to_free.pop_back();
      lock.unlock();
      rec.free(p);
    }
  });
  const int kSteps = 2000;
  for (int i = 0; i < kSteps; ++i) {
    void* y = dev.allocate(n * 4);
    rec.record([&](trace::PendingTrace& t) { record_axpb(t, x, y, n, double(i % 7)); });
    {
      std::lock_guard<std::mutex> lock(mu);
      to_free.push_back(y);
    }
    cv.notify_one();
    if (i % 3 == 0) flush(rec, dev);
  }
  {
    std::lock_guard<std::mutex> lock(mu);
    done = true;
  }
  cv.notify_one();
  freer.join();
  flush(rec, dev);  // drains what is still deferred
  rec.free(x);
  dev.synchronize();
  EXPECT_EQ(dev.memory().stats().allocated_bytes, 0);
  EXPECT_EQ(dev.memory().stats().free_count, dev.memory().stats().allocation_count);
}

// x is held by the trace alone (its keepalive); y = x * 2 + 1 is recorded
// into x's memory, which the take function hands over; then z = y * 3 + 1.
// The write of y comes after the read of x, as an in-place op's would.
TEST(Recorder, AnOutputTakesMemoryOnlyTheTraceHeldAfterItsReads) {
  runtime::Device dev(0, kCap, false);
  trace::Recorder rec(dev);
  const int64_t n = 256;
  auto* x = static_cast<float*>(dev.allocate(n * 4));
  auto* z = static_cast<float*>(dev.allocate(n * 4));
  for (int64_t i = 0; i < n; ++i) x[i] = float(i);
  void* y0 = dev.allocate(n * 4);
  rec.record([&](trace::PendingTrace& t) { record_axpb(t, x, y0, n, 2.0); });  // y0 = x * 2 + 1
  int takes = 0;
  auto take = [&](const std::shared_ptr<void>&) -> void* {
    ++takes;
    return x;  // as if nothing but the trace held x
  };
  EXPECT_EQ(rec.adopt_held_block(n * 4 + 4, take), nullptr);  // no held buffer of that size
  EXPECT_EQ(takes, 0);
  void* y = rec.adopt_held_block(n * 4, take);
  ASSERT_EQ(y, x);
  EXPECT_EQ(rec.adopt_held_block(n * 4, take), nullptr);  // taken once only
  EXPECT_EQ(takes, 1);
  rec.record([&](trace::PendingTrace& t) { record_axpb(t, y0, y, n, 3.0); });  // y = y0 * 3 + 1 into x's memory
  rec.record([&](trace::PendingTrace& t) { record_axpb(t, y, z, n, 1.0); });   // z = y + 1
  rec.free(y);  // the new owner lets go before the flush: the memory waits for the trace
  EXPECT_EQ(dev.memory().stats().allocated_bytes, int64_t(3 * n * 4));
  flush(rec, dev);
  dev.synchronize();
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(z[i], (float(i) * 2.f + 1.f) * 3.f + 2.f);
  EXPECT_EQ(dev.memory().stats().allocated_bytes, int64_t(2 * n * 4));  // x's memory is back
  rec.free(y0);
  rec.free(z);
  EXPECT_EQ(dev.memory().stats().allocated_bytes, 0);
}

// The adaptive policy's key of an op: what it computes over which layout,
// not which buffers it touches nor its scalar values.
TEST(Trace, OpHashIsTheOpsStructureNotItsBuffersOrScalars) {
  auto op = [](int32_t in, int32_t out, int64_t n, int64_t stride, double scalar) {
    trace::TraceOp o;
    o.name = "test::scale";
    o.sizes = {n};
    trace::View v;
    v.buffer = in;
    v.strides = {stride};
    trace::View w = v;
    w.buffer = out;
    w.strides = {1};
    o.store(w,
            o.add_node(ir::Op::Mul, ir::DType::Float32, o.load(v), o.cast(o.scalar_float(scalar), ir::DType::Float32)));
    return o;
  };
  const uint64_t h = trace::op_hash(op(0, 1, 64, 1, 2.0));
  EXPECT_EQ(trace::op_hash(op(3, 7, 64, 1, 2.0)), h);   // other buffers
  EXPECT_EQ(trace::op_hash(op(0, 1, 64, 1, -0.5)), h);  // another scalar value
  EXPECT_NE(trace::op_hash(op(0, 1, 65, 1, 2.0)), h);   // another size
  EXPECT_NE(trace::op_hash(op(0, 1, 64, 2, 2.0)), h);   // another layout
  trace::TraceOp renamed = op(0, 1, 64, 1, 2.0);
  renamed.name = "test::other";
  EXPECT_NE(trace::op_hash(renamed), h);
}
