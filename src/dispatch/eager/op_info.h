// What the dispatcher learns once about an operator, from its schema and
// its registered kernels: which path the library kernel takes, which
// arguments it writes, its out= overload. Made on first use, they
// live for the process.
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>

#include <atomic>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "dispatch/eager/shape_inference.h"
#include "dispatch/lazy/lowering.h"

namespace kiln::dispatch {

// view: returns an alias of an input; async: launched with meta-inferred
// outputs; host: drains the queue and runs on the calling thread.
enum class Path { View, Async, Host };

// What the dispatcher learns once about an operator from its schema.
struct OpInfo {
  std::string name;             // "aten::add.Tensor"
  const char* trace_name = "";  // the same, interned: what its trace ops point at
  Path path = Path::Async;
  bool is_fallback = false;                        // no meta kernel: runs on the host
  const char* host_reason = "";                    // Path::Host: the sync point's reason
  std::vector<int> return_alias_arg;               // per return: argument it aliases, or -1 (fresh)
  std::vector<bool> mutable_arg;                   // per argument
  std::vector<bool> generator_arg;                 // per argument
  std::optional<c10::OperatorHandle> out_variant;  // writes fresh outputs in place
  LoweringFn lowering = nullptr;                   // lazy mode: how the op is traced (null: not traceable)
  // Its meta kernel gets an output's geometry wrong, but the argument shapes
  // and values determine the CPU kernel's (kGeometryFromCpuOps): later calls
  // with the same ones allocate what the first call's CPU kernel returned.
  bool geometry_from_cpu = false;
  // Some CPU out= kernels resize their output on the way (mse_loss computes
  // the unreduced loss in it first), which exact-size device outputs cannot
  // take. Set the first time that happens; the op then runs functionally.
  mutable std::atomic<bool> out_variant_failed{false};
  mutable ShapeCache shapes;

  // The first call of each argument case (argument_check.h) runs the CPU
  // kernel on the calling thread: on the host, or for a traced op on
  // zero-filled twins of its arguments. It raises eager's argument errors
  // at the op, and its result is checked against the meta kernel's, which
  // occasionally disagrees (another dtype or strides for an output). Later
  // calls are launched or traced only if they agreed.
  // A case that agreed is also kept in the cache directory, for later
  // processes (engine::verdict_is_stored): a warm start checks only what
  // no process checked before.
  enum class Verdict { Unknown, Agrees, Disagrees };
  static constexpr size_t kMaxVerdicts = 4096;  // cleared when full: the next calls check again
  Verdict verdict(uint64_t signature) const;
  void set_verdict(uint64_t signature, Verdict v) const;
  uint64_t name_hash = 0;  // FNV-1a of `name`: the same in every process
  mutable std::mutex verdict_mu;
  mutable std::unordered_map<uint64_t, Verdict> verdicts;
};

const OpInfo& op_info_for(const c10::OperatorHandle& op);

// What decides an op's output dtypes and ranks (the unit of the meta-vs-CPU
// check): each argument's kind, each flag's value, each tensor's dtype and rank.
uint64_t argument_signature(const torch::jit::Stack& stack, size_t first);

// Whether a result computed by the CPU kernel has the sizes and dtypes its
// meta kernel predicted.
bool same_geometry(const c10::IValue& device_result, const c10::IValue& meta_result);

}  // namespace kiln::dispatch
