// The persistent level behind the in-memory executable cache: the store this
// process uses (none: memory only), and the warnings it has for the user.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "kiln/engine.h"
#include "kiln/store.h"

namespace kiln::engine {

// Opens the store in `options.dir` (empty: none) for the process. A
// directory that cannot be used leaves the process memory-only, with one
// warning.
void open_store(const cache::StoreOptions& options);
// The store, or null. Null in a forked child: the parent's database handles
// and writer thread did not come along.
std::shared_ptr<cache::Store> store();

// What changes the machine code besides the Kernel IR
// (codegen::environment_fingerprint of the configured options): part of
// every executable key, and checked again in every stored entry.
const std::string& fingerprint();

// What this process did with its kernels, for its line in runs.log
// (written at close_store; run_log.h).
enum class RunEvent { StoreHit, StoreMiss, Compile };
void count_run_event(RunEvent event);

// Queues a warning for engine::take_warnings, once per distinct text.
void warn_once(const std::string& message);

}  // namespace kiln::engine
