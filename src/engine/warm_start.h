// What a program's last run needed, made ready while its next run starts
// (internal to src/engine; docs/cache.md, "Warm start"). Beside the store,
// per program (its script) and device, at exit:
//
// - its kernels (kernels-<hash>.bin: the store keys its plans used, in order
//   of first use). The next run loads them from the store into memory ahead
//   of its first flush, which otherwise waits for each load (about 0.35 ms
//   a kernel on a cold process; gpt_train's first step loads 18);
// - its fused traces (traces-<hash>.bin: the start keys of the traces it
//   ran fused or queued for fusing). The next run fuses them from their
//   first occurrence: their kernels are in the store;
// - its device memory (memory-<hash>.bin: per block size, the most blocks
//   it held at once). A first step allocates all of it fresh and the kernel
//   maps and zeroes every page at its first touch, inside the step
//   (gpt_train: 110 MB, 26k page faults, 50-80 ms of system time). The next
//   run reserves and pages it in ahead (at most 1 GiB).
//
// Both happen on one background thread of idle priority (SCHED_IDLE) while
// the program still imports and builds its model. Nothing of it changes a
// result: a kernel not preloaded is loaded at its flush, a block not
// reserved is allocated at its request.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kiln/cache.h"

namespace kiln::engine {

// Starts the background work for `program` (an identity of the running
// program) from the files in `dir`; nothing when `dir` or `program` is empty
// or no file exists. `read_only`: the files are used, not saved.
void open_warm_start(const std::string& dir, const std::string& program, bool read_only);
// Whether this program's last run ran the trace of start key `start_key`
// fused (or queued it for fusing): its kernels are in the store, and it
// runs fused from its first occurrence (the adaptive policy's library tier
// is for kernels not compiled yet).
bool fused_in_last_run(uint64_t start_key);
// Saved by save_warm_start: the start keys this run fused (flush.cpp).
std::vector<uint64_t> fused_start_keys();
// Stops and joins the background work (before a fork, at exit).
void stop_warm_start();
// Stops it and saves what this run needed (close_store calls it).
void save_warm_start();
// A kernel a flush's plan needed (recorded when the plan is built).
void note_kernel_used(const cache::Key& key);
// Adds the counters to the metrics (warm_start: preloaded_kernels,
// prefilled_bytes, prefill_used_bytes).
void publish_warm_start_counters();

// Loads the stored kernel `key` into the process's executable cache (flush.cpp);
// false when the store has no intact entry of it.
bool preload_kernel(const cache::Key& key);

}  // namespace kiln::engine
