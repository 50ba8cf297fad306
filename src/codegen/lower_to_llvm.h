// Kernel IR -> an LLVM function (internal to src/codegen).
#pragma once

#include <string>

#include "kiln/codegen.h"
#include "kiln/kernel_ir.h"

namespace llvm {
class Module;
}

namespace kiln::codegen {

// Adds `symbol` (a KernelFn) computing `kernel` to `module`. Throws
// std::invalid_argument for invalid IR, std::runtime_error for IR codegen
// cannot lower.
void lower_to_llvm(const ir::Kernel& kernel, const std::string& symbol, llvm::Module& module, const Options& options);

// math_chain_depth(kernel) >= 2, as in sin -> exp -> tanh: the kernel's
// element loops interleave 8 vectors deep (see Vectorize in
// lower_to_llvm.cpp), and the code generator runs without early machine
// LICM (see add_code_generation_passes in jit.cpp).
bool has_deep_math(const ir::Kernel& kernel);

// After optimization, for a kernel with streaming_stores: makes its vector
// stores whose alignment was proven (from lower_to_llvm's assumptions, by
// infer-alignment) non-temporal.
void mark_streaming_stores(llvm::Module& module);

}  // namespace kiln::codegen
