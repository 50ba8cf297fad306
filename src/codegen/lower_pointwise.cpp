// Pointwise kernels: the work range is a range of linear element indices.
// Walk it one innermost-dim run at a time: coordinates once per run, then a
// plain loop the vectorizer can take.
#include <optional>

#include "codegen/lowering.h"
#include "codegen/streaming_stores.h"

namespace kiln::codegen {

using ir::DType;
using ir::Op;
using llvm::Value;

namespace {

bool is_float_sincos(const ir::Node& n) {
  return (n.op == Op::Sin || n.op == Op::Cos) && ir::is_floating(n.dtype) && n.dtype != DType::Float64;
}

}  // namespace

void Lowering::emit_pointwise(Value* begin, Value* end) {
  const int R = k_.rank;
  // In the entry block, so that they become a register (a max-reduction)
  // and stack slots.
  Value* largest_sincos_argument = uses_float_sincos() ? b_.CreateAlloca(b_.getInt32Ty()) : nullptr;
  const bool streams = k_.streaming_stores;
  std::optional<StreamingTiles> tiles;
  if (streams) tiles.emplace(b_, k_);
  auto* pre = b_.GetInsertBlock();
  auto* head = llvm::BasicBlock::Create(ctx_, "run.head", fn_);
  auto* body = llvm::BasicBlock::Create(ctx_, "run.body", fn_);
  auto* exit = llvm::BasicBlock::Create(ctx_, "run.exit", fn_);
  b_.CreateBr(head);
  b_.SetInsertPoint(head);
  auto* i = b_.CreatePHI(i64_, 2, "i");
  i->addIncoming(begin, pre);
  b_.CreateCondBr(b_.CreateICmpSLT(i, end), body, exit);
  b_.SetInsertPoint(body);
  std::vector<Value*> c = coordinates(i, 0, R);
  Value* start = c[R - 1];
  Value* run_left = b_.CreateSub(sizes_[R - 1], start);
  Value* range_left = b_.CreateSub(end, i);
  Value* count = b_.CreateSelect(b_.CreateICmpSLT(run_left, range_left), run_left, range_left, "count");
  std::vector<Value*> row_base;
  for (size_t a = 0; a < k_.accesses.size(); ++a) {
    Value* off = offset_at(static_cast<int>(a), c, 0, R - 1, offsets_[a]);
    row_base.push_back(b_.CreateAdd(off, b_.CreateMul(start, strides_[a][R - 1])));
  }
  StreamingTiles::Placement placed;
  if (streams) {
    placed = tiles->place_run(count, row_base, base_);
    count = placed.count;
  }
  auto scope_at = [&](Value* j) {
    Scope s = new_scope();
    for (size_t a = 0; a < k_.accesses.size(); ++a) {
      s.offset[a] = b_.CreateAdd(row_base[a], b_.CreateMul(j, strides_[a][R - 1]));
    }
    for (size_t a = 0; a < placed.dest.size(); ++a) {
      if (placed.dest[a] == nullptr) continue;
      s.base[a] = placed.dest[a];
      s.offset[a] = j;
    }
    return s;
  };
  auto run = [&](const char* name, Vectorize vectorize) {
    loop(
        b_.getInt64(0), count, name,
        [&](Value* j) {
          Scope s = scope_at(j);
          store_all(stores_where(false), s);
        },
        vectorize);
  };
  // The run with float-only sin/cos, and the exact one that redoes it when
  // an argument was beyond the float reduction (FloatMath::SinCos).
  auto run_small = [&] {
    math_.set_sin_cos(FloatMath::SinCos::FloatTracked, largest_sincos_argument);
    run("j.small", Vectorize::Wide);
    math_.set_sin_cos(FloatMath::SinCos::Double);
  };
  auto run_exact = [&](llvm::BasicBlock* done) {
    math_.set_sin_cos(FloatMath::SinCos::Exact);
    run("j", Vectorize::Scalar);
    math_.set_sin_cos(FloatMath::SinCos::Double);
    b_.CreateBr(done);
    b_.SetInsertPoint(done);
  };
  if (largest_sincos_argument == nullptr) {
    run("j", Vectorize::Wide);
  } else if (!may_rerun()) {
    // In place: a run cannot be computed twice (its first stores would
    // feed the second). Scan its sin/cos arguments first (loads only),
    // then take the float loop or the exact one.
    b_.CreateStore(b_.getInt32(0), largest_sincos_argument);
    loop(
        b_.getInt64(0), count, "j.scan",
        [&](Value* j) {
          Scope s = scope_at(j);
          for (const ir::Node& n : k_.nodes) {
            if (!is_float_sincos(n)) continue;
            math_.track_largest(value(n.in[0], s), largest_sincos_argument);
          }
        },
        Vectorize::Wide);
    auto* small = llvm::BasicBlock::Create(ctx_, "run.small", fn_);
    auto* exact = llvm::BasicBlock::Create(ctx_, "run.exact", fn_);
    auto* done = llvm::BasicBlock::Create(ctx_, "run.done", fn_);
    Value* largest = b_.CreateLoad(b_.getInt32Ty(), largest_sincos_argument);
    b_.CreateCondBr(math_.beyond_float_sin_cos(largest), exact, small);
    b_.SetInsertPoint(small);
    run_small();
    b_.CreateBr(done);
    b_.SetInsertPoint(exact);
    run_exact(done);
  } else {
    // Optimistic: the run with float-only sin/cos; if any argument was out
    // of its range, all of it again through the exact loop (nothing the
    // first loop stored is read again, see may_rerun()). The exact loop
    // stays scalar: it runs only for huge arguments (docs/codegen.md, "sin
    // and cos").
    b_.CreateStore(b_.getInt32(0), largest_sincos_argument);
    run_small();
    auto* exact = llvm::BasicBlock::Create(ctx_, "run.exact", fn_);
    auto* done = llvm::BasicBlock::Create(ctx_, "run.done", fn_);
    Value* largest = b_.CreateLoad(b_.getInt32Ty(), largest_sincos_argument);
    b_.CreateCondBr(math_.beyond_float_sin_cos(largest), exact, done);
    b_.SetInsertPoint(exact);
    if (streams) fence_streaming_stores(b_);  // after the first loop's non-temporal stores to the same addresses
    run_exact(done);
  }
  if (streams) tiles->copy_out_of_tiles(placed);
  i->addIncoming(b_.CreateAdd(i, count), b_.GetInsertBlock());
  b_.CreateBr(head);
  b_.SetInsertPoint(exit);
  // Before the caller signals that this piece is done.
  if (streams) fence_streaming_stores(b_);
}

bool Lowering::uses_float_sincos() const {
  for (const ir::Node& n : k_.nodes) {
    if (is_float_sincos(n)) return true;
  }
  return false;
}

// A run can be computed twice only if no buffer it stores to is one it
// loads from (an in-place op would read its own first results).
bool Lowering::may_rerun() const {
  std::vector<bool> stored(k_.num_buffers, false);
  for (const ir::Store& st : k_.stores) stored[k_.accesses[st.access].buffer] = true;
  for (const ir::Node& n : k_.nodes) {
    if (n.op == Op::Load && stored[k_.accesses[n.arg].buffer]) return false;
  }
  return true;
}

}  // namespace kiln::codegen
