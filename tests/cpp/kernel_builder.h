// Test helper: builds Kernel IR by hand.
#pragma once

#include "kiln/kernel_ir.h"

namespace kiln::test {

struct KernelBuilder {
  ir::Kernel k;
  KernelBuilder(int rank, int reduce_rank = 0) {
    k.rank = rank;
    k.reduce_rank = reduce_rank;
  }
  int access(ir::DType t, ir::Inner inner, bool row_invariant = false) {
    k.accesses.push_back({k.num_buffers++, t, inner, row_invariant});
    return static_cast<int>(k.accesses.size()) - 1;
  }
  int node(ir::Op op, ir::DType t, int a = -1, int b = -1, int c = -1, int arg = -1, double imm = 0) {
    ir::Node n;
    n.op = op;
    n.dtype = t;
    n.in[0] = a;
    n.in[1] = b;
    n.in[2] = c;
    n.arg = arg;
    n.imm = imm;
    k.nodes.push_back(n);
    return static_cast<int>(k.nodes.size()) - 1;
  }
  int load(int access) { return node(ir::Op::Load, k.accesses[access].dtype, -1, -1, -1, access); }
  int scalar(ir::DType t) {
    k.scalars.push_back(t);
    return node(ir::Op::Scalar, t, -1, -1, -1, static_cast<int>(k.scalars.size()) - 1);
  }
  int constant(ir::DType t, double v) { return node(ir::Op::Constant, t, -1, -1, -1, -1, v); }
  int reduce(ir::ReduceKind kind, ir::DType t, int value) {
    k.reductions.push_back({kind, t, value});
    return node(ir::Op::ReduceValue, t, -1, -1, -1, static_cast<int>(k.reductions.size()) - 1);
  }
  void store(int access, int value) { k.stores.push_back({access, value}); }
};

}  // namespace kiln::test
