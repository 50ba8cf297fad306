// The flush pipeline on a runtime device, without torch.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <map>
#include <string>

#include "kiln/engine.h"
#include "kiln/knobs.h"
#include "kiln/metrics.h"

using namespace kiln;
using ir::DType;
using ir::Op;

namespace {

trace::View contiguous(int32_t buffer, int64_t n) {
  trace::View v;
  v.buffer = buffer;
  v.dtype = DType::Float32;
  v.strides = {1};
  (void)n;
  return v;
}

// y = x * s + 1 over n floats, x and y device buffers.
trace::Trace axpb(void* x, void* y, int64_t n, double s) {
  trace::Trace t;
  t.buffers.push_back({x, size_t(n) * 4, false, false, nullptr});
  t.buffers.push_back({y, size_t(n) * 4, true, false, nullptr});
  trace::TraceOp op;
  op.name = "test::axpb";
  op.sizes = {n};
  int32_t v =
      op.add_node(Op::Mul, DType::Float32, op.load(contiguous(0, n)), op.cast(op.scalar_float(s), DType::Float32));
  op.store(contiguous(1, n), op.add_node(Op::Add, DType::Float32, v, op.constant(DType::Float32, 1)));
  t.ops.push_back(std::move(op));
  return t;
}

}  // namespace

TEST(Engine, FlushCompilesOnceAndLaunchesOnTheQueue) {
  engine::Options o;
  o.num_threads = 2;
  engine::configure(o);
  runtime::Device dev(0, 1 << 24, false);
  const int64_t n = 200000;  // large enough to split over both threads
  auto* x = static_cast<float*>(dev.allocate(n * 4));
  auto* y = static_cast<float*>(dev.allocate(n * 4));
  for (int64_t i = 0; i < n; ++i) x[i] = static_cast<float>(i % 100);
  Metrics::global().reset();
  engine::flush(dev, axpb(x, y, n, 2.0), "test");
  dev.synchronize();
  for (int64_t i = 0; i < n; i += 997) ASSERT_EQ(y[i], x[i] * 2.f + 1.f);
  engine::flush(dev, axpb(x, y, n, -3.0), "test");  // a new scalar: same plan and executable, its value bound
  dev.synchronize();
  for (int64_t i = 0; i < n; i += 997) ASSERT_EQ(y[i], x[i] * -3.f + 1.f);
  EXPECT_EQ(Metrics::global().get(Counter::ExecutableCache, "hit"), 1);
  EXPECT_EQ(Metrics::global().get(Counter::PlanCache, "miss"), 1);
  EXPECT_EQ(Metrics::global().get(Counter::PlanCache, "hit"), 1);  // the same structure: planned once
  EXPECT_EQ(Metrics::global().get(Counter::TraceFlushes, "test"), 2);
  EXPECT_EQ(Metrics::global().get(Counter::ExecutableLaunches, "pointwise"), 2);
  dev.free(x);
  dev.free(y);
}

TEST(Engine, DeadOutputsAreNotWrittenAndCostNoKernel) {
  runtime::Device dev(0, 1 << 20, false);
  auto* x = static_cast<float*>(dev.allocate(64 * 4));
  auto* y = static_cast<float*>(dev.allocate(64 * 4));
  std::memset(y, 0, 64 * 4);
  trace::Trace t = axpb(x, y, 64, 2.0);
  t.buffers[1].dead = true;
  Metrics::global().reset();
  engine::flush(dev, std::move(t), "test");
  dev.synchronize();
  EXPECT_EQ(Metrics::global().get(Counter::BytesNotWritten, "dead intermediates"), 64 * 4);
  EXPECT_EQ(Metrics::global().get(Counter::ExecutableLaunches, "pointwise"), 0);
  EXPECT_EQ(y[0], 0.f);
  dev.free(x);
  dev.free(y);
}

TEST(Engine, UnwritableDumpDirIsAClearError) {
  engine::Options o;
  o.dump_dir = "/proc/kiln-cannot-write-here";
  try {
    engine::configure(o);
    FAIL() << "accepted an unwritable KILN_DUMP_DIR";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("KILN_DUMP_DIR"), std::string::npos) << e.what();
  }
  engine::configure(engine::Options{});
}

// Compiling and loading a small kernel once, in the background; later calls
// do nothing, and waiting returns once it is done (also when it never started).
TEST(Engine, CompilerWarmsUpOnceInTheBackground) {
  engine::wait_for_compiler_warm_up();
  engine::start_compiler_warm_up();
  engine::wait_for_compiler_warm_up();
  const int64_t warm_up_us = Metrics::global().get(Counter::CompileTime, "warm_up_us");
  EXPECT_GT(warm_up_us, 0);
  engine::start_compiler_warm_up();
  engine::wait_for_compiler_warm_up();
  EXPECT_EQ(Metrics::global().get(Counter::CompileTime, "warm_up_us"), warm_up_us);
}

// options_for carries each knob to its option. With the knobs' defaults it
// gives what default-constructed options give (plans made without the knobs:
// tests, the compiler warm-up), except where the knob's default is computed.
TEST(Engine, OptionsFollowTheKnobs) {
  const engine::Options d = engine::options_for(parse_settings(std::map<std::string, std::string>{}));
  const engine::Options plain;
  EXPECT_EQ(d.fusion.max_ops, std::stoi(find_knob("KILN_FUSION_MAX_OPS")->default_value));
  EXPECT_EQ(d.fusion.max_ops, plain.fusion.max_ops);
  EXPECT_EQ(d.codegen.fast_math, std::string(find_knob("KILN_FAST_MATH")->default_value) == "1");
  EXPECT_EQ(d.codegen.fast_math, plain.codegen.fast_math);
  EXPECT_EQ(d.codegen.opt_level, std::stoi(find_knob("KILN_OPT_LEVEL")->default_value));
  EXPECT_EQ(d.codegen.opt_level, plain.codegen.opt_level);
  EXPECT_EQ(d.codegen.avx512_math, plain.codegen.avx512_math);  // not a knob
  EXPECT_EQ(d.num_threads, auto_num_threads());
  EXPECT_EQ(d.fusion.stream_min_bytes, (4 * int64_t{auto_num_threads()}) << 20);
  EXPECT_TRUE(d.dump_dir.empty());

  const engine::Options o =
      engine::options_for(parse_settings(std::map<std::string, std::string>{{"KILN_FUSION_MAX_OPS", "3"},
                                                                            {"KILN_STREAM_MIN_MB", "2"},
                                                                            {"KILN_FAST_MATH", "1"},
                                                                            {"KILN_OPT_LEVEL", "3"},
                                                                            {"KILN_NUM_THREADS", "5"},
                                                                            {"KILN_DUMP_DIR", "/tmp/kiln dump"}}));
  EXPECT_EQ(o.fusion.max_ops, 3);
  EXPECT_EQ(o.fusion.stream_min_bytes, int64_t{2} << 20);
  EXPECT_TRUE(o.codegen.fast_math);
  EXPECT_EQ(o.codegen.opt_level, 3);
  EXPECT_EQ(o.num_threads, 5);
  EXPECT_EQ(o.dump_dir, "/tmp/kiln dump");
}

namespace {

// y = (x * 5 + c) * 1 over 48 elements: two ops, fused into one kernel (a
// trace whose kernels each hold one op is compiled one occurrence later:
// AnAdaptiveTraceThatFusesNothingIsCompiledOneOccurrenceLaterUnlessLargeOrTiny), a kernel of its
// own per c. The first op's output is a fresh buffer the trace's owner
// freed: no store.
trace::Trace axpb_plus(void* x, void* y, double c) {
  trace::Trace t = axpb(x, y, 48, 5.0);
  for (ir::Node& n : t.ops[0].nodes)
    if (n.op == Op::Constant) n.imm = c;
  t.buffers[1] = {nullptr, 48 * 4, true, true, nullptr};  // x * 5 + c: dead, never stored
  t.buffers.push_back({y, 48 * 4, false, false, nullptr});
  trace::TraceOp times_one;
  times_one.name = "test::times_one";
  times_one.sizes = {48};
  times_one.store(contiguous(2, 48), times_one.add_node(Op::Mul, DType::Float32, times_one.load(contiguous(1, 48)),
                                                        times_one.constant(DType::Float32, 1)));
  t.ops.push_back(std::move(times_one));
  return t;
}

// Flushes y = x * 5 + c `occurrences` times under the compile thread, every
// compile 20 ms late (the tiers must not notice), each trace marked as the
// dispatch layer would (start_trace at its first op); after each, the
// program waits for the device if `program_waits`. Which occurrences ran as
// library kernels. A library-tier flush launches nothing: the library
// kernels ran as the ops were recorded.
std::vector<bool> library_occurrences(double c, int occurrences, bool program_waits) {
  engine::Options o;
  o.async_compile = true;
  o.compile_delay_ms = 20;
  engine::configure(o);
  runtime::Device dev(0, 1 << 20, false);
  auto* x = static_cast<float*>(dev.allocate(64 * 4));
  auto* y = static_cast<float*>(dev.allocate(64 * 4));
  for (int i = 0; i < 64; ++i) x[i] = static_cast<float>(i);
  std::vector<bool> library;
  for (int occurrence = 0; occurrence < occurrences; ++occurrence) {
    trace::Trace t = axpb_plus(x, y, c);
    const engine::TraceStart start = engine::start_trace(0, t.ops[0], false);
    t.start_key = start.key;
    t.ran_as_library = start.ran_as_library;
    library.push_back(start.ran_as_library);
    std::memset(y, 0, 48 * 4);
    engine::flush(dev, t, "test");
    dev.synchronize();
    if (program_waits) engine::program_waited(0);
    EXPECT_EQ(y[3], start.ran_as_library ? 0.f : static_cast<float>(3 * 5 + c)) << occurrence;
  }
  dev.free(x);
  dev.free(y);
  return library;
}

}  // namespace

// The adaptive policy's tiers: a key runs as library kernels until its
// fused kernels are queued and it was seen once more, then fused. Counts
// decide, never timing.
TEST(Engine, LibraryTierRunsATraceUntilItsKernelsWereQueuedAndSeenAgain) {
  Metrics::global().reset();
  // The first follows another trace, the rest follow this one: two keys,
  // each library until queued and seen again.
  EXPECT_EQ(library_occurrences(7, 5, false), (std::vector<bool>{true, true, true, false, false}));
  EXPECT_EQ(Metrics::global().get(Counter::Tiers, "library"), 3);
  EXPECT_EQ(Metrics::global().get(Counter::Tiers, "fused"), 2);
  // Without the compile thread and with threshold 1 (the fixed policy) nothing is a library trace.
  engine::configure(engine::Options{});
  EXPECT_FALSE(engine::start_trace(0, axpb_plus(nullptr, nullptr, 7).ops[0], false).ran_as_library);
}

// A trace whose every kernel would hold one op gains only each library
// kernel's fixed cost fused: the adaptive policy compiles it one occurrence
// later than a trace that fuses, and never where its op covers more than
// 2^17 elements or 2^10 and fewer (then it runs as library kernels at
// every occurrence, and no kernel is looked up). The fixed policy fuses it
// at first sight.
TEST(Engine, AnAdaptiveTraceThatFusesNothingIsCompiledOneOccurrenceLaterUnlessLargeOrTiny) {
  constexpr int64_t kTiny = int64_t{1} << 10, kSmall = kTiny + 56, kLarge = (int64_t{1} << 17) + 8;
  runtime::Device dev(0, 1 << 22, false);
  auto* x = static_cast<float*>(dev.allocate(kLarge * 4));
  auto* y = static_cast<float*>(dev.allocate(kLarge * 4));
  for (int i = 0; i < 56; ++i) x[i] = static_cast<float>(i);
  auto occurrences = [&](const engine::Options& o, int length) {
    engine::configure(o);
    Metrics::global().reset();
    std::vector<bool> library;
    for (int occurrence = 0; occurrence < 5; ++occurrence) {
      trace::Trace t = axpb(x, y, length, 7.0);  // y = x * 7 + 1: one op, sizes no other test flushes
      const engine::TraceStart start = engine::start_trace(0, t.ops[0], false);
      t.start_key = start.key;
      t.ran_as_library = start.ran_as_library;
      library.push_back(start.ran_as_library);
      std::memset(y, 0, 56 * 4);
      engine::flush(dev, t, "test");
      dev.synchronize();
      engine::program_waited(0);
      EXPECT_EQ(y[3], start.ran_as_library ? 0.f : 3.f * 7.f + 1.f) << occurrence;
    }
    return library;
  };
  engine::Options adaptive;
  adaptive.async_compile = true;
  adaptive.compile_threshold = 1;
  // A trace that fuses would be compiled at its first occurrence, and run
  // fused from its second; this one is compiled at its second, and runs
  // fused from its third.
  EXPECT_EQ(occurrences(adaptive, kSmall), std::vector<bool>({true, true, false, false, false}));
  EXPECT_EQ(Metrics::global().get(Counter::Tiers, "library"), 2);
  EXPECT_EQ(Metrics::global().get(Counter::ExecutableLaunches, "pointwise"), 3);
  // Before then, not compiled, nor looked up: no kernel was resolved.
  adaptive.compile_threshold = 5;
  EXPECT_EQ(occurrences(adaptive, kSmall - 1), std::vector<bool>(5, true));
  EXPECT_EQ(Metrics::global().get(Counter::KernelsCompiled, "pointwise"), 0);
  EXPECT_EQ(Metrics::global().get(Counter::ExecutableCache, "miss"), 0);
  EXPECT_EQ(Metrics::global().get(Counter::ExecutableCache, "hit"), 0);
  adaptive.compile_threshold = 1;
  EXPECT_EQ(occurrences(adaptive, kLarge), std::vector<bool>(5, true));
  EXPECT_EQ(Metrics::global().get(Counter::ExecutableCache, "miss"), 0);
  EXPECT_EQ(Metrics::global().get(Counter::ExecutableCache, "hit"), 0);
  EXPECT_EQ(occurrences(adaptive, kTiny), std::vector<bool>(5, true));
  EXPECT_EQ(Metrics::global().get(Counter::ExecutableCache, "miss"), 0);
  EXPECT_EQ(Metrics::global().get(Counter::ExecutableCache, "hit"), 0);
  engine::Options fixed;
  EXPECT_EQ(occurrences(fixed, kSmall - 2), std::vector<bool>(5, false));
  EXPECT_EQ(Metrics::global().get(Counter::ExecutableLaunches, "pointwise"), 5);
  engine::configure(engine::Options{});
  dev.free(x);
  dev.free(y);
}

// Once the program has waited for the device (a step's end), a trace whose
// kernels were queued before runs fused at its next occurrence, without the
// library occurrence a program that never waits takes (the test above).
// A trace that starts with a large op runs fused at first sight.
TEST(Engine, AQueuedTraceRunsFusedAfterTheProgramWaitedAndALargeOneAtOnce) {
  // Two keys (the first follows another trace); the second's kernels were
  // queued at its first occurrence, and the program waited since.
  EXPECT_EQ(library_occurrences(9, 3, true), (std::vector<bool>{true, true, false}));
  engine::Options o;
  o.async_compile = true;
  engine::configure(o);
  trace::TraceOp large = axpb_plus(nullptr, nullptr, 11).ops[0];
  large.sizes = {int64_t{1} << 20};
  const engine::TraceStart at_once = engine::start_trace(0, large, false);
  EXPECT_FALSE(at_once.ran_as_library);
  EXPECT_EQ(at_once.hold_until_ops, 2);  // fused once a second op joins it
  large.sizes = {(int64_t{1} << 20) - 1};
  const engine::TraceStart small = engine::start_trace(0, large, false);
  EXPECT_TRUE(small.ran_as_library);
  EXPECT_EQ(small.hold_until_ops, 0);
  engine::configure(engine::Options{});
}

// A trace that holds its first op's launch (a large op, Trace::hold_until_ops)
// and no second op joined: its flush launches the held op, counts it, and
// runs nothing fused; its trace is a library occurrence.
TEST(Engine, AHeldLaunchRunsAsALibraryKernelWhenNoOtherOpJoined) {
  engine::Options o;
  o.async_compile = true;
  engine::configure(o);
  runtime::Device dev(0, 1 << 20, false);
  auto* x = static_cast<float*>(dev.allocate(40 * 4));
  auto* y = static_cast<float*>(dev.allocate(40 * 4));
  for (int i = 0; i < 40; ++i) x[i] = static_cast<float>(i);
  std::memset(y, 0, 40 * 4);
  trace::Trace t = axpb(x, y, 40, 3.0);
  t.hold_until_ops = 2;
  int counted = 0;
  t.held_launches.push_back({"test::held", [&] { y[0] = 42.f; }, [&] { ++counted; }});
  const int64_t library_before = Metrics::global().get(Counter::Tiers, "library");
  engine::flush(dev, t, "test");
  dev.synchronize();
  EXPECT_EQ(y[0], 42.f);  // the held launch ran
  EXPECT_EQ(y[1], 0.f);   // and no fused kernel
  EXPECT_EQ(counted, 1);
  EXPECT_EQ(Metrics::global().get(Counter::Tiers, "library"), library_before + 1);
  engine::configure(engine::Options{});
  dev.free(x);
  dev.free(y);
}

// y = x * 5 + c over 48 floats on a device of its own, every compile
// `delay_ms` late on the compile thread: a kernel of its own per c.
struct DelayedCompiles {
  explicit DelayedCompiles(int delay_ms) : dev(0, 1 << 20, false) {
    engine::Options o;
    o.async_compile = true;
    o.compile_delay_ms = delay_ms;
    engine::configure(o);
    engine::wait_for_compiler_warm_up();
    x = static_cast<float*>(dev.allocate(48 * 4));
    y = static_cast<float*>(dev.allocate(48 * 4));
    for (int i = 0; i < 48; ++i) x[i] = static_cast<float>(i);
  }
  ~DelayedCompiles() {
    engine::configure(engine::Options{});
    dev.free(x);
    dev.free(y);
  }
  trace::Trace trace(double c, bool library) const {
    trace::Trace t = axpb_plus(x, y, c);
    t.ran_as_library = library;
    return t;
  }
  runtime::Device dev;
  float* x = nullptr;
  float* y = nullptr;
};

// A fused launch whose kernel is still queued behind compiles for later
// occurrences compiles it on the device's worker: the device waits for its
// own kernel, not for the queue (three compiles of 300 ms each: about 300
// ms, beside the compile thread's first, not 900).
TEST(Engine, TheDeviceWaitsForItsOwnKernelNotTheWholeCompileQueue) {
  DelayedCompiles d(300);
  const auto start = std::chrono::steady_clock::now();
  for (double c : {31.0, 32.0, 33.0}) engine::flush(d.dev, d.trace(c, true), "test");  // queued, launched nothing
  engine::flush(d.dev, d.trace(33.0, false), "test");                                  // needs the last one queued
  d.dev.synchronize();
  const auto ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(d.y[2], 2.f * 5.f + 33.f);
  EXPECT_LT(ms, 550) << "the launch waited behind the other queued compiles";
}

// wait_for_background_compiles returns once every queued compile ran,
// whichever thread ran it (the last one's fused launch makes the device's
// worker take it from the queue, if the compile thread has not started it):
// the counts a program reads after it are those of every compile it queued.
TEST(Engine, WaitingForBackgroundCompilesCoversTheQueueAndTheDevicesOwn) {
  DelayedCompiles d(150);
  engine::wait_for_background_compiles();  // what earlier tests queued
  const int64_t before = Metrics::global().get(Counter::KernelsCompiled, "pointwise");
  for (double c : {41.0, 42.0, 43.0}) engine::flush(d.dev, d.trace(c, true), "test");  // queued, launched nothing
  engine::flush(d.dev, d.trace(43.0, false), "test");                                  // needs the last one queued
  EXPECT_EQ(Metrics::global().get(Counter::KernelsCompiled, "pointwise"), before);     // none done yet: 150 ms each
  engine::wait_for_background_compiles();
  EXPECT_EQ(Metrics::global().get(Counter::KernelsCompiled, "pointwise"), before + 3);
  d.dev.synchronize();
  EXPECT_EQ(d.y[2], 2.f * 5.f + 43.f);
}
