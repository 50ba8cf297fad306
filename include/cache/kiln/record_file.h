// Small files of (u64, u64) records beside the store, each read whole when
// first needed and rewritten whole at exit, one per kind and identity:
//
// - first-sight verdicts (kRecordVerdicts): the argument cases of ops whose
//   eager checks passed and whose meta kernel gave the CPU kernel's geometry
//   (key: a hash of the op's name, value: the case), for one dispatch build,
//   torch version and CPU (engine/stored_verdicts.h);
// - device memory (kRecordDeviceMemory): the blocks a program's device pool
//   held at its last exit (key: the block's bytes, value: how many), for one
//   program and device (engine/warm_start.h), reserved again at the next
//   start before the program asks;
// - fused traces (kRecordFusedTraces): the start keys of the traces a
//   program ran fused or queued for fusing (key: the start key, value: 0),
//   for one program and compiler (engine/warm_start.h): the next run fuses
//   them from their first occurrence.
//
// No torch, no LLVM.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kiln::cache {

struct Record {
  uint64_t key = 0;
  uint64_t value = 0;
  bool operator==(const Record&) const = default;
};

struct RecordKind {
  const char* file_prefix;  // "<prefix>-<hash of the identity>.bin"
  char magic[8];
  uint32_t format_version;  // bumped whenever what a kind's records mean changes
};

inline constexpr RecordKind kRecordVerdicts{"verdicts", {'K', 'I', 'L', 'N', 'V', 'R', 'D', '\0'}, 1};
inline constexpr RecordKind kRecordKernels{"kernels", {'K', 'I', 'L', 'N', 'K', 'R', 'N', '\0'}, 1};
inline constexpr RecordKind kRecordDeviceMemory{"memory", {'K', 'I', 'L', 'N', 'M', 'E', 'M', '\0'}, 1};
inline constexpr RecordKind kRecordFusedTraces{"traces", {'K', 'I', 'L', 'N', 'T', 'R', 'C', '\0'}, 1};

// The file of `kind` for `identity` in `dir`: <prefix>-<XXH3-64 of identity>.bin.
std::string record_file_path(const std::string& dir, const RecordKind& kind, std::string_view identity);

// Layout (little-endian): the kind's magic, u32 format version, u32 identity
// length, u64 record count, the identity, the records (u64 key, u64 value),
// u64 XXH3-64 of everything before it.
std::string encode_records(const RecordKind& kind, std::string_view identity, const std::vector<Record>& records);
// Fills `out` and returns "" for an intact file of this kind, format and
// `identity`; else what is wrong (and `out` is left empty).
std::string decode_records(const RecordKind& kind, std::string_view bytes, std::string_view identity,
                           std::vector<Record>& out);

// The records at `path`: none and "" when there is no file; none and what is
// wrong when it is damaged, foreign or unreadable.
std::vector<Record> read_records(const std::string& path, const RecordKind& kind, std::string_view identity,
                                 std::string& problem);
// Writes the file whole (a temporary file in the same directory, mode 0600,
// renamed over it): a reader sees the old file or the new one, never a part.
// Returns "" or what failed.
std::string write_records(const std::string& path, const RecordKind& kind, std::string_view identity,
                          const std::vector<Record>& records);

}  // namespace kiln::cache
