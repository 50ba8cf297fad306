// Per-run statistics of the store (see include/cache/kiln/run_log.h).
#include "kiln/run_log.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

#include "file_bytes.h"

namespace kiln::cache {
namespace {

// A line is at least this long ("t=0 pid=0 hits=0 ..." has 45 bytes): a file
// smaller than max_lines lines of it cannot need trimming, so most exits do
// not read the file at all.
constexpr size_t kShortestLine = 45;

std::string format(const RunRecord& r) {
  char line[256];
  std::snprintf(line, sizeof(line),
                "t=%" PRId64 " pid=%" PRId64 " hits=%" PRIu64 " misses=%" PRIu64 " compiles=%" PRIu64
                " evicted=%" PRIu64 "\n",
                r.unix_s, r.pid, r.hits, r.misses, r.compiles, r.evicted);
  return line;
}

bool parse(const std::string& line, RunRecord& r) {
  return std::sscanf(line.c_str(),
                     "t=%" SCNd64 " pid=%" SCNd64 " hits=%" SCNu64 " misses=%" SCNu64 " compiles=%" SCNu64
                     " evicted=%" SCNu64,
                     &r.unix_s, &r.pid, &r.hits, &r.misses, &r.compiles, &r.evicted) == 6;
}

std::vector<std::string> read_lines(const std::string& path) {
  std::vector<std::string> lines;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) lines.push_back(std::move(line));
  return lines;
}

std::string write_all(int fd, const std::string& bytes) {
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return std::strerror(n < 0 ? errno : EIO);
    done += static_cast<size_t>(n);
  }
  return "";
}

// Rewrites `path` with its last `keep` lines, whole.
std::string trim(const std::string& path, size_t keep) {
  std::vector<std::string> lines = read_lines(path);
  if (lines.size() <= keep) return "";
  std::string kept;
  for (size_t i = lines.size() - keep; i < lines.size(); ++i) kept += lines[i] + "\n";
  return detail::write_file_whole(path, kept);
}

}  // namespace

std::string run_log_path(const std::string& cache_dir) { return cache_dir + "/runs.log"; }

std::string append_run(const std::string& cache_dir, const RunRecord& r, size_t max_lines, size_t keep_lines) {
  const std::string path = run_log_path(cache_dir);
  const int fd = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) return "cannot open '" + path + "': " + std::strerror(errno);
  std::string failed = write_all(fd, format(r));  // one write: lines of concurrent processes do not interleave
  struct stat st{};
  const bool may_be_long = ::fstat(fd, &st) == 0 && static_cast<size_t>(st.st_size) > max_lines * kShortestLine;
  ::close(fd);
  if (!failed.empty()) return "cannot append to '" + path + "': " + failed;
  if (may_be_long && read_lines(path).size() > max_lines) {
    failed = trim(path, keep_lines);
    if (!failed.empty()) return "cannot trim '" + path + "': " + failed;
  }
  return "";
}

std::vector<RunRecord> read_runs(const std::string& cache_dir) {
  std::vector<RunRecord> out;
  for (const std::string& line : read_lines(run_log_path(cache_dir))) {
    RunRecord r;
    if (parse(line, r)) out.push_back(r);
  }
  return out;
}

}  // namespace kiln::cache
