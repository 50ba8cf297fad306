// Which libm calls the loop vectorizer may replace with glibc's libmvec
// AVX-512 variants (16 floats or 8 doubles per call).
#pragma once

#include <llvm/Analysis/TargetLibraryInfo.h>

#include <string>

namespace kiln::codegen {

// Whether the host CPU has `name` (LLVM's feature name: "avx512f", ...).
bool host_has_cpu_feature(const std::string& name);

// Adds the mappings for every variant this process's libmvec exports, when
// the CPU has AVX-512; a no-op otherwise (calls then stay scalar).
void add_libmvec_avx512(llvm::TargetLibraryInfoImpl& tlii);

// What add_libmvec_avx512 adds, for the environment fingerprint:
// "libmvec=<count of mapped functions>".
std::string libmvec_fingerprint();

}  // namespace kiln::codegen
