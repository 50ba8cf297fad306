// Calls and constants that every part of the lowering emits: LLVM
// intrinsics, libm functions, floating-point constants.
#pragma once

#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/Intrinsics.h>

#include <initializer_list>

namespace kiln::codegen {

// A call of intrinsic `id`, overloaded on the type of the first argument.
llvm::Value* call_intrinsic(llvm::IRBuilderBase& b, llvm::Intrinsic::ID id, std::initializer_list<llvm::Value*> args);

// A call of libm's `name` (its float form, `name` + "f", for float
// arguments), for functions with no intrinsic (tanh, expm1, erf, ...).
llvm::Value* call_libm(llvm::IRBuilderBase& b, const char* name, std::initializer_list<llvm::Value*> args);

inline llvm::Value* fconst(llvm::Type* ty, double v) { return llvm::ConstantFP::get(ty, v); }

}  // namespace kiln::codegen
