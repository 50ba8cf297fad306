// Kernel IR -> an LLVM function (internal to src/codegen).
#pragma once

#include <string>

#include "kiln/codegen.h"
#include "kiln/kernel_ir.h"

namespace llvm {
class Module;
}

namespace kiln::codegen {

// Adds `symbol` (a KernelFn) computing `kernel`, whose traits_of are
// `traits`, to `module`. Throws std::invalid_argument for invalid IR,
// std::runtime_error for IR codegen cannot lower.
void lower_to_llvm(const ir::Kernel& kernel, const KernelTraits& traits, const std::string& symbol,
                   llvm::Module& module, const Options& options);

}  // namespace kiln::codegen
