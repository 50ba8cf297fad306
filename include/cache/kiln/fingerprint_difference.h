// What differs between two environment fingerprints, for a miss's reason.
// A fingerprint is fields separated by ';', each "name=value" (a field
// without '=' is named "version"); codegen::environment_fingerprint makes
// them, docs/cache.md lists them. No torch, no LLVM.
#pragma once

#include <string>
#include <string_view>

namespace kiln::cache {

// One line naming every field whose value differs, with both values
// ("cpu: 'znver3' there, 'skylake-avx512' here"); a value that is a
// comma-separated list is told by what the other lacks ("features: here
// lacks +avx512f"). Fields present on one side only are named too. "" when
// the two are the same.
std::string fingerprint_difference(std::string_view there, std::string_view here);

}  // namespace kiln::cache
