// The one way kiln folds values into its 64-bit structural hashes: the
// dispatch layer's case hashes (argument shapes, patterns, cases,
// signatures), which key verdicts with no second comparison (a collision
// would skip an argument check), and the adaptive policy's trace keys
// (trace::op_hash, engine::start_trace).
#pragma once

#include <cstdint>

namespace kiln {

// h' = splitmix64's finalizer over (h ^ v): every bit of v reaches every bit
// of h'. The FNV-style step it replaces, (h ^ v) * prime, carries a bit only
// upwards: keys that differ in the high bits of two values (pattern class
// ids start at INT64_MIN) could cancel, and the soak met wrong verdicts.
inline uint64_t mix_in(uint64_t h, uint64_t v) {
  uint64_t x = h ^ v;
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  x ^= x >> 31;
  return x;
}

}  // namespace kiln
