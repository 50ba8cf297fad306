// The lowering of one kernel to one LLVM function (lower_to_llvm.h), as a
// class whose parts are defined in lower_to_llvm.cpp (the function, its
// arguments and expressions), lower_loops.cpp, lower_pointwise.cpp and
// lower_rows.cpp.
//
// Memory is addressed by element offsets computed from the runtime sizes
// and strides; an access whose innermost stride is 1 or 0 is specialized so
// that the loop vectorizer sees consecutive or uniform loads. The optimizer
// cleans up what is emitted plainly here (allocas for accumulators,
// loop-invariant row values).
#pragma once

#include <llvm/IR/IRBuilder.h>

#include <functional>
#include <string>
#include <vector>

#include "codegen/float_math.h"
#include "kiln/codegen.h"
#include "kiln/kernel_ir.h"

namespace kiln::codegen {

class Lowering {
 public:
  Lowering(const ir::Kernel& k, const KernelTraits& traits, llvm::Module& m, const Options& options);
  void emit(const std::string& symbol);

 private:
  // Per loop body: element offset of every access and the values already
  // computed there.
  struct Scope {
    std::vector<llvm::Value*> offset;  // per access (null: not addressable here)
    std::vector<llvm::Value*> memo;
    std::vector<llvm::Value*> base;  // per access: what offset counts from (null: its buffer's start)
  };

  // How an innermost loop asks to be vectorized (docs/codegen.md, "Loop hints").
  //  Auto: as LLVM sees fit: arg-max/min and product loops, whose float
  //    forms it leaves scalar (NaN propagation, order).
  //  Wide: fill a 512-bit register with the kernel's widest element type
  //    (LLVM often picks half of that where math widens to double inside);
  //    element loops of deep math also interleave deeper (KernelTraits).
  //  WideReduction: Wide for a sum, max or min loop, interleaved as LLVM
  //    sees fit. The hint also lets the vectorizer reorder a float sum into
  //    one partial sum per lane, combined at the end of the row: eager's CPU
  //    kernels sum in lanes too, partial sums are no less accurate, and the
  //    order is fixed for a given row length. Float max and min vectorize
  //    only in the form emit_reduction gives them (maxnum without NaNs, and
  //    a NaN flag of their own).
  //  Scalar: not vectorized (a rarely taken path, not worth its compile time).
  enum class Vectorize { Auto, Wide, WideReduction, Scalar };

  // lower_to_llvm.cpp: arguments, alias scopes, expressions.
  llvm::Value* int_arg(int i);
  llvm::Value* launch_arg(llvm::Type* ty, llvm::Value* array, int i);
  llvm::Value* stride(int a, int d);
  void make_alias_scopes();
  void mark_buffer(llvm::Instruction* access, int buffer);
  llvm::Value* address(int access, Scope& s);
  llvm::Value* value(int id, Scope& s);
  void store_all(const std::vector<const ir::Store*>& stores, Scope& s);
  std::vector<const ir::Store*> stores_where(bool row_invariant);

  // lower_loops.cpp
  void loop(llvm::Value* lo, llvm::Value* hi, const std::string& name, const std::function<void(llvm::Value*)>& body,
            Vectorize vectorize = Vectorize::Auto);
  llvm::MDNode* loop_hints(Vectorize vectorize);
  std::vector<llvm::Value*> coordinates(llvm::Value* linear, int first, int last);
  llvm::Value* offset_at(int a, const std::vector<llvm::Value*>& coords, int first, int last, llvm::Value* base);
  Scope new_scope();

  // lower_pointwise.cpp
  void emit_pointwise(llvm::Value* begin, llvm::Value* end);
  bool uses_float_sincos() const;
  bool may_rerun() const;

  // lower_rows.cpp
  void emit_rows(llvm::Value* begin, llvm::Value* end);
  void reduced_loops(const std::vector<llvm::Value*>& row_base, const std::function<void(Scope&, llvm::Value*)>& body,
                     Vectorize innermost);
  llvm::Value* reduce_init(const ir::Reduction& r);
  void emit_reduction(int ri, const std::vector<llvm::Value*>& row_base);

  const ir::Kernel& k_;
  const KernelTraits& traits_;
  llvm::Module& m_;
  llvm::LLVMContext& ctx_;
  llvm::IRBuilder<> b_;
  bool fast_math_;
  FloatMath math_;
  llvm::Type* i64_;
  llvm::Function* fn_ = nullptr;
  llvm::Value* ints_ = nullptr;
  llvm::Value* scalars_ = nullptr;
  std::vector<llvm::Value*> base_, sizes_, offsets_;
  std::vector<std::vector<llvm::Value*>> strides_;
  std::vector<llvm::Value*> results_, best_;
  std::vector<llvm::Value*> saw_nan_;           // per reduction: an i8 flag of float max and min (else null)
  std::vector<llvm::MDNode*> scope_, noalias_;  // per pointer slot
};

}  // namespace kiln::codegen
