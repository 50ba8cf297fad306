// KILN_CACHE_DIR/runs.log: one line per process that used the store, written
// at its exit, so that `python -m kiln cache stats` can show how recent runs
// fared (hits, misses, compiles). No torch, no LLVM.
//
// A line: "t=<unix s> pid=<pid> hits=<n> misses=<n> compiles=<n> evicted=<n>".
// Appended with O_APPEND (a line is one write(), so concurrent processes'
// lines do not interleave), the file created 0600. Kept bounded: once it
// holds more than kMaxLines lines, the appender rewrites it with the last
// kKeepLines through a temporary file and a rename. Two processes trimming at
// the same moment may lose a line between them: these are statistics, and
// losing a line beats locking at every exit.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace kiln::cache {

struct RunRecord {
  int64_t unix_s = 0;
  int64_t pid = 0;
  uint64_t hits = 0;      // store hits: kernels loaded, not compiled
  uint64_t misses = 0;    // store lookups that found nothing usable
  uint64_t compiles = 0;  // kernels compiled by the process
  uint64_t evicted = 0;   // store entries its writer evicted under the cap
};

constexpr size_t kMaxLines = 1000;
constexpr size_t kKeepLines = 500;

std::string run_log_path(const std::string& cache_dir);

// Appends `r` to the directory's runs.log and trims it past `max_lines`
// (keeping the last `keep_lines`). Returns "" or what failed; the caller
// treats a failure as nothing worse than a missing line.
std::string append_run(const std::string& cache_dir, const RunRecord& r, size_t max_lines = kMaxLines,
                       size_t keep_lines = kKeepLines);

// The records of the directory's runs.log, oldest first; lines that do not
// parse (a torn file) are skipped. Empty when there is no log.
std::vector<RunRecord> read_runs(const std::string& cache_dir);

}  // namespace kiln::cache
