// Warming up the compiler on a background thread (see include/kiln/engine.h).
#include <pthread.h>

#include <cstdlib>
#include <exception>
#include <mutex>
#include <thread>

#include "kiln/engine.h"
#include "kiln/metrics.h"

namespace kiln::engine {
namespace {

std::mutex g_mu;
std::thread g_thread;
bool g_started = false;

// Small kernels through the code paths most kernels take: vectorized
// pointwise math interleaved deep (sin with its rerun loop, exp, tanh; see
// codegen::math_chain_depth), streaming stores, and a row reduction.
struct WarmUpKernel {
  ir::Kernel k;
  int32_t node(ir::Op op, ir::DType t, int32_t a = -1, int32_t b = -1, int32_t arg = -1) {
    ir::Node n;
    n.op = op;
    n.dtype = t;
    n.in[0] = a;
    n.in[1] = b;
    n.arg = arg;
    k.nodes.push_back(n);
    return static_cast<int32_t>(k.nodes.size()) - 1;
  }
  int32_t access(ir::Inner inner, bool row_invariant = false) {
    k.accesses.push_back({k.num_buffers++, ir::DType::Float32, inner, row_invariant});
    return static_cast<int32_t>(k.accesses.size()) - 1;
  }
};

// out = tanh(exp(sin(x * s) * x)), streaming its stores.
ir::Kernel pointwise_warm_up_kernel() {
  using ir::DType;
  using ir::Op;
  const DType f = DType::Float32;
  WarmUpKernel w;
  const int32_t in = w.access(ir::Inner::Contiguous), out = w.access(ir::Inner::Contiguous);
  w.k.scalars = {DType::Float64};
  const int32_t x = w.node(Op::Load, f, -1, -1, in);
  const int32_t s = w.node(Op::Cast, f, w.node(Op::Scalar, DType::Float64, -1, -1, 0));
  const int32_t y = w.node(Op::Mul, f, w.node(Op::Sin, f, w.node(Op::Mul, f, x, s)), x);
  w.k.stores = {{out, w.node(Op::Tanh, f, w.node(Op::Exp, f, y))}};
  w.k.streaming_stores = true;
  return w.k;
}

// out[row] = sum(exp(x[row, :])): a row kernel.
ir::Kernel row_warm_up_kernel() {
  using ir::DType;
  using ir::Op;
  const DType f = DType::Float32;
  WarmUpKernel w;
  w.k.rank = 2;
  w.k.reduce_rank = 1;
  const int32_t in = w.access(ir::Inner::Contiguous), out = w.access(ir::Inner::Broadcast, true);
  w.k.reductions = {{ir::ReduceKind::Sum, f, w.node(Op::Exp, f, w.node(Op::Load, f, -1, -1, in))}};
  w.k.stores = {{out, w.node(Op::ReduceValue, f, -1, -1, 0)}};
  return w.k;
}

void warm_up() {
  try {
    double ms = 0;
    for (const ir::Kernel& k : {pointwise_warm_up_kernel(), row_warm_up_kernel()}) {
      ir::validate(k);
      const codegen::CompiledObject obj = codegen::compile(k, "kiln_compiler_warm_up", options().codegen);
      codegen::load(obj.object, "kiln_compiler_warm_up");  // and unloaded: the JIT is up now too
      ms += obj.compile_ms;
    }
    Metrics::global().add(Counter::CompileTime, "warm_up_us", static_cast<int64_t>(ms * 1000));
  } catch (const std::exception&) {
    // Nothing is lost: the first real compile meets the same error and reports it.
  }
}

}  // namespace

void start_compiler_warm_up() {
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_started) return;
  g_started = true;
  g_thread = std::thread(warm_up);
  // Joined before the process forks (the child must not inherit a thread
  // that vanished holding LLVM's locks) and at exit (before LLVM's statics
  // are destroyed; these handlers were registered after they were built).
  pthread_atfork(&wait_for_compiler_warm_up, nullptr, nullptr);
  std::atexit(&wait_for_compiler_warm_up);
}

void wait_for_compiler_warm_up() {
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_thread.joinable()) g_thread.join();
}

}  // namespace kiln::engine
