// Micro-benchmarks of the executable cache's two levels, the issue's
// acceptance targets: a memory hit (MemoryCache::get_or_build on a present
// key) within 1 us, and a store hit (Store::get and codegen::load of one
// compiled kernel, as engine/flush.cpp's load_stored does) within 1 ms.
#include <benchmark/benchmark.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "bench_kernels.h"
#include "kiln/cache.h"
#include "kiln/codegen.h"
#include "kiln/fusion.h"
#include "kiln/store.h"
#include "kiln/trace.h"

using namespace kiln;

namespace {

void BM_MemoryCacheHit(benchmark::State& state) {
  cache::MemoryCache memory;
  const cache::Key key = cache::make_key("kernel bytes", "fingerprint");
  auto build = [] {
    cache::Entry e;
    e.object = "object";
    return e;
  };
  memory.get_or_build(key, build);
  bool hit = false;
  for (auto _ : state) benchmark::DoNotOptimize(memory.get_or_build(key, build, &hit));
  if (!hit) state.SkipWithError("the key was not a hit");
}
BENCHMARK(BM_MemoryCacheHit);

// A store in a private temporary directory, removed with it.
struct TempStore {
  std::string dir;
  std::unique_ptr<cache::Store> store;
  TempStore() {
    std::string t = (std::filesystem::temp_directory_path() / "kiln-cache-bench-XXXXXX").string();
    dir = ::mkdtemp(t.data());
    std::string why;
    store = cache::Store::open({dir, false, 0}, why);
    if (!store) throw std::runtime_error(why);
  }
  ~TempStore() {
    store.reset();
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }
};

// One hit as a process meets it: the lookup through its secondary instance
// (the entry's checks included), then the object loaded with ORC and
// unloaded again when the iteration drops it. Each hit also queues an LRU
// touch, at most once a second, as real hits do.
void BM_StoreHit(benchmark::State& state) {
  const std::string fingerprint = codegen::environment_fingerprint({});
  const ir::Kernel kernel = bench::chain_kernel(7, 4096).kernel;  // a typical fused kernel, a few KiB
  const std::string symbol = "kiln_bench_store_hit";
  codegen::CompiledObject obj = codegen::compile(kernel, symbol, {});
  const cache::Key key = cache::make_key(ir::serialize(kernel), fingerprint);
  TempStore t;
  t.store->put(key, fingerprint, obj.object, obj.compile_ms);
  if (!t.store->flush(std::chrono::seconds(10))) return state.SkipWithError("the store did not take the kernel");
  // The target is on the median: each hit is timed on its own (a clock read
  // costs tens of ns, nothing against a hit's hundreds of µs).
  std::vector<double> us;
  for (auto _ : state) {
    const auto start = std::chrono::steady_clock::now();
    cache::StoreLookupResult found = t.store->get(key, fingerprint);
    if (found.outcome != cache::Lookup::Hit) return state.SkipWithError(("not a hit: " + found.problem).c_str());
    std::unique_ptr<codegen::LoadedKernel> loaded = codegen::load(found.object, symbol);
    benchmark::DoNotOptimize(loaded->fn);
    us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count());
    loaded.reset();  // the unload: in the iteration's real_time, not in the hit's median_us
  }
  std::sort(us.begin(), us.end());
  if (!us.empty()) {
    state.counters["median_us"] = us[us.size() / 2];
    state.counters["p90_us"] = us[us.size() * 9 / 10];
  }
  state.counters["object_bytes"] = static_cast<double>(obj.object.size());
}
BENCHMARK(BM_StoreHit)->Unit(benchmark::kMicrosecond);

}  // namespace
