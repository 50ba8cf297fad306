// Runtime micro-benchmarks: launch overhead, queue throughput, copies, allocation.
//
//   kiln_runtime_bench --benchmark_min_time=0.05s
//
// Everything runs on kiln::runtime::Device objects created here (no Runtime
// singleton, no torch).
#include <benchmark/benchmark.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "kiln/runtime.h"

using kiln::runtime::Device;

namespace {

constexpr size_t kCapacity = size_t(1) << 30;  // 1 GiB

// One device shared by every benchmark (and every benchmark thread).
Device& shared_device() {
  static Device dev(0, kCapacity, /*launch_blocking=*/false);
  return dev;
}

// Launch overhead: one empty host function, then wait for it.
void BM_EmptyLaunchSync(benchmark::State& state) {
  Device& dev = shared_device();
  for (auto _ : state) {
    dev.launch("empty", [] {});
    dev.synchronize();
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_EmptyLaunchSync);

// Queue throughput: N empty launches, then one synchronize. With Threads(2)
// both threads submit to the same device's queue.
void BM_QueueThroughput(benchmark::State& state) {
  Device& dev = shared_device();
  const int64_t n = state.range(0);
  for (auto _ : state) {
    for (int64_t i = 0; i < n; ++i) dev.launch("empty", [] {});
    dev.synchronize();
  }
  state.SetItemsProcessed(state.iterations() * n);
}
BENCHMARK(BM_QueueThroughput)->Arg(1024)->Threads(1)->UseRealTime();
BENCHMARK(BM_QueueThroughput)->Arg(1024)->Threads(2)->UseRealTime();

// Host -> device: snapshot of the host buffer plus the queued copy, to completion.
void BM_CopyHostToDevice(benchmark::State& state) {
  Device& dev = shared_device();
  const size_t bytes = static_cast<size_t>(state.range(0));
  std::vector<unsigned char> host(bytes, 0x5A);
  void* d = dev.allocate(bytes);
  for (auto _ : state) {
    dev.copy_from_host(d, host.data(), bytes);
    dev.synchronize();
  }
  dev.free(d);
  dev.synchronize();
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(bytes));
}
BENCHMARK(BM_CopyHostToDevice)->RangeMultiplier(4)->Range(4 << 10, 64 << 20)->UseRealTime();

// Device -> host: waits for the queue, then copies.
void BM_CopyDeviceToHost(benchmark::State& state) {
  Device& dev = shared_device();
  const size_t bytes = static_cast<size_t>(state.range(0));
  std::vector<unsigned char> host(bytes);
  void* d = dev.allocate(bytes);
  std::memset(d, 0xA5, bytes);
  for (auto _ : state) {
    dev.copy_to_host(host.data(), d, bytes);
    benchmark::DoNotOptimize(host.data());
    benchmark::ClobberMemory();
  }
  dev.free(d);
  dev.synchronize();
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(bytes));
}
BENCHMARK(BM_CopyDeviceToHost)->RangeMultiplier(4)->Range(4 << 10, 64 << 20)->UseRealTime();

// Allocate + free on an idle queue: the pool's cached-block path.
void BM_AllocFree(benchmark::State& state) {
  Device& dev = shared_device();
  const size_t bytes = static_cast<size_t>(state.range(0));
  for (auto _ : state) {
    void* p = dev.allocate(bytes);
    benchmark::DoNotOptimize(p);
    dev.free(p);
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_AllocFree)->RangeMultiplier(8)->Range(512, 16 << 20);

}  // namespace

BENCHMARK_MAIN();
