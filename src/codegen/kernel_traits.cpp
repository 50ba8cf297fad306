// traits_of: the one place that reads a whole kernel to decide how it
// compiles (see KernelTraits in include/codegen/kiln/codegen.h).
#include <algorithm>
#include <vector>

#include "kiln/codegen.h"

namespace kiln::codegen {
namespace {

using ir::DType;
using ir::Op;

int math_chain_depth(const ir::Kernel& k) {
  // depth[i]: the most of kiln's own math functions on one path into node i.
  std::vector<int> depth(k.nodes.size(), 0);
  int deepest = 0;
  for (size_t i = 0; i < k.nodes.size(); ++i) {
    const ir::Node& n = k.nodes[i];
    for (int32_t in : n.in) {
      if (in >= 0) depth[i] = std::max(depth[i], depth[in]);
    }
    switch (n.op) {
      case Op::Exp:
      case Op::Sin:
      case Op::Cos:
      case Op::Tanh:
      case Op::Erf:
      case Op::Sigmoid:
        depth[i] += n.dtype == DType::Float64 ? 0 : 1;  // double math calls libm
        break;
      default: break;
    }
    deepest = std::max(deepest, depth[i]);
  }
  return deepest;
}

int vector_width(const ir::Kernel& k) {
  int widest = 32;
  for (const ir::Node& n : k.nodes) {
    if (n.op == Op::Scalar) continue;  // loop-invariant: a double learning rate does not halve the width
    if (n.dtype == DType::Int64 || n.dtype == DType::Float64) widest = 64;
  }
  return 512 / widest;
}

}  // namespace

KernelTraits traits_of(const ir::Kernel& kernel) {
  KernelTraits t;
  t.math_chain_depth = math_chain_depth(kernel);
  t.vector_width = vector_width(kernel);
  // Each of kiln's math functions is a chain of 10-20 dependent FMAs: two in
  // a row wait on latency with LLVM's 4 vectors in flight, and 8 vectors'
  // worth of their constants and values leave early machine LICM nothing to
  // hoist into but spills (docs/codegen.md, "Deep math").
  const bool deep_math = t.math_chain_depth >= 2;
  t.element_loop_interleave = deep_math ? 8 : 0;
  t.early_machine_licm = !deep_math;
  return t;
}

}  // namespace kiln::codegen
