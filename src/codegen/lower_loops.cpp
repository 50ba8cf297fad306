// Loops and their vectorization hints; where each loop body finds its
// accesses' element offsets.
#include "codegen/lowering.h"

namespace kiln::codegen {

using llvm::Value;

// for (i = lo; i < hi; ++i) body(i). Leaves the builder after the loop.
void Lowering::loop(Value* lo, Value* hi, const std::string& name, const std::function<void(Value*)>& body,
                    Vectorize vectorize) {
  auto* pre = b_.GetInsertBlock();
  auto* head = llvm::BasicBlock::Create(ctx_, name + ".head", fn_);
  auto* bodyb = llvm::BasicBlock::Create(ctx_, name + ".body", fn_);
  auto* exit = llvm::BasicBlock::Create(ctx_, name + ".exit", fn_);
  b_.CreateBr(head);
  b_.SetInsertPoint(head);
  auto* i = b_.CreatePHI(i64_, 2, name);
  i->addIncoming(lo, pre);
  b_.CreateCondBr(b_.CreateICmpSLT(i, hi), bodyb, exit);
  b_.SetInsertPoint(bodyb);
  body(i);
  Value* next = b_.CreateAdd(i, b_.getInt64(1), name + ".next", /*HasNUW=*/true, /*HasNSW=*/true);
  i->addIncoming(next, b_.GetInsertBlock());
  auto* latch = b_.CreateBr(head);
  if (vectorize != Vectorize::Auto) latch->setMetadata(llvm::LLVMContext::MD_loop, loop_hints(vectorize));
  b_.SetInsertPoint(exit);
}

llvm::MDNode* Lowering::loop_hints(Vectorize vectorize) {
  auto hint = [&](const char* name, llvm::Constant* value) {
    return llvm::MDNode::get(ctx_, {llvm::MDString::get(ctx_, name), llvm::ConstantAsMetadata::get(value)});
  };
  llvm::SmallVector<llvm::Metadata*, 3> ops{nullptr};  // loop IDs refer to themselves
  if (vectorize == Vectorize::Scalar) {
    ops.push_back(hint("llvm.loop.vectorize.enable", b_.getFalse()));
  } else {
    ops.push_back(hint("llvm.loop.vectorize.width", b_.getInt32(traits_.vector_width)));
    if (vectorize == Vectorize::Wide && traits_.element_loop_interleave > 0) {
      ops.push_back(hint("llvm.loop.interleave.count", b_.getInt32(traits_.element_loop_interleave)));
    }
  }
  auto* node = llvm::MDNode::getDistinct(ctx_, ops);
  node->replaceOperandWith(0, node);
  return node;
}

// Splits a linear index over dims [first, last) into coordinates (row-major).
std::vector<Value*> Lowering::coordinates(Value* linear, int first, int last) {
  std::vector<Value*> c(k_.rank, nullptr);
  Value* rem = linear;
  for (int d = last - 1; d >= first; --d) {
    if (d == first) {
      c[d] = rem;
    } else {
      c[d] = b_.CreateURem(rem, sizes_[d]);
      rem = b_.CreateUDiv(rem, sizes_[d]);
    }
  }
  return c;
}

Value* Lowering::offset_at(int a, const std::vector<Value*>& coords, int first, int last, Value* base) {
  Value* off = base;
  for (int d = first; d < last; ++d) off = b_.CreateAdd(off, b_.CreateMul(coords[d], strides_[a][d]));
  return off;
}

Lowering::Scope Lowering::new_scope() {
  Scope s;
  s.offset.assign(k_.accesses.size(), nullptr);
  s.memo.assign(k_.nodes.size(), nullptr);
  s.base.assign(k_.accesses.size(), nullptr);
  return s;
}

}  // namespace kiln::codegen
