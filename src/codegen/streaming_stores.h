// Streaming stores: a kernel with streaming_stores writes its output with
// non-temporal stores, whole lines written without first reading them into
// the cache (a read for ownership) and without displacing what is cached.
//
// LLVM's vectorizer refuses a loop whose non-temporal stores it cannot
// prove aligned, so the loop is vectorized with plain stores whose base is
// assumed 64-byte aligned, and mark_streaming_stores makes the vector stores
// non-temporal afterwards. A run whose stores do not start on a line goes to
// line-aligned tiles on the stack first: only its head (up to the first
// store's next line) when the others are aligned alike, else a tile at a
// time; memcpy then moves the tiles to the run.
#pragma once

#include <llvm/IR/IRBuilder.h>

#include <vector>

#include "kiln/kernel_ir.h"

namespace llvm {
class Module;
}

namespace kiln::codegen {

class StreamingTiles {
 public:
  // Where one run's stores go, and how much of it is taken now (the rest
  // of the run comes back as a run of its own).
  struct Placement {
    llvm::Value* count = nullptr;       // elements of the run taken now
    llvm::Value* misaligned = nullptr;  // i1: they go to the tiles
    std::vector<llvm::Value*> row;      // per stored access: where the run starts
    std::vector<llvm::Value*> dest;     // per stored access: where its element 0 is stored (line-aligned)
  };

  // In the entry block, so that they are stack slots: one tile per stored access.
  StreamingTiles(llvm::IRBuilderBase& b, const ir::Kernel& k);

  // `count` elements left in the run, whose accesses start at element
  // offsets `row_base` from `buffer_base` (per buffer slot).
  Placement place_run(llvm::Value* count, const std::vector<llvm::Value*>& row_base,
                      const std::vector<llvm::Value*>& buffer_base);
  // After the run's loop: what went to the tiles, to the run's outputs.
  void copy_out_of_tiles(const Placement& p);

 private:
  llvm::IRBuilderBase& b_;
  const ir::Kernel& k_;
  std::vector<llvm::Value*> tiles_;  // per access: its tile (null: not stored)
};

// Non-temporal stores are weakly ordered: a seq_cst fence (an mfence on x86;
// weaker fences emit nothing there and would not order them) makes them
// visible before what follows.
void fence_streaming_stores(llvm::IRBuilderBase& b);

// After optimization, for a kernel with streaming_stores: makes its vector
// stores whose alignment was proven (from the lowering's assumptions, by
// infer-alignment) non-temporal.
void mark_streaming_stores(llvm::Module& module);

}  // namespace kiln::codegen
