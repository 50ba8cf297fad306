// The file `python -m kiln cache export` writes and `import` reads: a store's
// entries carried to another machine or user. No torch, no LLVM.
//
// Layout (little-endian):
//   "KILNEXP\0"        8 bytes of magic
//   u32 version        kExportFormatVersion
//   u32 reserved       0
//   u64 count          how many entries follow
//   count times:       u64 length, then that many bytes: one entry exactly as
//                      the store holds it (entry_format.h: key, fingerprint,
//                      object and the entry's own XXH3-64)
//   u64 XXH3-64        of every byte before it
// The whole-file checksum is checked before any entry is used, so a
// truncated or damaged file is refused whole and nothing of it is stored.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kiln::cache {

constexpr uint32_t kExportFormatVersion = 1;

// The bytes of an export file holding `entries` (encoded entries).
std::string encode_export(const std::vector<std::string>& entries);

// Fills `entries` from `file` and returns "" when it is a whole, intact
// export file of version kExportFormatVersion; otherwise returns what is
// wrong with it and leaves `entries` empty.
std::string decode_export(std::string_view file, std::vector<std::string>& entries);

// Writes `entries` to `path` through a temporary file in the same directory,
// renamed over `path` once complete and synced: a reader never sees half a
// file. Returns "" or a sentence naming the path and the error.
std::string write_export_file(const std::string& path, const std::vector<std::string>& entries);

// Reads and decodes `path` (decode_export). Returns "" or a sentence naming
// the path and what is wrong.
std::string read_export_file(const std::string& path, std::vector<std::string>& entries);

// The entries of an export file sorted for import into a store whose
// processes build for `fingerprint`.
struct ImportSelection {
  std::vector<std::string> matching;  // intact and built for `fingerprint`
  size_t foreign = 0;                 // intact, built for another environment
  size_t bad = 0;                     // failing their own checks
};
ImportSelection select_for_import(const std::vector<std::string>& entries, std::string_view fingerprint);

}  // namespace kiln::cache
