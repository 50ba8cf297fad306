// Kernel IR -> LLVM IR. One function per kernel, with the KernelFn
// signature: its arguments, the alias scopes of its buffers, and the
// expressions of a loop body (the loops are in lower_loops.cpp).
#include "codegen/lower_to_llvm.h"

#include <llvm/IR/MDBuilder.h>
#include <llvm/IR/Module.h>
#include <llvm/IR/Verifier.h>
#include <llvm/Support/raw_ostream.h>

#include <stdexcept>

#include "codegen/llvm_calls.h"
#include "codegen/lower_ops.h"
#include "codegen/lowering.h"
#include "codegen/scale_by_power_of_two.h"
#include "codegen/value_types.h"
#include "codegen/vector_math_library.h"

namespace kiln::codegen {

using ir::DType;
using ir::Op;
using llvm::Value;

Lowering::Lowering(const ir::Kernel& k, const KernelTraits& traits, llvm::Module& m, const Options& options)
    : k_(k),
      traits_(traits),
      m_(m),
      ctx_(m.getContext()),
      b_(ctx_),
      fast_math_(options.fast_math),
      math_(b_, options.avx512_math && vscalef_available()) {
  i64_ = b_.getInt64Ty();
}

void Lowering::emit(const std::string& symbol) {
  ir::validate(k_);
  auto* ptr = b_.getPtrTy();
  auto* fty = llvm::FunctionType::get(b_.getVoidTy(), {ptr, ptr, ptr, i64_, i64_}, false);
  fn_ = llvm::Function::Create(fty, llvm::Function::ExternalLinkage, symbol, m_);
  fn_->addFnAttr(llvm::Attribute::NoUnwind);
  // LLVM's tuning for recent AVX-512 cores prefers 256-bit vectors (clock
  // throttling on server parts); kernels are throughput loops, take 512.
  fn_->addFnAttr("prefer-vector-width", "512");
  // Divisions marked arcp (every one under KILN_FAST_MATH) become a
  // reciprocal estimate and Newton-Raphson steps: one from AVX-512's 14-bit
  // vector estimate, two from a 12-bit one (rcpss, and AVX2's vrcpps), so a
  // loop's remainder is as accurate as its vector body (not bit-equal: fast
  // math gives up eager's bits anyway).
  static const bool avx512_estimate = host_has_cpu_feature("avx512f");  // the host's features, queried once
  fn_->addFnAttr("reciprocal-estimates", avx512_estimate ? "divf:2,vec-divf:1" : "divf:2,vec-divf:2");
  auto args = fn_->arg_begin();
  Value* bufs = &*args++;
  ints_ = &*args++;
  scalars_ = &*args++;
  Value* begin = &*args++;
  Value* end = &*args++;
  auto* entry = llvm::BasicBlock::Create(ctx_, "entry", fn_);
  b_.SetInsertPoint(entry);
  if (fast_math_) {
    llvm::FastMathFlags f;
    f.setFast();
    b_.setFastMathFlags(f);
  }
  for (int i = 0; i < k_.num_buffers; ++i) {
    base_.push_back(b_.CreateLoad(ptr, b_.CreateConstInBoundsGEP1_64(ptr, bufs, i), "buf" + std::to_string(i)));
  }
  for (int d = 0; d < k_.rank; ++d) sizes_.push_back(int_arg(k_.size_index(d)));
  for (size_t a = 0; a < k_.accesses.size(); ++a) {
    offsets_.push_back(int_arg(k_.offset_index(static_cast<int>(a))));
    std::vector<Value*> s;
    for (int d = 0; d < k_.rank; ++d) s.push_back(stride(static_cast<int>(a), d));
    strides_.push_back(s);
  }
  make_alias_scopes();
  if (k_.reduce_rank == 0) emit_pointwise(begin, end);
  else emit_rows(begin, end);
  b_.CreateRetVoid();
  std::string err;
  llvm::raw_string_ostream os(err);
  if (llvm::verifyFunction(*fn_, &os)) throw std::runtime_error("kiln codegen produced invalid LLVM IR: " + os.str());
}

Value* Lowering::int_arg(int i) {
  if (i < static_cast<int>(k_.baked_geometry.size())) return b_.getInt64(k_.baked_geometry[i]);
  return launch_arg(i64_, ints_, i);
}

// The launch's ints and scalars never change while a kernel runs. Saying
// so lets LLVM hoist a scalar read inside a loop and keeps the vectorizer
// from guarding the loop with runtime overlap checks against the stores
// (and a scalar copy of the loop for when they fail).
Value* Lowering::launch_arg(llvm::Type* ty, Value* array, int i) {
  auto* load = b_.CreateLoad(ty, b_.CreateConstInBoundsGEP1_64(ty, array, i));
  load->setMetadata(llvm::LLVMContext::MD_invariant_load, llvm::MDNode::get(ctx_, {}));
  return load;
}

// Innermost strides the IR fixes are constants, so the vectorizer sees them.
Value* Lowering::stride(int a, int d) {
  if (d == k_.rank - 1) {
    if (k_.accesses[a].inner == ir::Inner::Contiguous) return b_.getInt64(1);
    if (k_.accesses[a].inner == ir::Inner::Broadcast) return b_.getInt64(0);
  }
  return int_arg(k_.stride_index(a, d));
}

// Each pointer slot is its own allocation (fusion never gives one
// allocation two slots), so accesses through different slots never alias.
// Saying so spares the vectorizer its runtime overlap checks, which it
// gives up on past a handful of pointers (an AdamW region has dozens).
void Lowering::make_alias_scopes() {
  llvm::MDBuilder md(ctx_);
  llvm::MDNode* domain = md.createAnonymousAliasScopeDomain("kiln.buffers");
  std::vector<llvm::Metadata*> scopes;
  for (int i = 0; i < k_.num_buffers; ++i)
    scopes.push_back(md.createAnonymousAliasScope(domain, "buffer" + std::to_string(i)));
  for (int i = 0; i < k_.num_buffers; ++i) {
    scope_.push_back(llvm::MDNode::get(ctx_, {scopes[i]}));
    std::vector<llvm::Metadata*> others;
    for (int j = 0; j < k_.num_buffers; ++j) {
      if (j != i) others.push_back(scopes[j]);
    }
    noalias_.push_back(llvm::MDNode::get(ctx_, others));
  }
}

void Lowering::mark_buffer(llvm::Instruction* access, int buffer) {
  access->setMetadata(llvm::LLVMContext::MD_alias_scope, scope_[buffer]);
  access->setMetadata(llvm::LLVMContext::MD_noalias, noalias_[buffer]);
}

Value* Lowering::address(int access, Scope& s) {
  Value* off = s.offset[access];
  if (!off) throw std::runtime_error("kiln codegen: access used outside its loop");
  Value* base = s.base[access] ? s.base[access] : base_[k_.accesses[access].buffer];
  return b_.CreateInBoundsGEP(memory_type(b_, k_.accesses[access].dtype), base, off);
}

Value* Lowering::value(int id, Scope& s) {
  if (s.memo[id]) return s.memo[id];
  const ir::Node& n = k_.nodes[id];
  Value* v = nullptr;
  auto in = [&](int j) { return value(n.in[j], s); };
  auto in_dtype = [&](int j) { return k_.nodes[n.in[j]].dtype; };
  switch (n.op) {
    case Op::Load: {
      const ir::Access& a = k_.accesses[n.arg];
      v = b_.CreateLoad(memory_type(b_, a.dtype), address(n.arg, s));
      mark_buffer(llvm::cast<llvm::Instruction>(v), a.buffer);
      if (a.dtype == DType::Bool) v = b_.CreateICmpNE(v, b_.getInt8(0));
      break;
    }
    case Op::Scalar:
      if (ir::is_floating(n.dtype)) {
        Value* d = launch_arg(b_.getDoubleTy(), scalars_, n.arg);
        v = convert(b_, d, DType::Float64, n.dtype);
      } else {
        v = convert(b_, int_arg(k_.int_scalar_index(n.arg)), DType::Int64, n.dtype);
      }
      break;
    case Op::Constant:
      if (ir::is_reduced_float(n.dtype)) v = f32_to_reduced(b_, fconst(b_.getFloatTy(), n.imm), n.dtype);
      else if (ir::is_floating(n.dtype)) v = fconst(register_type(b_, n.dtype), n.imm);
      else
        v = llvm::ConstantInt::get(register_type(b_, n.dtype), static_cast<uint64_t>(static_cast<int64_t>(n.imm)),
                                   true);
      break;
    case Op::ReduceValue: v = b_.CreateLoad(register_type(b_, k_.reductions[n.arg].dtype), results_[n.arg]); break;
    case Op::Cast: v = convert(b_, in(0), in_dtype(0), n.dtype); break;
    case Op::Where: v = b_.CreateSelect(in(0), in(1), in(2)); break;
    case Op::Fma:
      v = ir::is_floating(n.dtype) ? call_intrinsic(b_, llvm::Intrinsic::fma, {in(0), in(1), in(2)})
                                   : b_.CreateAdd(b_.CreateMul(in(0), in(1)), in(2));
      break;
    default:
      if (ir::op_arity(n.op) == 1) v = lower_unary(b_, math_, n.op, in(0), in_dtype(0));
      else v = lower_binary(b_, n.op, in(0), in(1), in_dtype(0));
  }
  s.memo[id] = v;
  return v;
}

// Every value first, then every store: a value may load the address an
// earlier store of the same iteration writes (x read by one op, then
// written in place by the next), and must see the old contents.
void Lowering::store_all(const std::vector<const ir::Store*>& stores, Scope& s) {
  std::vector<Value*> values;
  for (const ir::Store* st : stores) values.push_back(value(st->value, s));
  for (size_t i = 0; i < stores.size(); ++i) {
    Value* v = values[i];
    if (k_.accesses[stores[i]->access].dtype == DType::Bool) v = b_.CreateZExt(v, b_.getInt8Ty());
    mark_buffer(b_.CreateStore(v, address(stores[i]->access, s)), k_.accesses[stores[i]->access].buffer);
  }
}

std::vector<const ir::Store*> Lowering::stores_where(bool row_invariant) {
  std::vector<const ir::Store*> out;
  for (const ir::Store& st : k_.stores) {
    if (k_.reduce_rank == 0 || k_.accesses[st.access].row_invariant == row_invariant) out.push_back(&st);
  }
  return out;
}

void lower_to_llvm(const ir::Kernel& kernel, const KernelTraits& traits, const std::string& symbol,
                   llvm::Module& module, const Options& options) {
  Lowering(kernel, traits, module, options).emit(symbol);
}

}  // namespace kiln::codegen
