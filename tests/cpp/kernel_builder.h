// Test helper: builds Kernel IR by hand.
#pragma once

#include <stdexcept>
#include <vector>

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

// Where an access starts and how it moves along each dim of the space.
struct Window {
  int64_t offset = 0;
  std::vector<int64_t> strides;
};

// The launch ints of `k`, placed by its layout helpers (as fusion places
// them): the sizes, each access's window, the integer scalars' values (the
// rest stay 0).
inline std::vector<int64_t> launch_ints(const ir::Kernel& k, const std::vector<int64_t>& sizes,
                                        const std::vector<Window>& windows,
                                        const std::vector<int64_t>& int_scalars = {}) {
  if (sizes.size() != static_cast<size_t>(k.rank) || windows.size() != k.accesses.size() ||
      int_scalars.size() > k.scalars.size()) {
    throw std::invalid_argument("launch_ints: the arguments do not fit the kernel");
  }
  std::vector<int64_t> ints(k.ints_count(), 0);
  for (int d = 0; d < k.rank; ++d) ints[k.size_index(d)] = sizes[d];
  for (int a = 0; a < static_cast<int>(windows.size()); ++a) {
    if (windows[a].strides.size() != sizes.size()) throw std::invalid_argument("launch_ints: one stride per dim");
    ints[k.offset_index(a)] = windows[a].offset;
    for (int d = 0; d < k.rank; ++d) ints[k.stride_index(a, d)] = windows[a].strides[d];
  }
  for (int s = 0; s < static_cast<int>(int_scalars.size()); ++s) ints[k.int_scalar_index(s)] = int_scalars[s];
  return ints;
}

// Every access a dense row-major walk of `sizes` from offset 0.
inline std::vector<int64_t> dense_ints(const ir::Kernel& k, const std::vector<int64_t>& sizes) {
  std::vector<int64_t> strides(sizes.size(), 1);
  for (size_t d = sizes.size() - 1; d-- > 0;) strides[d] = strides[d + 1] * sizes[d + 1];
  return launch_ints(k, sizes, std::vector<Window>(k.accesses.size(), {0, strides}));
}

}  // namespace kiln::test
