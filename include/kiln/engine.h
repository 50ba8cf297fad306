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
#include "kiln/runtime.h"
#include "kiln/trace.h"

namespace kiln::engine {

struct Options {
  fusion::Options fusion;
  codegen::Options codegen;
  int num_threads = 1;   // KILN_NUM_THREADS
  std::string dump_dir;  // KILN_DUMP_DIR (empty: off)
  // Log sink: channel ("fusion", "compile") and message; empty: no logging.
  std::function<bool(const char*)> log_enabled;
  std::function<void(const char*, const std::string&)> log;
};

// Sets the options; called once before the first flush. Throws
// std::invalid_argument when KILN_DUMP_DIR cannot be created or written.
void configure(const Options& options);
const Options& options();

// Plans, compiles (or reuses) and launches `trace` on `dev`, then releases
// the trace's buffers. Returns once the launches are submitted (it never
// waits for the device, whatever KILN_LAUNCH_BLOCKING says). `reason`
// is what made the flush happen (counted in the metrics).
void flush(runtime::Device& dev, trace::Trace trace, std::string_view reason);

// Each compile of this process, in order (benchmarks): the compiling
// thread's CPU time and the wall time, in ms (see codegen::CompiledObject).
struct CompileTime {
  double cpu_ms = 0;
  double wall_ms = 0;
};
std::vector<CompileTime> compile_times();

// The process's compiled executables (the persistent store comes next).
cache::MemoryCache& executable_cache();

}  // namespace kiln::engine
