// What the dispatch layer learns at an op's first sight and every later
// process may reuse: the argument cases whose eager checks passed and whose
// meta kernel gave the CPU kernel's geometry (an op hash and a case hash, no
// torch types here). One small file per identity (the dispatch build, the
// torch version, the CPU) in the cache directory, read whole at the first
// query and rewritten whole at exit. No torch, no LLVM.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kiln::cache {

struct VerdictRecord {
  uint64_t op = 0;         // a stable hash of the op's name and overload
  uint64_t signature = 0;  // the argument case (dispatch/eager/argument_check.h)
  bool operator==(const VerdictRecord&) const = default;
};

// Bumped whenever the layout below changes.
constexpr uint32_t kVerdictFormatVersion = 1;

// The file for `identity` in `dir`: verdicts-<XXH3-64 of identity>.bin.
std::string verdict_file_path(const std::string& dir, std::string_view identity);

// Layout (little-endian): "KILNVRD\0", u32 format version, u32 identity
// length, u64 record count, the identity, the records (u64 op, u64
// signature), u64 XXH3-64 of everything before it.
std::string encode_verdicts(std::string_view identity, const std::vector<VerdictRecord>& records);
// Fills `out` and returns "" for an intact file of this format and
// `identity`; else what is wrong (and `out` is left empty).
std::string decode_verdicts(std::string_view bytes, std::string_view identity, std::vector<VerdictRecord>& out);

// The records at `path`: none and "" when there is no file; none and what is
// wrong when it is damaged, foreign or unreadable.
std::vector<VerdictRecord> read_verdicts(const std::string& path, std::string_view identity, std::string& problem);
// Writes the file whole (a temporary file in the same directory, mode 0600,
// renamed over it): a reader sees the old file or the new one, never a part.
// Returns "" or what failed.
std::string write_verdicts(const std::string& path, std::string_view identity,
                           const std::vector<VerdictRecord>& records);

}  // namespace kiln::cache
