// The bytes of one stored executable: a fixed header, the environment
// fingerprint it was built for, the relocatable object, and a checksum over
// all of it. A value is loaded only after every field checks out, so a flipped
// byte, a truncated write or another version's entry is a miss, never code.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "kiln/cache.h"

namespace kiln::cache {

// Bumped whenever the layout below changes: a newer kiln's entries then fail
// the format check instead of being misread. Entries of format 1 (no kernel
// identity) are still read.
constexpr uint32_t kEntryFormatVersion = 2;

struct StoredEntry {
  Key key;
  // The kernel alone, whatever the environment (cache::kernel_identity):
  // what lets a miss find the same kernel built elsewhere and say which
  // fingerprint field differed. {0, 0} in an entry of format 1.
  Key kernel;
  std::string fingerprint;  // codegen::environment_fingerprint of the building process
  std::string object;       // relocatable ELF object
  double compile_ms = 0;    // what loading it instead of compiling saves
  int64_t written_unix_s = 0;
};

// Layout (little-endian): "KILNEXE\0", u32 format version, u32 fingerprint
// length, u64 key low, u64 key high, u64 kernel low, u64 kernel high (not in
// format 1), f64 compile ms, i64 written at (unix seconds), u64 object
// length, fingerprint bytes, object bytes, u64 XXH3-64 of everything before
// it.
std::string encode_entry(const StoredEntry& entry);

// Fills `out` from `value` and returns "" when it is a whole, intact entry
// of format kEntryFormatVersion or 1; otherwise returns what is wrong with it.
std::string decode_entry(std::string_view value, StoredEntry& out);

}  // namespace kiln::cache
