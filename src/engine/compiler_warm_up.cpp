// Warming up the compiler on a background thread (see include/engine/kiln/engine.h).
#include <pthread.h>

#include <cstdlib>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include "kiln/engine.h"
#include "kiln/fusion.h"
#include "kiln/metrics.h"

namespace kiln::engine {
namespace {

std::mutex g_mu;
std::thread g_thread;
bool g_started = false;

// A trace of one op over `sizes` float32 elements (a buffer it reads and one
// it writes), planned into its kernel as flushes plan real ones.
ir::Kernel plan_one(trace::TraceOp op, size_t in_bytes, size_t out_bytes) {
  trace::Trace t;
  t.buffers.push_back({nullptr, in_bytes, false, false, nullptr});
  t.buffers.push_back({nullptr, out_bytes, true, false, nullptr});
  t.ops.push_back(std::move(op));
  return fusion::plan(t, {}).kernels.at(0).kernel;
}

// Small kernels through the code paths most kernels take: vectorized
// pointwise math interleaved deep (sin with its rerun loop, exp, tanh; see
// codegen::KernelTraits), streaming stores, and a row reduction.
std::vector<ir::Kernel> warm_up_kernels() {
  using ir::DType;
  using ir::Op;
  const DType f = DType::Float32;
  constexpr int64_t kRows = 64, kCols = 64;
  trace::View in{0, f, 0, {kCols, 1}}, out{1, f, 0, {kCols, 1}};

  // out = tanh(exp(sin(x * s) * x)), streaming its stores.
  trace::TraceOp chain;
  chain.name = "kiln::warm_up_chain";
  chain.sizes = {kRows, kCols};
  int32_t x = chain.load(in);
  int32_t y = chain.add_node(Op::Mul, f, x, chain.cast(chain.scalar_float(1.5), f));
  y = chain.add_node(Op::Mul, f, chain.add_node(Op::Sin, f, y), x);
  chain.store(out, chain.add_node(Op::Tanh, f, chain.add_node(Op::Exp, f, y)));
  ir::Kernel pointwise = plan_one(std::move(chain), kRows * kCols * 4, kRows * kCols * 4);
  pointwise.streaming_stores = true;

  // out[row] = sum(exp(x[row, :])).
  trace::TraceOp sum;
  sum.name = "kiln::warm_up_sum";
  sum.sizes = {kRows, kCols};
  sum.reduced = uint64_t(1) << 1;
  out.strides = {1, 0};
  sum.store(out, sum.reduce(ir::ReduceKind::Sum, f, sum.add_node(Op::Exp, f, sum.load(in))));
  return {pointwise, plan_one(std::move(sum), kRows * kCols * 4, kRows * 4)};
}

void warm_up() {
  pthread_setname_np(pthread_self(), "kiln-warmup");
  try {
    double ms = 0;
    for (const ir::Kernel& k : warm_up_kernels()) {
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
