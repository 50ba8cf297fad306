// Micro-benchmarks of the lazy pipeline's core, without torch: recording an
// op into a micro-trace, hashing a kernel into its executable key,
// partitioning traces into regions, and compiling regions by size.
#include <benchmark/benchmark.h>

#include <immintrin.h>
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "bench_kernels.h"
#include "kiln/cache.h"
#include "kiln/codegen.h"
#include "kiln/fusion.h"
#include "kiln/recorder.h"
#include "kiln/trace.h"

using namespace kiln;

namespace {

trace::View view(int32_t buffer, const std::vector<int64_t>& sizes) {
  trace::View v;
  v.buffer = buffer;
  v.dtype = ir::DType::Float32;
  int64_t s = 1;
  v.strides.assign(sizes.size(), 0);
  for (size_t d = sizes.size(); d-- > 0;) {
    v.strides[d] = sizes[d] == 1 ? 0 : s;
    s *= sizes[d];
  }
  return v;
}

// y = x * s + z as a lowering builds it.
trace::TraceOp pointwise_op(int32_t x, int32_t z, int32_t y, const std::vector<int64_t>& sizes, double s) {
  trace::TraceOp op;
  op.name = "aten::mul";
  op.sizes = sizes;
  int32_t v = op.add_node(ir::Op::Mul, ir::DType::Float32, op.load(view(x, sizes)),
                          op.cast(op.scalar_float(s), ir::DType::Float32));
  op.store(view(y, sizes), op.add_node(ir::Op::Add, ir::DType::Float32, v, op.load(view(z, sizes))));
  return op;
}

trace::TraceOp sum_rows(int32_t x, int32_t y, const std::vector<int64_t>& sizes) {
  trace::TraceOp op;
  op.name = "aten::amax";
  op.sizes = sizes;
  op.reduced = uint64_t(1) << (sizes.size() - 1);
  trace::View out = view(y, sizes);
  out.strides.back() = 0;
  op.store(out, op.reduce(ir::ReduceKind::Max, ir::DType::Float32, op.load(view(x, sizes))));
  return op;
}

// A trace of `n` ops: chains of pointwise ops over two shapes with a row
// reduction every tenth op, each op writing a fresh buffer.
trace::Trace make_trace(int n) {
  trace::Trace t;
  const std::vector<int64_t> a = {64, 128}, b = {4096};
  auto fresh = [&](size_t bytes) {
    t.buffers.push_back({nullptr, bytes, true, false, nullptr});
    return static_cast<int32_t>(t.buffers.size()) - 1;
  };
  int32_t xa = fresh(64 * 128 * 4), xb = fresh(4096 * 4);
  for (int i = 0; i < n; ++i) {
    if (i % 10 == 9) {
      int32_t r = fresh(64 * 4);
      t.ops.push_back(sum_rows(xa, r, a));
    } else if ((i / 20) % 2 == 0) {
      int32_t y = fresh(64 * 128 * 4);
      t.ops.push_back(pointwise_op(xa, xa, y, a, 1.5));
      xa = y;
    } else {
      int32_t y = fresh(4096 * 4);
      t.ops.push_back(pointwise_op(xb, xb, y, b, 0.5));
      xb = y;
    }
  }
  return t;
}

void BM_RecordOp(benchmark::State& state) {
  static runtime::Device dev(0, 1 << 20, false);
  trace::Recorder rec(dev);
  std::vector<float> mem(3 * 256);
  const std::vector<int64_t> sizes = {256};
  int64_t n = 0;
  for (auto _ : state) {
    rec.record([&](trace::PendingTrace& t) {
      int32_t x = t.buffer(mem.data(), 1024, false, nullptr);
      int32_t z = t.buffer(mem.data() + 256, 1024, false, nullptr);
      int32_t y = t.buffer(mem.data() + 512, 1024, true, nullptr);
      t.append(pointwise_op(x, z, y, sizes, 1.5));
    });
    if (++n % 1024 == 0) rec.flush([](const trace::Trace& t) { benchmark::DoNotOptimize(t.ops.data()); });
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_RecordOp);

void BM_KernelKey(benchmark::State& state) {
  trace::Trace t = make_trace(9);  // one 9-op pointwise region
  fusion::Plan p = fusion::plan(t, {});
  const ir::Kernel& k = p.kernels.at(0).kernel;
  const std::string fingerprint = codegen::environment_fingerprint({});
  for (auto _ : state) benchmark::DoNotOptimize(cache::make_key(ir::serialize(k), fingerprint));
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_KernelKey);

void BM_Partition(benchmark::State& state) {
  trace::Trace t = make_trace(static_cast<int>(state.range(0)));
  for (auto _ : state) benchmark::DoNotOptimize(fusion::plan(t, {}));
  state.SetItemsProcessed(state.iterations() * state.range(0));
}
BENCHMARK(BM_Partition)->Arg(100)->Arg(1000)->Unit(benchmark::kMicrosecond);

// What a flush of a known trace structure pays instead of partitioning: the
// plan signature and its hash (compare BM_Partition at the same size).
void BM_PlanSignature(benchmark::State& state) {
  trace::Trace t = make_trace(static_cast<int>(state.range(0)));
  const std::string fingerprint = codegen::environment_fingerprint({});
  for (auto _ : state) benchmark::DoNotOptimize(cache::make_key(fusion::plan_signature(t, {}), fingerprint));
  state.SetItemsProcessed(state.iterations() * state.range(0));
}
BENCHMARK(BM_PlanSignature)->Arg(100)->Arg(1000)->Unit(benchmark::kMicrosecond);

// Compile time of a pointwise region of N ops (IR -> optimized object), by N.
void BM_Compile(benchmark::State& state) {
  trace::Trace region;
  region.buffers.push_back({nullptr, 64 * 128 * 4, false, false, nullptr});
  const std::vector<int64_t> a = {64, 128};
  int32_t x = 0;
  for (int i = 0; i < state.range(0); ++i) {  // a chain of N ops, one kernel; only the last result is live
    region.buffers.push_back({nullptr, 64 * 128 * 4, true, false, nullptr});
    int32_t y = static_cast<int32_t>(region.buffers.size()) - 1;
    region.ops.push_back(pointwise_op(x, 0, y, a, 1.0 + i));
    x = y;
  }
  for (size_t b = 1; b + 1 < region.buffers.size(); ++b) region.buffers[b].dead = true;
  fusion::Plan p = fusion::plan(region, {.max_ops = 4096});
  const ir::Kernel& k = p.kernels.at(0).kernel;
  int64_t n = 0;
  for (auto _ : state) {
    benchmark::DoNotOptimize(codegen::compile(k, "kiln_bench_" + std::to_string(n++), {}));
  }
  state.counters["ops"] = static_cast<double>(state.range(0));
}
BENCHMARK(BM_Compile)->Arg(1)->Arg(8)->Arg(32)->Arg(64)->Unit(benchmark::kMillisecond);

}  // namespace

namespace kiln::bench {

fusion::PlannedKernel chain_kernel(int variant, int64_t n) {
  trace::Trace t;
  t.buffers.push_back({nullptr, size_t(n) * 4, false, false, nullptr});
  t.buffers.push_back({nullptr, size_t(n) * 4, true, false, nullptr});
  trace::TraceOp op;
  op.name = "chain";
  op.sizes = {n};
  const auto f = ir::DType::Float32;
  auto s = [&](double v) { return op.cast(op.scalar_float(v), f); };
  int32_t x = op.load(view(0, {n}));
  int32_t y = op.add_node(ir::Op::Add, f, op.add_node(ir::Op::Mul, f, x, s(1.5)), s(0.25));
  if (variant & 1) y = op.add_node(ir::Op::Mul, f, op.add_node(ir::Op::Sin, f, y), x);
  if (variant & 2) y = op.add_node(ir::Op::Sub, f, op.add_node(ir::Op::Exp, f, y), s(0.5));
  if (variant & 4) y = op.add_node(ir::Op::Mul, f, op.add_node(ir::Op::Tanh, f, y), s(2.0));
  op.store(view(1, {n}), y);
  t.ops.push_back(std::move(op));
  return fusion::plan(t, {}).kernels.at(0);
}

}  // namespace kiln::bench

namespace {

using kiln::bench::chain_kernel;

// The chain as one compiled kernel, run on the calling thread only: the
// kernel's own speed, without the queue, the pool or Python. 4096 elements
// stay in L1 (the math alone), 4M is the benchmark's size.
void BM_FusedChainKernel(benchmark::State& state) {
  const int variant = static_cast<int>(state.range(0));
  const int64_t n = state.range(1);
  const fusion::PlannedKernel k = chain_kernel(variant, n);
  auto obj = codegen::compile(k.kernel, "kiln_bench_chain", {});
  auto loaded = codegen::load(obj.object, "kiln_bench_chain");
  std::vector<float> in(n), out(n);
  for (int64_t i = 0; i < n; ++i) in[i] = static_cast<float>((i % 1000) - 500) / 250.f;
  void* bufs[] = {in.data(), out.data()};
  for (auto _ : state) {
    loaded->fn(bufs, k.ints.data(), k.scalars.data(), 0, n);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * n * 8);
}
BENCHMARK(BM_FusedChainKernel)
    ->ArgsProduct({benchmark::CreateDenseRange(0, 7, 1), {4096, 4 << 20}})
    ->Unit(benchmark::kMicrosecond);

// Compile time of the chain kernel above (variant 7: the largest region of
// the end-to-end benchmarks, so the one that sets the 99th percentile).
void BM_CompileChain(benchmark::State& state) {
  const fusion::PlannedKernel k = chain_kernel(static_cast<int>(state.range(0)), 4096);
  int64_t n = 0;
  for (auto _ : state)
    benchmark::DoNotOptimize(codegen::compile(k.kernel, "kiln_bench_chain_" + std::to_string(n++), {}));
}
BENCHMARK(BM_CompileChain)->Arg(7)->Unit(benchmark::kMillisecond);

// KILN_OPT_LEVEL's trade: compile time of the chain kernel (variant 7) and
// of a 64-op pointwise region, and the chain kernel's speed on 4096
// elements (in L1: the code alone), at each level.
void BM_CompileAtOptLevel(benchmark::State& state) {
  codegen::Options o;
  o.opt_level = static_cast<int>(state.range(0));
  const fusion::PlannedKernel k = chain_kernel(7, 4096);
  int64_t n = 0;
  for (auto _ : state)
    benchmark::DoNotOptimize(codegen::compile(k.kernel, "kiln_bench_level_" + std::to_string(n++), o));
}
BENCHMARK(BM_CompileAtOptLevel)->DenseRange(0, 3)->Unit(benchmark::kMillisecond);

void BM_ChainKernelAtOptLevel(benchmark::State& state) {
  codegen::Options o;
  o.opt_level = static_cast<int>(state.range(0));
  const int64_t n = 4096;
  const fusion::PlannedKernel k = chain_kernel(7, n);
  auto obj = codegen::compile(k.kernel, "kiln_bench_level_chain", o);
  auto loaded = codegen::load(obj.object, "kiln_bench_level_chain");
  std::vector<float> in(n), out(n);
  for (int64_t i = 0; i < n; ++i) in[i] = static_cast<float>((i % 1000) - 500) / 250.f;
  void* bufs[] = {in.data(), out.data()};
  for (auto _ : state) {
    loaded->fn(bufs, k.ints.data(), k.scalars.data(), 0, n);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * n * 8);
}
BENCHMARK(BM_ChainKernelAtOptLevel)->DenseRange(0, 3)->Unit(benchmark::kMicrosecond);

// Times a baseline kernel and a candidate alternately, one `run` each per
// benchmark iteration, so that both see the same machine (it is noisy), and
// sets counters: the best time of each under its name, and the candidate's
// speedup.
struct Contender {
  const char* counter;
  codegen::KernelFn fn;
};
void race(benchmark::State& state, const std::function<double(codegen::KernelFn)>& run, Contender baseline,
          Contender candidate) {
  double base = 1e30, cand = 1e30;
  for (auto _ : state) {
    base = std::min(base, run(baseline.fn));
    cand = std::min(cand, run(candidate.fn));
  }
  state.counters[baseline.counter] = base;
  state.counters[candidate.counter] = cand;
  state.counters["speedup"] = base / cand;
}

// The same kernel over 4M elements with cached and with streaming
// (non-temporal) stores, run alternately on 1 or 2 threads (the range split
// in halves, as the pool would) so that both see the same machine: the
// first argument is the variant as above (0: the memory-bound frame, 7: the
// chain). Counters: the best time of each, and streaming's speedup.
void BM_StreamingStores(benchmark::State& state) {
  const int variant = static_cast<int>(state.range(0));
  const int threads = static_cast<int>(state.range(1));
  const int64_t n = 4 << 20;
  const fusion::PlannedKernel k = chain_kernel(variant, n);
  ir::Kernel streaming = k.kernel;
  streaming.streaming_stores = true;
  auto cached_fn = codegen::load(codegen::compile(k.kernel, "kiln_bench_cached", {}).object, "kiln_bench_cached");
  auto streaming_fn =
      codegen::load(codegen::compile(streaming, "kiln_bench_streaming", {}).object, "kiln_bench_streaming");
  // 64-byte aligned, as the device pool allocates.
  auto* in = static_cast<float*>(std::aligned_alloc(64, n * 4));
  auto* out = static_cast<float*>(std::aligned_alloc(64, n * 4));
  for (int64_t i = 0; i < n; ++i) in[i] = static_cast<float>((i % 1000) - 500) / 250.f;
  std::fill(out, out + n, 0.f);
  void* bufs[] = {in, out};
  auto run = [&](codegen::KernelFn fn) {
    const auto start = std::chrono::steady_clock::now();
    if (threads == 1) {
      fn(bufs, k.ints.data(), k.scalars.data(), 0, n);
    } else {
      std::thread other([&] { fn(bufs, k.ints.data(), k.scalars.data(), n / 2, n); });
      fn(bufs, k.ints.data(), k.scalars.data(), 0, n / 2);
      other.join();
    }
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  };
  race(state, run, {"cached_ms", cached_fn->fn}, {"streaming_ms", streaming_fn->fn});
  std::free(in);
  std::free(out);
}
BENCHMARK(BM_StreamingStores)->ArgsProduct({{0, 7}, {1, 2}})->Unit(benchmark::kMillisecond);

}  // namespace

namespace {

// The chain kernel's exp scaling by 2^n, with AVX-512's vscalefps and with
// the portable two-halves code (codegen::Options::avx512_math), run
// alternately on one thread over 4096 elements (in L1: the math alone). The
// first argument is the variant as above (2: exp alone, 7: the chain).
// Counters: the best time of each per call, and vscalefps's speedup.
void BM_ExpScaling(benchmark::State& state) {
  const int variant = static_cast<int>(state.range(0));
  const int64_t n = 4096;
  const fusion::PlannedKernel k = chain_kernel(variant, n);
  codegen::Options portable;
  portable.avx512_math = false;
  auto vscalef_fn = codegen::load(codegen::compile(k.kernel, "kiln_bench_vscalef", {}).object, "kiln_bench_vscalef");
  auto portable_fn =
      codegen::load(codegen::compile(k.kernel, "kiln_bench_portable", portable).object, "kiln_bench_portable");
  std::vector<float> in(n), out(n);
  for (int64_t i = 0; i < n; ++i) in[i] = static_cast<float>((i % 1000) - 500) / 250.f;
  void* bufs[] = {in.data(), out.data()};
  constexpr int kCalls = 100;
  auto run = [&](codegen::KernelFn fn) {
    const auto start = std::chrono::steady_clock::now();
    for (int c = 0; c < kCalls; ++c) fn(bufs, k.ints.data(), k.scalars.data(), 0, n);
    return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count() / kCalls;
  };
  race(state, run, {"portable_us", portable_fn->fn}, {"vscalef_us", vscalef_fn->fn});
}
BENCHMARK(BM_ExpScaling)->Arg(2)->Arg(7)->Unit(benchmark::kMillisecond);

}  // namespace

namespace {

// The CPU's peak rate of 512-bit FMAs on one thread: 8 independent chains, so
// that the FMA ports, not one chain's latency, set the pace. With the count of
// vector operations in a kernel's loop (docs/fusion.md) it bounds how fast a
// compute-bound kernel such as the benchmark chain can run on this machine.
// items_per_second: FMAs on 16 floats each per second.
__attribute__((target("avx512f"))) void fma_chains(int64_t iterations) {
  const __m512 a = _mm512_set1_ps(0.999f), b = _mm512_set1_ps(1e-3f);
  __m512 v0 = a, v1 = a, v2 = a, v3 = a, v4 = a, v5 = a, v6 = a, v7 = a;
  for (int64_t i = 0; i < iterations; ++i) {
    v0 = _mm512_fmadd_ps(v0, a, b);
    v1 = _mm512_fmadd_ps(v1, a, b);
    v2 = _mm512_fmadd_ps(v2, a, b);
    v3 = _mm512_fmadd_ps(v3, a, b);
    v4 = _mm512_fmadd_ps(v4, a, b);
    v5 = _mm512_fmadd_ps(v5, a, b);
    v6 = _mm512_fmadd_ps(v6, a, b);
    v7 = _mm512_fmadd_ps(v7, a, b);
  }
  const __m512 sum = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(v0, v1), _mm512_add_ps(v2, v3)),
                                   _mm512_add_ps(_mm512_add_ps(v4, v5), _mm512_add_ps(v6, v7)));
  benchmark::DoNotOptimize(sum);
}

void BM_VectorFmaPeak(benchmark::State& state) {
  if (!__builtin_cpu_supports("avx512f")) {
    state.SkipWithError("the CPU has no AVX-512");
    return;
  }
  constexpr int64_t kIterations = 1 << 16;
  for (auto _ : state) fma_chains(kIterations);
  state.SetItemsProcessed(state.iterations() * kIterations * 8);
}
BENCHMARK(BM_VectorFmaPeak)->Unit(benchmark::kMicrosecond);

}  // namespace
