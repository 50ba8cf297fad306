// How kernel values are represented in LLVM, and conversions between dtypes.
//
// In registers: bool i1, integers iN, float16/bfloat16 as their i16 bits
// (rounded after every op, as eager rounds every op's result),
// float32/float64 natively. In memory, bool is a byte.
#pragma once

#include <llvm/IR/IRBuilder.h>

#include "kiln/kernel_ir.h"

namespace kiln::codegen {

llvm::Type* register_type(llvm::IRBuilderBase& b, ir::DType t);
llvm::Type* memory_type(llvm::IRBuilderBase& b, ir::DType t);

inline bool is_unsigned(ir::DType t) { return t == ir::DType::UInt8 || t == ir::DType::Bool; }

// Reduced float bits (float16, bfloat16) -> float, and back, rounding to
// nearest even.
llvm::Value* reduced_to_f32(llvm::IRBuilderBase& b, llvm::Value* v, ir::DType from);
llvm::Value* f32_to_reduced(llvm::IRBuilderBase& b, llvm::Value* f, ir::DType to);

// `v` of dtype `from` as dtype `to`, converted as eager converts.
llvm::Value* convert(llvm::IRBuilderBase& b, llvm::Value* v, ir::DType from, ir::DType to);

}  // namespace kiln::codegen
