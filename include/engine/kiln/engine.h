// The flush pipeline, the one place that knows its order:
//   micro-trace -> plan signature -> a reused plan (bind its scalars), or
//   fusion (regions) -> Kernel IR -> key -> cache hit, or compile and load
//   -> launch on the device queue.
// No torch: the dispatch layer records traces and calls flush() at sync points.
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/cache.h"
#include "kiln/codegen.h"
#include "kiln/fusion.h"
#include "kiln/run_log.h"
#include "kiln/runtime.h"
#include "kiln/store.h"
#include "kiln/trace.h"

namespace kiln {
struct Settings;  // kiln/knobs.h
}

namespace kiln::engine {

struct Options {
  fusion::Options fusion;
  codegen::Options codegen;
  int num_threads = 1;   // KILN_NUM_THREADS (options_for); 1 without the knobs
  std::string dump_dir;  // KILN_DUMP_DIR (empty: off)
  // KILN_ASYNC_COMPILE: new kernels compile on a background thread and a
  // trace's first occurrences run as library kernels meanwhile (start_trace);
  // off without the knobs (tests of the engine compile in the flush).
  bool async_compile = false;
  // KILN_COMPILE_THRESHOLD (1 without the knobs, the knob defaults to 2): the occurrence of a
  // trace at which its fused kernels are compiled; before it, a trace whose
  // fused kernels are not cached runs as library kernels.
  int64_t compile_threshold = 1;
  // KILN_SHAPE_SPECIALIZE: kernels get their launch geometry as constants
  // (ir::Kernel::baked_geometry).
  bool shape_specialize = false;
  int compile_delay_ms = 0;  // KILN_COMPILE_DELAY_MS: tests' artificial compile time
  // KILN_QUEUE_LOW_WATERMARK (0: off): the dispatch layer cuts traces when
  // the device's queue runs low; the trace after a cut one is then told
  // apart by Trace::chain_key, which no cut changes, not by a plan key.
  int64_t queue_low_watermark = 0;
  // The persistent store's directory (KILN_CACHE, KILN_CACHE_DIR); empty:
  // compiled kernels live in memory only (the default without the knobs).
  std::string cache_dir;
  bool cache_read_only = false;  // KILN_CACHE_READONLY
  uint64_t cache_max_bytes = 0;  // KILN_CACHE_MAX_MB; 0: no cap
  // What the dispatch layer's first-sight verdicts depend on beyond the
  // environment fingerprint (its build identity, the torch version); empty:
  // verdicts are not kept across processes.
  std::string verdict_identity;
  // The running program (its script's path), under which the device memory
  // it needed is saved for its next start; empty: not saved.
  std::string program;
};

// The options the knobs ask for (KILN_FUSION_MAX_OPS, KILN_STREAM_MIN_MB,
// KILN_FAST_MATH, KILN_NUM_THREADS, KILN_ASYNC_COMPILE, KILN_DUMP_DIR, ...); the log sink is left
// to the caller, who owns the channels.
Options options_for(const Settings& settings);

// Sets the options and opens the persistent store; called once before the
// first flush. Throws std::invalid_argument when KILN_DUMP_DIR cannot be
// created or written. A cache directory that cannot be used is no error: the
// process goes on memory-only, with a warning (take_warnings).
void configure(const Options& options);
const Options& options();

// The adaptive policy, asked by the dispatch layer as the first op of a
// trace is recorded on device `device`. The trace is told apart from others
// by that op (its trace::op_hash) and the trace flushed before it on the
// device (its start `key`, kept in Trace::start_key). A trace that is not
// yet due to run fused (its fused kernels compiled, or queued and the
// program waited for the device since) `ran_as_library`: its ops run as
// library kernels as they are recorded (docs/tuning.md, "Tiers"). A trace
// whose first op is large runs fused at once if a second op joins it: until
// then its launch is held (`hold_until_ops`, Trace::hold_until_ops); alone,
// it runs as a library kernel. Decided by counts, sizes, program order and
// cache contents, never by timing; `counts_only`
// (torch.use_deterministic_algorithms): without the caches, so that a warm
// cache takes the same tiers as a cold one.
struct TraceStart {
  uint64_t key = 0;
  bool ran_as_library = false;
  int hold_until_ops = 0;
};
TraceStart start_trace(int device, const trace::TraceOp& first_op, bool counts_only);

// The program waited for device `device` (a synchronize, .item(), a copy
// to the host): a trace whose fused kernels were queued before it runs
// fused from its next occurrence.
void program_waited(int device);

// Whether a trace whose first op iterates over `elements` runs fused from
// its first occurrence once a second op joins it (start_trace): large ops
// cost more as library kernels than their fused kernels take to compile.
bool fused_at_first_sight(int64_t elements);

// Whether traces not yet due to run fused run as library kernels at all
// (the adaptive policy is on).
bool library_tier();

// Plans, compiles (or reuses) and launches `trace` on `dev`; a trace that
// ran as library kernels is planned and compiled only (the library tier). Returns once the
// launches are submitted (with KILN_LAUNCH_BLOCKING, once they ran: the
// device decides). The caller keeps the trace, and the buffers it holds,
// alive until then. `reason` is what made the flush happen (counted in the
// metrics). Throws runtime::LaunchError for a blocking launch that failed.
void flush(runtime::Device& dev, const trace::Trace& trace, std::string_view reason);

// Waits until every compile queued for the background thread
// (KILN_ASYNC_COMPILE) has run and its kernel been handed to the store's
// writer. Which tier an occurrence runs in never depends on it; it settles
// the counts (kernels_compiled, the store's entries) of a program that reads
// them before its exit.
void wait_for_background_compiles();

// Each compile of this process, in order (benchmarks): the compiling
// thread's CPU time and the wall time, in ms (see codegen::CompiledObject).
struct CompileTime {
  double cpu_ms = 0;
  double wall_ms = 0;
};
std::vector<CompileTime> compile_times();

// The first compile of a process costs 10-25 ms more than compiling the
// same kernel again: LLVM's code (most of the extension's 100 MB) is paged
// in and its tables built on first use. start_compiler_warm_up() pays most
// of that once, on a background thread, by compiling and loading two small
// kernels while the program goes on (importing, building its model); the
// metric compile_time/warm_up_us records what it took (about 50 ms of CPU).
// Measured on the benchmark chain compiled right after import, 8 processes
// each, alternating: median 40 ms without, 33 ms with. Compiles wait for it
// instead of competing with it for the cores, as do fork and exit. Both are
// safe to call any number of times from any thread; the dispatch layer
// starts it when lazy mode is on at start-up or switched on.
void start_compiler_warm_up();
void wait_for_compiler_warm_up();

// The process's compiled executables in memory; behind them, the persistent
// store (cache_dir).
cache::MemoryCache& executable_cache();

// Adds to the metrics what the caches did since the last call and that no
// flush counts as it happens: executables and plans evicted from memory, and
// the store's background writer's evictions and its waits for other
// processes. Called before the metrics are read.
void publish_cache_counters();

// First-sight verdicts kept across processes. The dispatch layer checks each
// new argument case of an op once (eager's argument errors at the op, the
// meta kernel's geometry against the CPU kernel's), which a warm start would
// otherwise repeat for every op of its first step. A case whose check passed
// is remembered in the store's directory (verdicts-<identity>.bin, keyed by
// Options::verdict_identity and the environment fingerprint) and skipped by
// later processes. `op` is a stable hash of the op's name, `signature` its
// argument case. Off (false; nothing kept) without a store.
bool verdict_is_stored(uint64_t op, uint64_t signature);
void store_verdict(uint64_t op, uint64_t signature);

// Warnings for the user since the last call (a refused cache directory, a
// cache that could not be written, a corrupt entry), each text once per
// process. The dispatch layer shows them as Python warnings.
std::vector<std::string> take_warnings();

// Waits until the persistent store holds every kernel compiled so far, or
// `timeout_ms` passed; returns whether it does (true without a store).
bool flush_store(int timeout_ms);

// At exit: what is queued goes into the store, within `timeout_ms` (a
// process that compiled kernels just before exiting keeps them), then the
// store closes and the process is memory-only. It must run before static
// destructors do: RocksDB's own statics (its Env, its mutexes) die there,
// and a store closing after them aborts. The Python module calls it from
// an atexit handler; a C++ program calls it before returning from main.
// A write that failed during that last flush is added to take_warnings().
// The process's line goes to the directory's runs.log (run_log.h).
void close_store(int timeout_ms);

// The persistent store's directory ("" when the process is memory-only),
// its entries, each checked (`python -m kiln cache list|verify`), and
// clearing it (`cache clear`: returns how many entries it held).
std::string store_dir();
std::vector<cache::StoreListing> stored_entries();
size_t clear_store();

// Whether the store is read-only (KILN_CACHE_READONLY): the CLI refuses
// the commands that would write it.
bool store_read_only();

// `cache prune`: deletes the entries that are bad or built for another
// environment than this process's, waits for the deletions to reach the
// store (within `timeout_ms`).
cache::Store::PruneResult prune_store(int timeout_ms);

// `cache export FILE`: every intact entry of this environment's fingerprint
// into one file (include/cache/kiln/export_file.h). `error` is "" or says
// what failed; nothing is written then.
struct ExportOutcome {
  size_t entries = 0;
  std::string error;
};
ExportOutcome export_store(const std::string& path);

// `cache import FILE`: a damaged file is refused whole (`error`, nothing
// stored); of an intact one, the entries built for this environment go
// into the store through its writer (the size cap applies), the others are
// counted and skipped. Waits for them to reach the store (`timeout_ms`);
// a write that fails is an `error` too.
struct ImportOutcome {
  size_t imported = 0, foreign = 0, bad = 0;
  std::string error;
};
ImportOutcome import_store(const std::string& path, int timeout_ms);

// The runs recorded in the store's directory (runs.log), oldest first:
// `cache stats`. Each process that used the store adds its own at
// close_store.
std::vector<cache::RunRecord> recent_runs();

}  // namespace kiln::engine
