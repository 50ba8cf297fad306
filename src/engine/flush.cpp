// The flush pipeline (see include/engine/kiln/engine.h).
#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <thread>
#include <unordered_map>

#include "engine/background_compiles.h"
#include "engine/compiled_executable.h"
#include "engine/executable_store.h"
#include "engine/plan_cache.h"
#include "engine/stored_verdicts.h"
#include "engine/trace_history.h"
#include "engine/warm_start.h"
#include "kiln/engine.h"
#include "kiln/log.h"
#include "kiln/metrics.h"

namespace kiln::engine {
namespace {

Options g_options;
std::once_flag g_pool_once;
runtime::ThreadPool* g_pool = nullptr;

// Made by configure(), on the program's thread: a thread inherits its
// creator's scheduling policy, and the compile and warm-start threads that
// load kernels run at idle priority. Pool threads made there would stall a
// kernel behind every other runnable thread of the machine.
runtime::ThreadPool& pool() {
  std::call_once(g_pool_once, [] { g_pool = new runtime::ThreadPool(g_options.num_threads); });  // never destroyed
  return *g_pool;
}

std::mutex g_times_mu;
std::vector<CompileTime> g_compile_times;

std::string size_bucket(int ops) {
  if (ops == 1) return "1 op";
  int lo = 2;
  while (lo * 2 <= ops && lo < 64) lo *= 2;
  if (lo >= 64) return "64+ ops";
  return std::to_string(lo) + "-" + std::to_string(lo * 2 - 1) + " ops";
}

std::string describe(const trace::Trace& t, const fusion::Region& r, size_t index, bool has_kernel) {
  std::ostringstream os;
  os << "region " << index << ": " << r.ops.size() << (r.ops.size() == 1 ? " op" : " ops") << " over [";
  for (size_t d = 0; d < r.sizes.size(); ++d)
    os << (d ? ", " : "") << r.sizes[d] << (((r.reduced >> d) & 1) ? "r" : "");
  os << "]: ";
  for (size_t i = 0; i < r.ops.size(); ++i) os << (i ? " " : "") << t.ops[r.ops[i]].name;
  os << (has_kernel ? "" : " (every store dead: no kernel)") << "; ended by " << r.ended_by;
  return os.str();
}

void dump(const std::string& name, const ir::Kernel& k, const codegen::CompiledObject& obj) {
  namespace fs = std::filesystem;
  const fs::path dir(g_options.dump_dir);
  std::ofstream(dir / (name + ".kir")) << ir::to_text(k);
  std::ofstream(dir / (name + ".ll")) << obj.llvm_ir;
  std::ofstream(dir / (name + ".o"), std::ios::binary) << obj.object;
}

// A miss's metric label and KILN_LOG=cache reason; null for a hit or a
// corrupt entry (told on their own).
const char* miss_label(cache::Lookup outcome) {
  switch (outcome) {
    case cache::Lookup::Absent: return "miss";
    case cache::Lookup::Evicted: return "miss (evicted)";
    case cache::Lookup::OtherEnvironment: return "miss (other environment)";
    case cache::Lookup::Hit:
    case cache::Lookup::Corrupt: return nullptr;
  }
  return nullptr;
}

std::string miss_reason(const cache::StoreLookupResult& found, bool kernel_known) {
  switch (found.outcome) {
    case cache::Lookup::Evicted: return found.detail;
    case cache::Lookup::OtherEnvironment: return "built for another environment: " + found.detail;
    default: return kernel_known ? "a new kernel" : "not stored";
  }
}

// A kernel from the persistent store, loaded: no compile. Null on a miss,
// and for an entry that fails its checks or does not load (deleted there,
// then compiled again by the caller). `kernel`: the kernel's identity, for a
// miss's reason ({0, 0} when unknown: a warm start's preload).
std::optional<cache::Entry> load_stored(cache::Store& store, const cache::Key& key, const std::string& name,
                                        const cache::Key& kernel) {
  const auto start = std::chrono::steady_clock::now();
  Metrics& metrics = Metrics::global();
  cache::StoreLookupResult found = store.get(key, fingerprint(), kernel);
  if (const char* label = miss_label(found.outcome)) {
    metrics.add(Counter::ExecutableStore, label);
    count_run_event(RunEvent::StoreMiss);
    if (log_enabled("cache")) log("cache", name + ": miss (" + miss_reason(found, !(kernel == cache::Key{})) + ")");
    return std::nullopt;
  }
  if (found.outcome == cache::Lookup::Corrupt) {
    metrics.add(Counter::ExecutableStore, "corrupt");
    count_run_event(RunEvent::StoreMiss);
    warn_once("kiln: the executable cache in '" + store.dir() + "' held a corrupt entry (" + found.problem +
              "); it was deleted and its kernel is compiled again. `python -m kiln cache verify` checks the rest.");
    if (log_enabled("cache")) log("cache", name + ": miss (corrupt entry: " + found.problem + ")");
    return std::nullopt;
  }
  cache::Entry e;
  try {
    e.executable = std::make_shared<CompiledExecutable>(name, codegen::load(found.object, name), pool());
  } catch (const std::exception& error) {
    metrics.add(Counter::ExecutableStore, "load failed");
    count_run_event(RunEvent::StoreMiss);
    store.discard(key);
    warn_once("kiln: an entry of the executable cache in '" + store.dir() + "' did not load (" + error.what() +
              "); it was deleted and its kernel is compiled again.");
    return std::nullopt;
  }
  e.object = std::move(found.object);
  e.compile_ms = found.compile_ms;
  const auto us = std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - start);
  metrics.add(Counter::ExecutableStore, "hit");
  count_run_event(RunEvent::StoreHit);
  metrics.add(Counter::StoreTime, "load_us", us.count());
  metrics.add(Counter::StoreTime, "compile_saved_us", static_cast<int64_t>(found.compile_ms * 1000));
  if (log_enabled("cache")) log("cache", name + ": hit, loaded in " + std::to_string(us.count()) + " us");
  return e;
}

// `kernel`: the kernel's identity (cache::kernel_identity of its IR).
cache::Entry build(const fusion::PlannedKernel& pk, const std::string& name, const cache::Key& key,
                   const cache::Key& kernel) {
  const TimeScope timing(TimeCategory::Compile);  // the warm-up it waits for, the compile and the load
  if (g_options.compile_delay_ms > 0)
    std::this_thread::sleep_for(std::chrono::milliseconds(g_options.compile_delay_ms));
  const std::shared_ptr<cache::Store> stored = store();
  if (stored) {
    if (std::optional<cache::Entry> e = load_stored(*stored, key, name, kernel)) return std::move(*e);
  }
  const bool want_ir = !g_options.dump_dir.empty();
  wait_for_compiler_warm_up();
  codegen::CompiledObject obj = codegen::compile(pk.kernel, name, g_options.codegen, want_ir);
  if (want_ir) dump(name, pk.kernel, obj);
  const char* kind = pk.kernel.reduce_rank ? "row" : "pointwise";
  Metrics::global().add(Counter::KernelsCompiled, kind);
  if (stored) count_run_event(RunEvent::Compile);
  const auto us = static_cast<int64_t>(obj.compile_ms * 1000);
  Metrics::global().add(Counter::CompileTime, "total_us", us);
  Metrics::global().raise_to(Counter::CompileTime, "max_us", us);
  Metrics::global().raise_to(Counter::CompileTime, "max_wall_us", static_cast<int64_t>(obj.compile_wall_ms * 1000));
  {
    std::lock_guard<std::mutex> lock(g_times_mu);
    g_compile_times.push_back({obj.compile_ms, obj.compile_wall_ms});
  }
  if (log_enabled("compile")) {
    log("compile", name + ": " + kind + " kernel, " + std::to_string(pk.kernel.nodes.size()) + " nodes, " +
                       std::to_string(obj.compile_ms) + " ms CPU (" + std::to_string(obj.compile_wall_ms) +
                       " ms wall), " + std::to_string(obj.object.size()) + " bytes of object code");
  }
  cache::Entry e;
  e.compile_ms = obj.compile_ms;
  e.executable = std::make_shared<CompiledExecutable>(name, codegen::load(obj.object, name), pool());
  if (stored) stored->put(key, fingerprint(), obj.object, obj.compile_ms, kernel);
  e.object = std::move(obj.object);
  return e;
}

// What a flush holds for a kernel it has never built: with
// KILN_ASYNC_COMPILE, a DeferredExecutable that the background thread's
// build resolves (background_compiles.h); else the built kernel itself.
cache::Entry build_for_flush(const fusion::PlannedKernel& pk, const std::string& name, const cache::Key& key,
                             const cache::Key& kernel) {
  if (!g_options.async_compile) return build(pk, name, key, kernel);
  auto deferred = std::make_shared<DeferredExecutable>(name);
  compile_in_background(
      [pk, name, key, kernel, deferred] {
        try {
          deferred->resolve(build(pk, name, key, kernel).executable);
        } catch (...) {
          // Every launch of it raises this at the device's next sync point, as a
          // compile in the flush would have raised at the flush.
          deferred->fail(std::current_exception());
        }
      },
      deferred.get());
  cache::Entry e;
  e.executable = std::move(deferred);
  return e;
}

}  // namespace

bool preload_kernel(const cache::Key& key) {
  const std::shared_ptr<cache::Store> stored = store();
  if (!stored || executable_cache().contains(key)) return false;
  // Not through get_or_build: a flush waiting on this load must not receive
  // its "not stored" as an error; it compiles the kernel itself then. A
  // flush that builds the key meanwhile wins, and this load is dropped.
  std::optional<cache::Entry> e = load_stored(*stored, key, "kiln_" + key.hex(), cache::Key{});
  return e && executable_cache().insert_if_absent(key, std::move(*e));
}

void configure(const Options& options) {
  if (!options.dump_dir.empty()) {
    namespace fs = std::filesystem;
    std::error_code ec;
    fs::create_directories(options.dump_dir, ec);
    const fs::path probe = fs::path(options.dump_dir) / ".kiln_write_probe";
    std::ofstream out(probe);
    if (ec || !out) {
      throw std::invalid_argument("kiln: KILN_DUMP_DIR='" + options.dump_dir + "' is not a writable directory" +
                                  (ec ? " (" + ec.message() + ")" : "") +
                                  "; set it to a directory kiln may create files in, or leave it empty");
    }
    out.close();
    fs::remove(probe, ec);
  }
  g_options = options;
  pool();
  open_store({options.cache_dir, options.cache_read_only, options.cache_max_bytes});
  const std::string dir = store_dir();  // "" when refused: verdicts stay in memory too
  open_verdicts(dir,
                dir.empty() || options.verdict_identity.empty() ? "" : options.verdict_identity + ";" + fingerprint(),
                options.cache_read_only);
  open_warm_start(dir, options.program, options.cache_read_only);
}

const Options& options() { return g_options; }

const std::string& fingerprint() {
  static const std::string f = codegen::environment_fingerprint(g_options.codegen);
  return f;
}

std::vector<CompileTime> compile_times() {
  std::lock_guard<std::mutex> lock(g_times_mu);
  return g_compile_times;
}

cache::MemoryCache& executable_cache() {
  static auto* c = new cache::MemoryCache();  // never destroyed: kernels may run during shutdown
  return *c;
}

// Counts the trace's ops by name, once per flush: recording itself counts
// nothing. Names are stable pointers (string literals or op infos' names),
// so the tally hashes pointers, not strings.
static void count_traced_ops(const trace::Trace& trace, Metrics& metrics) {
  std::unordered_map<const char*, int64_t> tally;
  for (const trace::TraceOp& op : trace.ops) ++tally[op.name];
  for (const auto& [name, n] : tally) metrics.add(Counter::TracedOps, name, n);
}

namespace {

// The key and the kernel identity (the store's, over the IR alone) of each
// kernel of a fresh plan, from one serialization; filled as they are needed.
struct KernelKeys {
  std::vector<cache::Key> key, identity;
  explicit KernelKeys(size_t n) : key(n), identity(n) {}
};

const cache::Key& key_of(const fusion::PlannedKernel& pk, KernelKeys& keys, size_t i) {
  if (keys.key[i] == cache::Key{}) {
    const std::string ir = ir::serialize(pk.kernel);
    keys.key[i] = cache::make_key(ir, fingerprint());
    keys.identity[i] = cache::kernel_identity(ir);
  }
  return keys.key[i];
}

// Kernel i of a fresh plan: from memory, the store, or a compile (queued
// under KILN_ASYNC_COMPILE).
void resolve_kernel(PreparedPlan& fresh, size_t i, KernelKeys& keys) {
  const fusion::PlannedKernel& pk = fresh.plan.kernels[i];
  const cache::Key& key = key_of(pk, keys, i);
  note_kernel_used(key);
  PreparedPlan::Kernel& k = fresh.kernels[i];
  k.name = "kiln_" + key.hex();
  bool hit = false;
  k.entry =
      executable_cache().get_or_build(key, [&] { return build_for_flush(pk, k.name, key, keys.identity[i]); }, &hit);
  if (hit) {
    // A use the store cannot see: its LRU order must not evict a kernel
    // that this process keeps using from memory.
    if (const std::shared_ptr<cache::Store> stored = store()) stored->touch(key);
  }
  Metrics::global().add(Counter::ExecutableCache, hit ? "hit" : "miss");
}

std::shared_ptr<PreparedPlan> make_plan(const trace::Trace& trace, const fusion::Options& options) {
  auto fresh = std::make_shared<PreparedPlan>();
  fresh->plan = fusion::plan(trace, options);
  fresh->kernels.resize(fresh->plan.kernels.size());
  if (g_options.shape_specialize) {
    // A plan is reused only for traces of its signature, which holds every
    // size, stride and offset: the baked geometry is theirs too.
    for (fusion::PlannedKernel& pk : fresh->plan.kernels) {
      const auto n = static_cast<size_t>(pk.kernel.geometry_ints_count());
      pk.kernel.baked_geometry.assign(pk.ints.begin(), pk.ints.begin() + n);
    }
  }
  return fresh;
}

// Launches `prepared`'s kernels on `dev`. A reused plan (`fresh` null) binds
// this trace's scalars; a fresh one (`fresh` is `prepared`) resolves each
// kernel it has not resolved yet as it goes.
void launch_plan(runtime::Device& dev, const trace::Trace& trace, const PreparedPlan& prepared, PreparedPlan* fresh,
                 KernelKeys& keys) {
  Metrics& metrics = Metrics::global();
  const fusion::Plan& plan = prepared.plan;
  std::vector<bool> has_kernel(plan.regions.size(), false);
  for (const auto& k : plan.kernels) has_kernel[k.region] = true;
  for (size_t r = 0; r < plan.regions.size(); ++r) {
    metrics.add(Counter::Regions, size_bucket(static_cast<int>(plan.regions[r].ops.size())));
    if (log_enabled("fusion")) log("fusion", describe(trace, plan.regions[r], r, has_kernel[r]));
  }
  if (plan.bytes_not_written) metrics.add(Counter::BytesNotWritten, "dead intermediates", plan.bytes_not_written);

  // Dead buffers a later region reads live in scratch memory from the launch
  // of their first kernel to that of their last, as they would have lived in
  // eager mode. A block freed behind a launch can back a later kernel's
  // scratch: the queue runs in order.
  std::vector<void*> base(trace.buffers.size());
  for (size_t i = 0; i < trace.buffers.size(); ++i) base[i] = trace.buffers[i].base;
  std::vector<void*> scratch(plan.scratch.size(), nullptr);
  struct ScratchGuard {  // frees what is still held, also when a compile fails
    runtime::Device& dev;
    std::vector<void*>& ptrs;
    ~ScratchGuard() {
      for (void* p : ptrs) {
        if (p) dev.free(p);
      }
    }
  } guard{dev, scratch};

  for (size_t i = 0; i < plan.kernels.size(); ++i) {
    for (size_t s = 0; s < plan.scratch.size(); ++s) {
      if (plan.scratch[s].first_kernel != static_cast<int32_t>(i)) continue;
      const int32_t b = plan.scratch[s].buffer;
      base[b] = scratch[s] = dev.allocate(trace.buffers[b].nbytes);
    }
    const fusion::PlannedKernel& pk = plan.kernels[i];
    if (pk.work != 0) {  // an empty space has nothing to compile or run
      runtime::LaunchArgs args;
      for (int32_t id : pk.buffer_ids) args.buffers.push_back(base[id]);
      args.ints = pk.ints;
      args.scalars = pk.scalars;
      args.work = pk.work;
      args.unit_elements = pk.unit_elements;
      if (!fresh) {
        fusion::bind_scalars(pk, trace, args.ints, args.scalars);  // this trace's learning rate, step, ...
        metrics.add(Counter::ExecutableCache, "hit");
      } else if (!fresh->kernels[i].entry) {
        resolve_kernel(*fresh, i, keys);
      }
      metrics.add(Counter::ExecutableLaunches, pk.kernel.reduce_rank ? "row" : "pointwise");
      dev.launch(prepared.kernels[i].entry->executable, std::move(args));
    }
    for (size_t s = 0; s < plan.scratch.size(); ++s) {
      if (plan.scratch[s].last_kernel != static_cast<int32_t>(i)) continue;
      dev.free(scratch[s]);
      scratch[s] = nullptr;
    }
  }
}

// A plan made for an earlier trace of this one's signature.
void launch_reused(runtime::Device& dev, const trace::Trace& trace, const PreparedPlan& plan) {
  KernelKeys none(0);
  launch_plan(dev, trace, plan, nullptr, none);
}

// Whether every kernel of a fresh plan is in the process's memory: a trace
// that compiles nothing. The store is not asked here: a lookup that misses
// costs about 1 ms (its miss reason), on the program's thread, once per new
// kernel (gpt_train's first step: 17 ms of flushing). A kernel in the store
// is loaded by its build, on the compile thread, as a compile would be.
bool kernels_cached(PreparedPlan& fused, KernelKeys& keys) {
  for (size_t i = 0; i < fused.plan.kernels.size(); ++i) {
    const fusion::PlannedKernel& pk = fused.plan.kernels[i];
    if (pk.work != 0 && !executable_cache().contains(key_of(pk, keys, i))) return false;
  }
  return true;
}

// Whether no kernel of `plan` holds two ops or more: each kernel would do
// what its op's library kernel does (varlen_infer's embedding add and its
// final layer norm, each between two untraced ops), and compiling them
// costs a first pass more than the fused kernels return there
// (docs/tuning.md, "Tiers"): such a trace waits longer (compile_threshold_for).
bool fuses_nothing(const fusion::Plan& plan) {
  for (const fusion::PlannedKernel& pk : plan.kernels)
    if (plan.regions[pk.region].ops.size() > 1) return false;
  return true;
}

// What tells the trace after `trace` apart: its plan's key; under
// KILN_QUEUE_LOW_WATERMARK its chain key, the same wherever the queue cut
// it, so that the next trace's key and tier do not depend on timing.
uint64_t after_trace(const trace::Trace& trace, const cache::Key& plan_key) {
  return g_options.queue_low_watermark > 0 ? trace.chain_key : plan_key.low ^ plan_key.high;
}

// A trace whose plan fuses nothing is compiled only where its largest op
// covers more than kOneOpKernelMinElements elements and at most
// kOneOpKernelMaxElements: there a library kernel's fixed cost (dispatch,
// waking its thread team) is much of the op's time, and a fused kernel
// does not pay it; above, the op's memory traffic outweighs it; below, the
// fused launch costs what the library kernel does. mlp_train's one-op
// traces (1280 to 65536 elements) cost its steady step as library
// kernels; gpt_train's larger ones gained nothing compiled, and their
// compiles stalled its fifth step, as did its loss gradient's one-element
// fill later (docs/tuning.md, "Tiers", has the numbers).
constexpr int64_t kOneOpKernelMinElements = int64_t{1} << 10;
constexpr int64_t kOneOpKernelMaxElements = int64_t{1} << 17;

// The elements an op's iteration space covers.
int64_t op_elements(const trace::TraceOp& op) {
  int64_t elements = 1;
  for (int64_t size : op.sizes) elements *= size;
  return elements;
}

int64_t largest_op_elements(const trace::Trace& trace) {
  int64_t largest = 0;
  for (const trace::TraceOp& op : trace.ops) largest = std::max(largest, op_elements(op));
  return largest;
}

// The occurrences a library-tier trace needs before its fused kernels are
// compiled: KILN_COMPILE_THRESHOLD. A trace whose plan fuses nothing needs
// one more, too few to repay a compile in a pass over new sizes
// (varlen_infer's first two), enough in a training loop, whose are
// compiled by its third step; and never where its ops are large or tiny.
int64_t compile_threshold_for(const trace::Trace& trace, bool plan_fuses_nothing) {
  if (!plan_fuses_nothing) return g_options.compile_threshold;
  const int64_t largest = largest_op_elements(trace);
  if (largest <= kOneOpKernelMinElements || largest > kOneOpKernelMaxElements)
    return std::numeric_limits<int64_t>::max();
  return g_options.compile_threshold + 1;
}

// Below the threshold: nothing compiled. Without the compile thread, the
// occurrence that compiles is recorded for a fused flush, which compiles it
// and waits.
Prepared below_threshold(int64_t seen, int64_t threshold) {
  return !g_options.async_compile && seen + 1 >= threshold ? Prepared::Ready : Prepared::Nothing;
}

// A fresh plan for a library-tier trace, logged under KILN_LOG=fusion.
std::shared_ptr<PreparedPlan> plan_library_trace(const trace::Trace& trace) {
  std::shared_ptr<PreparedPlan> fused = make_plan(trace, g_options.fusion);
  if (log_enabled("fusion")) {
    for (size_t r = 0; r < fused->plan.regions.size(); ++r)
      log("fusion", "(library tier, planned) " + describe(trace, fused->plan.regions[r], r, true));
  }
  return fused;
}

// A trace whose ops already ran as library kernels: counts its occurrence,
// and compiles its fused kernels (on the compile thread under
// KILN_ASYNC_COMPILE) once it was seen compile_threshold_for(...) times,
// or takes them from the caches. Decided by counts and cache contents,
// never by whether a compile has finished: a kernel queued for compiling
// is in the memory cache from the flush that queued it, and a later
// occurrence waits for it on the device's queue.
Prepared prepare_library_trace(const trace::Trace& trace, const cache::Key& plan_key) {
  const Prepared compiled = g_options.async_compile ? Prepared::Queued : Prepared::Ready;
  std::shared_ptr<const PreparedPlan> made = plan_cache().find(plan_key);
  if (made && !made->fuses_nothing) {
    // Made by an earlier trace, its kernels maybe still compiling. (Not
    // Ready: a key marked for fusing by another trace's plan ran into a
    // different trace under that key in gpt_train's first step, a fused
    // occurrence that compiled 8 kernels there and stalled 80-90 ms.)
    return made->ready && !trace.counts_only ? Prepared::Ready : compiled;
  }
  // A plan found here fuses nothing: remembered without kernels, so that
  // the trace's next occurrences skip planning until it is hot.
  std::shared_ptr<PreparedPlan> fused = made ? nullptr : plan_library_trace(trace);
  const bool one_op_kernels = made || fuses_nothing(fused->plan);
  const int64_t seen = occurrences().next(plan_key);
  const int64_t threshold = compile_threshold_for(trace, one_op_kernels);
  if (one_op_kernels && seen < threshold) {
    if (fused) {
      fused->fuses_nothing = true;
      plan_cache().insert(plan_key, std::move(fused));
    }
    return below_threshold(seen, threshold);
  }
  if (!fused) fused = plan_library_trace(trace);  // hot: planned again, its kernels resolved this time
  KernelKeys keys(fused->plan.kernels.size());
  const bool cached = kernels_cached(*fused, keys) && !trace.counts_only;
  if (!cached && seen < threshold) return below_threshold(seen, threshold);
  for (size_t i = 0; i < fused->plan.kernels.size(); ++i)
    if (fused->plan.kernels[i].work != 0) resolve_kernel(*fused, i, keys);
  fused->ready = cached || !g_options.async_compile;
  plan_cache().insert(plan_key, std::move(fused));
  return cached ? Prepared::Ready : compiled;
}

}  // namespace

// A trace that starts with an op over this many elements or more is
// fused from its first occurrence: there a library kernel is bound by
// memory, more so at the first touch of fresh outputs, and a trace of such
// ops soon costs more as library kernels than its fused kernels take to
// compile (an optimizer step over large parameters; docs/tuning.md, "Tiers").
// But only a trace of several ops: one op alone (a transformer's GELU
// between two matmuls) gains nothing fused, and the device would wait for
// its compile. So its first op's launch is held until a second op joins it.
constexpr int64_t kLargeOpElements = int64_t{1} << 20;
constexpr int kOpsFusedAtFirstSight = 2;

bool fused_at_first_sight(int64_t elements) { return elements >= kLargeOpElements; }

// Whether first occurrences run as library kernels: under
// KILN_ASYNC_COMPILE (they run while their fused kernels compile) or a
// KILN_COMPILE_THRESHOLD above 1 (they run until the trace was seen that
// often). Off, every trace is fused and compiled at its first flush.
bool library_tier() { return g_options.async_compile || g_options.compile_threshold > 1; }

// A trace the program's last run fused (warm start: its kernels are in the
// store) runs fused from its first occurrence: the library tier would only
// slow down its first step.
TraceStart start_trace(int device, const trace::TraceOp& first_op, bool counts_only) {
  TraceStart s = history().start(device, trace::op_hash(first_op));
  const bool fused_last_run = !counts_only && fused_in_last_run(s.key);
  const bool library = s.ran_as_library && !fused_last_run && library_tier();
  const bool large = fused_at_first_sight(op_elements(first_op));
  s.ran_as_library = library && !large;
  s.hold_until_ops = library && large ? kOpsFusedAtFirstSight : 0;
  return s;
}

std::vector<uint64_t> fused_start_keys() { return history().fused_keys(); }

void program_waited(int device) { history().waited(device); }

void flush(runtime::Device& dev, const trace::Trace& trace, std::string_view reason) {
  if (trace.empty()) return;
  const TimeScope timing(TimeCategory::Flush);
  Metrics& metrics = Metrics::global();
  metrics.add(Counter::TraceFlushes, reason);
  count_traced_ops(trace, metrics);
  const cache::Key plan_key = cache::make_key(fusion::plan_signature(trace, g_options.fusion), fingerprint());
  if (trace.ran_as_library || trace.hold_until_ops > 0) {
    // A large op no other joined was held (Trace::hold_until_ops): it runs
    // now, as a library kernel, and its trace is a library occurrence.
    for (const trace::HeldLaunch& held : trace.held_launches) {
      if (held.count) held.count();
      dev.launch(std::string(held.name), held.work);
    }
    metrics.add(Counter::Tiers, "library");
    history().flushed(dev.index(), after_trace(trace, plan_key), trace.start_key,
                      prepare_library_trace(trace, plan_key));
    return;
  }
  metrics.add(Counter::Tiers, "fused");
  history().flushed(dev.index(), after_trace(trace, plan_key), trace.start_key, Prepared::Ready);
  // A plan that fuses nothing holds only the library tier's verdict, no
  // resolved kernels: a fused occurrence (the fixed policy's, a large first
  // op's) plans its trace afresh.
  std::shared_ptr<const PreparedPlan> reused = plan_cache().find(plan_key);
  if (reused && !reused->fuses_nothing) {
    metrics.add(Counter::PlanCache, "hit");
    launch_reused(dev, trace, *reused);
    return;
  }
  metrics.add(Counter::PlanCache, "miss");
  std::shared_ptr<PreparedPlan> fused = make_plan(trace, g_options.fusion);
  KernelKeys keys(fused->plan.kernels.size());
  launch_plan(dev, trace, *fused, fused.get(), keys);
  fused->ready = !g_options.async_compile;          // a kernel this flush queued may still be compiling
  plan_cache().insert(plan_key, std::move(fused));  // only once every kernel was built or queued
}

}  // namespace kiln::engine
