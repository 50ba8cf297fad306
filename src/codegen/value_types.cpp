#include "codegen/value_types.h"

namespace kiln::codegen {

using ir::DType;
using llvm::Value;

llvm::Type* register_type(llvm::IRBuilderBase& b, DType t) {
  switch (t) {
    case DType::Bool: return b.getInt1Ty();
    case DType::UInt8:
    case DType::Int8: return b.getInt8Ty();
    case DType::Int16:
    case DType::Float16:
    case DType::BFloat16: return b.getInt16Ty();
    case DType::Int32: return b.getInt32Ty();
    case DType::Int64: return b.getInt64Ty();
    case DType::Float32: return b.getFloatTy();
    case DType::Float64: return b.getDoubleTy();
  }
  return nullptr;
}

llvm::Type* memory_type(llvm::IRBuilderBase& b, DType t) {
  return t == DType::Bool ? b.getInt8Ty() : register_type(b, t);
}

Value* reduced_to_f32(llvm::IRBuilderBase& b, Value* v, DType from) {
  if (from == DType::BFloat16) {
    Value* wide = b.CreateShl(b.CreateZExt(v, b.getInt32Ty()), 16);
    return b.CreateBitCast(wide, b.getFloatTy());
  }
  return b.CreateFPExt(b.CreateBitCast(v, b.getHalfTy()), b.getFloatTy());
}

Value* f32_to_reduced(llvm::IRBuilderBase& b, Value* f, DType to) {
  if (to == DType::Float16) return b.CreateBitCast(b.CreateFPTrunc(f, b.getHalfTy()), b.getInt16Ty());
  Value* u = b.CreateBitCast(f, b.getInt32Ty());
  Value* lsb = b.CreateAnd(b.CreateLShr(u, 16), 1);
  Value* rounded = b.CreateLShr(b.CreateAdd(u, b.CreateAdd(lsb, b.getInt32(0x7fff))), 16);
  Value* bits = b.CreateTrunc(rounded, b.getInt16Ty());
  return b.CreateSelect(b.CreateFCmpUNO(f, f), b.getInt16(0x7fc0), bits);
}

Value* convert(llvm::IRBuilderBase& b, Value* v, DType from, DType to) {
  if (from == to) return v;
  if (ir::is_reduced_float(from)) return convert(b, reduced_to_f32(b, v, from), DType::Float32, to);
  if (ir::is_reduced_float(to)) {
    // eager converts through float (c10::BFloat16(float), c10::Half(float))
    return f32_to_reduced(b, convert(b, v, from, DType::Float32), to);
  }
  llvm::Type* ty = register_type(b, to);
  if (to == DType::Bool) {
    if (ir::is_floating(from)) return b.CreateFCmpUNE(v, llvm::ConstantFP::get(v->getType(), 0.0));
    return b.CreateICmpNE(v, llvm::ConstantInt::get(v->getType(), 0));
  }
  if (ir::is_floating(from) && ir::is_floating(to)) return b.CreateFPCast(v, ty);
  if (ir::is_floating(to)) return is_unsigned(from) ? b.CreateUIToFP(v, ty) : b.CreateSIToFP(v, ty);
  if (ir::is_floating(from)) {
    // C++ static_cast as eager's kernels do it: through a wider signed integer.
    if (to == DType::Int64 || to == DType::Int32) return b.CreateFPToSI(v, ty);
    if (to == DType::UInt8) return b.CreateTrunc(b.CreateFPToSI(v, b.getInt64Ty()), ty);
    return b.CreateTrunc(b.CreateFPToSI(v, b.getInt32Ty()), ty);
  }
  return is_unsigned(from) ? b.CreateZExtOrTrunc(v, ty) : b.CreateSExtOrTrunc(v, ty);
}

}  // namespace kiln::codegen
