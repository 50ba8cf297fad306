#include "codegen/streaming_stores.h"

#include <llvm/IR/Module.h>

#include <algorithm>

#include "codegen/value_types.h"

namespace kiln::codegen {
namespace {

constexpr uint64_t kLineBytes = 64;
constexpr int64_t kTileBytes = 4096;  // per store; the misaligned path only

}  // namespace

using llvm::Value;

StreamingTiles::StreamingTiles(llvm::IRBuilderBase& b, const ir::Kernel& k)
    : b_(b), k_(k), tiles_(k.accesses.size(), nullptr) {
  for (const ir::Store& st : k_.stores) {
    auto* tile = b_.CreateAlloca(llvm::ArrayType::get(b_.getInt8Ty(), kTileBytes), nullptr, "tile");
    tile->setAlignment(llvm::Align(kLineBytes));
    tiles_[st.access] = tile;
  }
}

StreamingTiles::Placement StreamingTiles::place_run(Value* count, const std::vector<Value*>& row_base,
                                                    const std::vector<Value*>& buffer_base) {
  Placement p;
  p.row.assign(k_.accesses.size(), nullptr);
  p.dest.assign(k_.accesses.size(), nullptr);
  Value* misaligned = b_.getFalse();
  Value* head = nullptr;  // elements from the first store's start to its next line
  int64_t tile_elements = 0;
  for (size_t a = 0; a < tiles_.size(); ++a) {
    if (tiles_[a] == nullptr) continue;
    const int64_t size = ir::dtype_size(k_.accesses[a].dtype);
    p.row[a] =
        b_.CreateInBoundsGEP(memory_type(b_, k_.accesses[a].dtype), buffer_base[k_.accesses[a].buffer], row_base[a]);
    Value* low = b_.CreateAnd(b_.CreatePtrToInt(p.row[a], b_.getInt64Ty()), kLineBytes - 1);
    misaligned = b_.CreateOr(misaligned, b_.CreateICmpNE(low, b_.getInt64(0)));
    if (head == nullptr) {  // elements are aligned to their size: low is a multiple of it
      head = b_.CreateUDiv(b_.CreateAnd(b_.CreateSub(b_.getInt64(kLineBytes), low), kLineBytes - 1), b_.getInt64(size));
    }
    tile_elements = tile_elements == 0 ? kTileBytes / size : std::min(tile_elements, kTileBytes / size);
  }
  Value* tile = b_.getInt64(tile_elements);
  Value* chunk = b_.CreateSelect(b_.CreateICmpEQ(head, b_.getInt64(0)), tile, head);
  chunk = b_.CreateSelect(b_.CreateICmpSLT(count, chunk), count, chunk);
  p.misaligned = misaligned;
  p.count = b_.CreateSelect(misaligned, chunk, count, "taken");
  const llvm::DataLayout& layout = b_.GetInsertBlock()->getModule()->getDataLayout();
  for (size_t a = 0; a < tiles_.size(); ++a) {
    if (tiles_[a] == nullptr) continue;
    p.dest[a] = b_.CreateSelect(misaligned, tiles_[a], p.row[a]);
    b_.CreateAlignmentAssumption(layout, p.dest[a], kLineBytes);
  }
  return p;
}

void StreamingTiles::copy_out_of_tiles(const Placement& p) {
  llvm::Function* fn = b_.GetInsertBlock()->getParent();
  auto* copy = llvm::BasicBlock::Create(b_.getContext(), "untile", fn);
  auto* done = llvm::BasicBlock::Create(b_.getContext(), "untile.done", fn);
  b_.CreateCondBr(p.misaligned, copy, done);
  b_.SetInsertPoint(copy);
  fence_streaming_stores(b_);  // the tiles may have been written non-temporally too
  for (size_t a = 0; a < tiles_.size(); ++a) {
    if (tiles_[a] == nullptr) continue;
    const int64_t size = ir::dtype_size(k_.accesses[a].dtype);
    b_.CreateMemCpy(p.row[a], llvm::MaybeAlign(size), tiles_[a], llvm::MaybeAlign(kLineBytes),
                    b_.CreateMul(p.count, b_.getInt64(size)));
  }
  b_.CreateBr(done);
  b_.SetInsertPoint(done);
}

void fence_streaming_stores(llvm::IRBuilderBase& b) { b.CreateFence(llvm::AtomicOrdering::SequentiallyConsistent); }

void mark_streaming_stores(llvm::Module& module) {
  const llvm::DataLayout& layout = module.getDataLayout();
  llvm::MDNode* one = llvm::MDNode::get(
      module.getContext(),
      {llvm::ConstantAsMetadata::get(llvm::ConstantInt::get(llvm::Type::getInt32Ty(module.getContext()), 1))});
  for (llvm::Function& fn : module) {
    for (llvm::BasicBlock& block : fn) {
      for (llvm::Instruction& inst : block) {
        auto* st = llvm::dyn_cast<llvm::StoreInst>(&inst);
        if (st == nullptr || !st->getValueOperand()->getType()->isVectorTy()) continue;
        // An under-aligned non-temporal vector store is split down to
        // scalar movnti on x86: only whole, aligned vectors.
        if (st->getAlign().value() < layout.getTypeStoreSize(st->getValueOperand()->getType())) continue;
        st->setMetadata(llvm::LLVMContext::MD_nontemporal, one);
      }
    }
  }
}

}  // namespace kiln::codegen
