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

// Bumped whenever the layout below changes: an older or newer kiln's entries
// then fail the format check instead of being misread.
constexpr uint32_t kEntryFormatVersion = 1;

struct StoredEntry {
  Key key;
  std::string fingerprint;  // codegen::environment_fingerprint of the building process
  std::string object;       // relocatable ELF object
  double compile_ms = 0;    // what loading it instead of compiling saves
  int64_t written_unix_s = 0;
};

// Layout (little-endian): "KILNEXE\0", u32 format version, u32 fingerprint
// length, u64 key low, u64 key high, f64 compile ms, i64 written at (unix
// seconds), u64 object length, fingerprint bytes, object bytes, u64 XXH3-64
// of everything before it.
std::string encode_entry(const StoredEntry& entry);

// Fills `out` from `value` and returns "" when it is a whole, intact entry
// of format kEntryFormatVersion; otherwise returns what is wrong with it.
std::string decode_entry(std::string_view value, StoredEntry& out);

}  // namespace kiln::cache
