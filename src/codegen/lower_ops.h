// Kernel IR's elementwise ops on values already in registers.
#pragma once

#include <llvm/IR/IRBuilder.h>

#include "codegen/float_math.h"
#include "kiln/kernel_ir.h"

namespace kiln::codegen {

// `op` of `x`, whose dtype is `t`. Throws std::runtime_error for an op with
// no lowering for `t`.
llvm::Value* lower_unary(llvm::IRBuilderBase& b, FloatMath& math, ir::Op op, llvm::Value* x, ir::DType t);

// `op` of `x` and `y`, both of dtype `t` (comparisons give bool).
llvm::Value* lower_binary(llvm::IRBuilderBase& b, ir::Op op, llvm::Value* x, llvm::Value* y, ir::DType t);

// A comparison (Eq, Ne, Lt, Le, Gt; any other op is Ge): false when a float
// operand is NaN, except for Ne.
llvm::Value* lower_compare(llvm::IRBuilderBase& b, ir::Op op, llvm::Value* x, llvm::Value* y, ir::DType t);

}  // namespace kiln::codegen
