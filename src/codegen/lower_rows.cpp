// Row kernels: the work range is a range of rows (the outer dims); each row
// runs its reductions over the reduced dims, then its element stores, then
// the stores of its row-level values.
#include <limits>

#include "codegen/llvm_calls.h"
#include "codegen/lower_ops.h"
#include "codegen/lowering.h"
#include "codegen/value_types.h"

namespace kiln::codegen {

using ir::DType;
using ir::Op;
using ir::ReduceKind;
using llvm::Value;

namespace {
// A float max or min: vectorized in its own form (emit_reduction).
bool is_float_extreme(const ir::Reduction& r) {
  return ir::is_floating(r.dtype) && (r.kind == ReduceKind::Max || r.kind == ReduceKind::Min);
}
}  // namespace

void Lowering::emit_rows(Value* begin, Value* end) {
  const int R = k_.rank, K0 = R - k_.reduce_rank;
  // Accumulators live in allocas (promoted to registers by the optimizer).
  for (const ir::Reduction& r : k_.reductions) {
    results_.push_back(b_.CreateAlloca(register_type(b_, r.dtype)));
    const bool arg = r.kind == ReduceKind::ArgMax || r.kind == ReduceKind::ArgMin;
    best_.push_back(arg ? b_.CreateAlloca(register_type(b_, k_.nodes[r.value].dtype)) : nullptr);
    saw_nan_.push_back(is_float_extreme(r) ? b_.CreateAlloca(b_.getInt8Ty()) : nullptr);
  }
  loop(begin, end, "row", [&](Value* row) {
    std::vector<Value*> outer = coordinates(row, 0, K0);
    std::vector<Value*> row_base;
    for (size_t a = 0; a < k_.accesses.size(); ++a)
      row_base.push_back(offset_at(static_cast<int>(a), outer, 0, K0, offsets_[a]));
    for (size_t ri = 0; ri < k_.reductions.size(); ++ri) emit_reduction(static_cast<int>(ri), row_base);
    const std::vector<const ir::Store*> element_stores = stores_where(false);
    if (!element_stores.empty()) {
      reduced_loops(row_base, [&](Scope& s, Value*) { store_all(element_stores, s); }, Vectorize::Wide);
    }
    Scope rs = new_scope();
    for (size_t a = 0; a < k_.accesses.size(); ++a) {
      if (k_.accesses[a].row_invariant) rs.offset[a] = row_base[a];
    }
    store_all(stores_where(true), rs);
  });
}

// Loops over the reduced dims [K0, R) of one row; body gets a scope with
// every access's element offset and the running linear index in the row.
void Lowering::reduced_loops(const std::vector<Value*>& row_base, const std::function<void(Scope&, Value*)>& body,
                             Vectorize innermost) {
  const int R = k_.rank, K0 = R - k_.reduce_rank;
  std::function<void(int, std::vector<Value*>, Value*)> nest = [&](int d, std::vector<Value*> base, Value* lin) {
    loop(
        b_.getInt64(0), sizes_[d], "r" + std::to_string(d),
        [&](Value* i) {
          std::vector<Value*> off;
          for (size_t a = 0; a < k_.accesses.size(); ++a)
            off.push_back(b_.CreateAdd(base[a], b_.CreateMul(i, strides_[a][d])));
          Value* l = b_.CreateAdd(b_.CreateMul(lin, sizes_[d]), i);
          if (d + 1 < R) {
            nest(d + 1, off, l);
          } else {
            Scope s = new_scope();
            s.offset = off;
            body(s, l);
          }
        },
        d + 1 == R ? innermost : Vectorize::Auto);
  };
  nest(K0, row_base, b_.getInt64(0));
}

namespace {

// The least (`least`) or greatest value of integer type `ty`.
llvm::Constant* int_extreme(llvm::Type* ty, bool unsigned_type, bool least) {
  const unsigned bits = ty->getIntegerBitWidth();
  if (least)
    return unsigned_type ? llvm::ConstantInt::get(ty, 0)
                         : llvm::ConstantInt::get(ty, llvm::APInt::getSignedMinValue(bits));
  return llvm::ConstantInt::get(ty,
                                unsigned_type ? llvm::APInt::getMaxValue(bits) : llvm::APInt::getSignedMaxValue(bits));
}

}  // namespace

Value* Lowering::reduce_init(const ir::Reduction& r) {
  llvm::Type* ty = register_type(b_, r.dtype);
  const bool f = ir::is_floating(r.dtype);
  const double inf = std::numeric_limits<double>::infinity();
  switch (r.kind) {
    case ReduceKind::Sum: return f ? fconst(ty, 0) : llvm::ConstantInt::get(ty, 0);
    case ReduceKind::Prod: return f ? fconst(ty, 1) : llvm::ConstantInt::get(ty, 1);
    case ReduceKind::Max: return f ? fconst(ty, -inf) : int_extreme(ty, is_unsigned(r.dtype), /*least=*/true);
    case ReduceKind::Min: return f ? fconst(ty, inf) : int_extreme(ty, is_unsigned(r.dtype), /*least=*/false);
    case ReduceKind::Any: return b_.getFalse();
    case ReduceKind::All: return b_.getTrue();
    case ReduceKind::ArgMax:
    case ReduceKind::ArgMin: return b_.getInt64(0);
  }
  return nullptr;
}

void Lowering::emit_reduction(int ri, const std::vector<Value*>& row_base) {
  const ir::Reduction& r = k_.reductions[ri];
  const DType vt = k_.nodes[r.value].dtype;
  const bool f = ir::is_floating(vt);
  b_.CreateStore(reduce_init(r), results_[ri]);
  const bool is_arg = r.kind == ReduceKind::ArgMax || r.kind == ReduceKind::ArgMin;
  if (is_arg) {
    const double inf = std::numeric_limits<double>::infinity();
    llvm::Type* ty = register_type(b_, vt);
    Value* init;
    if (f) init = fconst(ty, r.kind == ReduceKind::ArgMax ? -inf : inf);
    else if (vt == DType::Bool) init = b_.getInt1(r.kind == ReduceKind::ArgMin);
    else init = int_extreme(ty, is_unsigned(vt), /*least=*/r.kind == ReduceKind::ArgMax);
    b_.CreateStore(init, best_[ri]);
  }
  // A float max or min is maxnum/minnum over the values that are not NaN
  // (which LLVM vectorizes: without NaNs it is order-free but for the sign
  // of a zero tie, which eager does not fix either: CPU's amax and max give
  // -0 and +0 for one input), and a flag of its own for whether a NaN was
  // seen (an or, which vectorizes too). A NaN anywhere makes the result NaN,
  // as in eager. A compare-and-select loop propagating the NaN stays scalar.
  const bool float_extreme = is_float_extreme(r);
  Value* saw_nan = saw_nan_[ri];
  if (float_extreme) b_.CreateStore(b_.getInt8(0), saw_nan);
  reduced_loops(
      row_base,
      [&](Scope& s, Value* lin) {
        Value* v = value(r.value, s);
        Value* acc = b_.CreateLoad(register_type(b_, r.dtype), results_[ri]);
        Value* next = nullptr;
        switch (r.kind) {
          case ReduceKind::Sum: next = lower_binary(b_, Op::Add, acc, convert(b_, v, vt, r.dtype), r.dtype); break;
          case ReduceKind::Prod: next = lower_binary(b_, Op::Mul, acc, convert(b_, v, vt, r.dtype), r.dtype); break;
          case ReduceKind::Max:
          case ReduceKind::Min: {
            Value* x = convert(b_, v, vt, r.dtype);
            if (float_extreme) {
              llvm::FastMathFlags no_nans_or_signed_zeros;
              no_nans_or_signed_zeros.setNoNaNs();
              no_nans_or_signed_zeros.setNoSignedZeros();
              // Poison where x is NaN; the NaN flag then picks the result.
              next = b_.CreateBinaryIntrinsic(
                  r.kind == ReduceKind::Max ? llvm::Intrinsic::maxnum : llvm::Intrinsic::minnum, acc, x);
              llvm::cast<llvm::Instruction>(next)->setFastMathFlags(no_nans_or_signed_zeros);
              Value* nan = b_.CreateZExt(b_.CreateFCmpUNO(x, x), b_.getInt8Ty());
              b_.CreateStore(b_.CreateOr(b_.CreateLoad(b_.getInt8Ty(), saw_nan), nan), saw_nan);
              break;
            }
            Value* better = lower_compare(b_, r.kind == ReduceKind::Max ? Op::Gt : Op::Lt, x, acc, r.dtype);
            if (ir::is_floating(r.dtype)) better = b_.CreateOr(better, b_.CreateFCmpUNO(x, x));  // NaN wins
            next = b_.CreateSelect(better, x, acc);
            break;
          }
          case ReduceKind::Any: next = b_.CreateOr(acc, convert(b_, v, vt, DType::Bool)); break;
          case ReduceKind::All: next = b_.CreateAnd(acc, convert(b_, v, vt, DType::Bool)); break;
          case ReduceKind::ArgMax:
          case ReduceKind::ArgMin: {
            // First index of the extreme value; the first NaN wins and stays.
            Value* best = b_.CreateLoad(register_type(b_, vt), best_[ri]);
            Value* better = lower_compare(b_, r.kind == ReduceKind::ArgMax ? Op::Gt : Op::Lt, v, best, vt);
            if (f) better = b_.CreateAnd(b_.CreateOr(better, b_.CreateFCmpUNO(v, v)), b_.CreateFCmpORD(best, best));
            b_.CreateStore(b_.CreateSelect(better, v, best), best_[ri]);
            next = b_.CreateSelect(better, lin, acc);
            break;
          }
        }
        b_.CreateStore(next, results_[ri]);
      },
      r.kind == ReduceKind::Sum || float_extreme ? Vectorize::WideReduction : Vectorize::Auto);
  if (float_extreme) {
    llvm::Type* ty = register_type(b_, r.dtype);
    Value* seen = b_.CreateICmpNE(b_.CreateLoad(b_.getInt8Ty(), saw_nan), b_.getInt8(0));
    Value* extreme = b_.CreateLoad(ty, results_[ri]);
    b_.CreateStore(b_.CreateSelect(seen, llvm::ConstantFP::getQNaN(ty), extreme), results_[ri]);
  }
}

}  // namespace kiln::codegen
