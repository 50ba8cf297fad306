// The device memory a program's last run needed, reserved again at the next
// start (internal to src/engine; see docs/cache.md, "Device memory at a warm
// start"). A program's first step allocates all of its device memory fresh:
// the kernel maps and zeroes every page at its first touch, inside the
// step (gpt_train: 110 MB, 27k page faults). What the pool needed is saved
// beside the store at exit, per program and device, and a background thread
// of the next run reserves and touches it while the program is still
// importing and building its model, on an idle core (SCHED_IDLE).
#pragma once

#include <string>

namespace kiln::engine {

// Starts the background reserve for `program` (an identity of the running
// program: its script) from the files in `dir`; nothing when `dir` or
// `program` is empty, or no file exists. `read_only`: the profile is used,
// not saved.
void open_memory_profile(const std::string& dir, const std::string& program, bool read_only);
// Stops and joins the background reserve (before a fork, at exit).
void stop_memory_prefill();
// Stops the reserve and saves what each device's pool needed this run
// (close_store calls it).
void save_memory_profile();
// Adds the reserve's counters to the metrics (warm_start: prefilled_bytes,
// prefill_used_bytes).
void publish_memory_prefill_counters();

}  // namespace kiln::engine
