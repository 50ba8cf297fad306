// The device's generic kernel: every ATen op without a kernel of its own comes
// here (a boxed fallback on the PrivateUse1 key) and runs as its CPU
// implementation applied to device memory. Three paths:
//
//  view   ops that return an alias of an input: computed on aliases on the
//         calling thread (metadata only), returned as device views of the
//         same storage. No launch, no wait.
//  async  everything whose output geometry the op's meta kernel can compute:
//         outputs are allocated now, the CPU kernel is launched on the
//         device's queue and the caller goes on (in lazy mode a traceable
//         op is recorded instead). The first call of each argument case
//         runs on the host instead (a traceable op: on zero-filled twins
//         of its arguments, argument_check.h), so argument errors raise at
//         the op; errors that depend on data (an index out of range)
//         surface at the next sync point.
//  host   ops whose output shapes depend on data (nonzero: kDataDependentOps),
//         ops returning a host value (item-like), and ops without a meta
//         kernel: the queue is drained and the CPU kernel runs on the calling
//         thread. Only the last kind counts as a fallback (KILN_FALLBACK
//         decides warn, error or silent): a real accelerator would have no
//         device kernel for them, while data-dependent ops are device kernels
//         followed by a sync, as on CUDA.
#include <ATen/Context.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/library.h>

#include <mutex>
#include <unordered_set>

#include "dispatch/backend/device_allocator.h"
#include "dispatch/backend/devices.h"
#include "dispatch/backend/generator.h"
#include "dispatch/backend/startup.h"
#include "dispatch/backend/sync.h"
#include "dispatch/backend/torch_errors.h"
#include "dispatch/eager/argument_check.h"
#include "dispatch/eager/device_tensors.h"
#include "dispatch/eager/library_kernel.h"
#include "dispatch/eager/op_info.h"
#include "dispatch/eager/shape_inference.h"
#include "dispatch/eager/tensor_alias.h"
#include "dispatch/lazy/record.h"
#include "kiln/engine.h"
#include "kiln/metrics.h"
#include "kiln/recorder.h"

namespace kiln::dispatch {
namespace {

// Sync-point reason of the first-call check (one per op and argument
// shapes: too many to name each op in the report).
constexpr std::string_view kFirstCall = "first call with these argument shapes";

// An op's results: inline, as most ops have one or two (every dispatched op
// builds this list).
using Outputs = c10::SmallVector<c10::IValue, 2>;

// ------------------------------------------------------------ device checks

// Finds the op's device and enforces eager's rule: all tensors on one device,
// except CPU 0-dim tensors (scalars) and CPU index tensors, which are copied.
c10::DeviceIndex resolve_device(const OpInfo& info, torch::jit::Stack& stack, size_t first) {
  c10::DeviceIndex index = -1;
  std::string other;
  auto note = [&](const at::Tensor& t) {
    if (t.device().type() == c10::kPrivateUse1) {
      if (index < 0) index = t.device().index();
      else if (t.device().index() != index) other = device_string(t.device().index());
    } else if (!(t.is_cpu() && t.dim() == 0)) {
      other = t.device().str();
    }
  };
  for (size_t i = first; i < stack.size(); ++i) {
    const c10::IValue& v = stack[i];
    if (v.isDevice() && v.toDevice().type() == c10::kPrivateUse1 && index < 0) {
      index = v.toDevice().has_index() ? v.toDevice().index() : current_device();
    } else if (v.isList() && !v.isTensorList()) {
      continue;  // index lists: CPU tensors are moved below
    } else {
      for_each_tensor(v, note);
    }
  }
  if (index < 0) index = current_device();
  TORCH_CHECK(other.empty(), "Expected all tensors to be on the same device, but found at least two devices, ",
              device_string(index), " and ", other, "! (when checking arguments for ", info.name, ")");
  // CPU index tensors (x[cpu_idx]) are copied to the device, as CUDA does.
  for (size_t i = first; i < stack.size(); ++i) {
    if (stack[i].isList() && !stack[i].isTensorList()) {
      stack[i] = map_tensors(
          stack[i], [&](const at::Tensor& t) { return t.is_cpu() ? t.to(c10::Device(c10::kPrivateUse1, index)) : t; });
    }
  }
  return index;
}

c10::IValue to_host_device_arg(const c10::IValue& v, c10::DeviceType type) {
  if (v.isDevice() && v.toDevice().type() == c10::kPrivateUse1) return c10::Device(type);
  return v;
}

// Arguments for a CPU kernel: device tensors become aliases, CPU scalars are
// snapshotted (the caller may change them before the launch runs), device
// generators become their host generators.
std::vector<c10::IValue> host_arguments(const OpInfo& info, const torch::jit::Stack& stack, size_t first,
                                        AliasSet& aliases, c10::DeviceIndex index, bool snapshot_cpu) {
  std::vector<c10::IValue> out;
  out.reserve(stack.size() - first);
  for (size_t i = first; i < stack.size(); ++i) {
    const c10::IValue& v = stack[i];
    if (info.generator_arg[i - first]) {
      std::optional<at::Generator> gen;
      if (v.isGenerator()) gen = v.toGenerator();
      out.emplace_back(host_generator_for(gen, index));
      continue;
    }
    c10::IValue mapped = map_tensors(v, [&](const at::Tensor& t) {
      if (t.device().type() == c10::kPrivateUse1) return aliases.alias(t);
      // Python numbers arrive as fresh wrapped 0-dim tensors nobody else
      // holds; other CPU tensors may change before the launch runs.
      return snapshot_cpu && !t.unsafeGetTensorImpl()->is_wrapped_number() ? t.clone() : t;
    });
    out.push_back(to_host_device_arg(mapped, c10::kCPU));
  }
  return out;
}

void warn_or_fail_fallback(const OpInfo& info) {
  Metrics::global().add(Counter::Fallbacks, info.name);
  log("fallback", info.name + " runs on the host (no meta kernel)");
  switch (settings().fallback) {
    case FallbackPolicy::Error:
      TORCH_CHECK(false, info.name, " has no way to run on ", settings().device_name,
                  " without a host round trip (no shape inference: it has no meta kernel), and KILN_FALLBACK=error. "
                  "Set KILN_FALLBACK=warn or silent to allow it.");
    case FallbackPolicy::Warn: {
      static std::mutex mu;
      static std::unordered_set<std::string> warned;
      std::lock_guard<std::mutex> lock(mu);
      if (warned.insert(info.name).second) {
        TORCH_WARN("kiln: ", info.name, " ran as a host fallback on ", settings().device_name,
                   " (it has no meta kernel, so its outputs cannot be allocated ahead of the launch; "
                   "the device queue was drained first). Warned once per op; KILN_FALLBACK=silent|error.");
      }
      break;
    }
    case FallbackPolicy::Silent: break;
  }
}

// Makes `t` (a device tensor an op writes) take the geometry shape
// inference gave it: out= resizing and in-place metadata changes.
void adopt_geometry(const at::Tensor& t, const Geometry& g) {
  if (g.matches(t)) return;
  int64_t needed = g.offset;
  bool empty = false;
  for (size_t d = 0; d < g.sizes.size(); ++d) {
    if (g.sizes[d] == 0) empty = true;
    needed += (g.sizes[d] - 1) * g.strides[d];
  }
  const size_t bytes = empty ? 0 : static_cast<size_t>(needed + 1) * t.element_size();
  if (bytes > t.storage().nbytes()) resize_device_storage(t.storage(), bytes);
  t.unsafeGetTensorImpl()->set_sizes_and_strides(g.sizes, g.strides, g.offset);
}

// Copies a CPU kernel's result into the alias of a preallocated output.
void copy_result_into(const c10::IValue& dst, const c10::IValue& src) {
  if (dst.isTensor()) {
    const at::Tensor& d = dst.toTensor();
    if (d.defined() && src.isTensor() && src.toTensor().defined()) d.copy_(src.toTensor());
  } else if (dst.isTensorList()) {
    auto d = dst.toTensorList();
    auto s = src.toTensorList();
    for (size_t k = 0; k < d.size(); ++k) copy_result_into(d.get(k), s.get(k));
  }
}

at::Tensor empty_like_meta(const at::Tensor& meta, c10::DeviceIndex index) {
  return empty_device(meta.sizes(), meta.strides(), meta.scalar_type(), index);
}

// ------------------------------------------------------------ paths

// One dispatched call: the op, its arguments on the stack from `first`, and
// its device, resolved and checked once.
struct Call {
  const c10::OperatorHandle& op;
  const OpInfo& info;
  torch::jit::Stack& stack;
  size_t first;
  runtime::Device& dev;

  c10::DeviceIndex index() const { return static_cast<c10::DeviceIndex>(dev.index()); }
  void set_results(Outputs&& outputs) {
    stack.resize(first);
    for (auto& o : outputs) stack.push_back(std::move(o));
  }
  void set_results(std::vector<c10::IValue>&& args) {
    stack.resize(first);
    for (auto& a : args) stack.push_back(std::move(a));
  }
};

void run_view(Call& call) {
  AliasSet aliases(c10::DispatchKey::CPU);
  call.set_results(host_arguments(call.info, call.stack, call.first, aliases, call.index(), false));
  call.op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::CPU), &call.stack);
  for (size_t i = call.first; i < call.stack.size(); ++i) {
    call.stack[i] = map_tensors(call.stack[i], [&](const at::Tensor& r) {
      at::Tensor v = aliases.device_view(r);
      TORCH_CHECK(v.defined(), call.info.name, ": view op returned a tensor that is not a view of its input");
      return v;
    });
  }
}

void run_on_host(Call& call, std::string_view reason) {
  const OpInfo& info = call.info;
  const c10::DeviceIndex index = call.index();
  if (info.is_fallback) warn_or_fail_fallback(info);
  else Metrics::global().add(Counter::LibraryKernels, info.name);
  synchronize_for_host_run(call.dev,
                           reason == kFirstCall ? std::string(reason) : std::string(reason) + ": " + info.name);
  std::vector<c10::IValue> device_args(call.stack.begin() + call.first, call.stack.end());
  AliasSet aliases(c10::DispatchKey::CPU, /*resizable_cpu=*/true);
  std::vector<c10::IValue> args = host_arguments(info, call.stack, call.first, aliases, index, false);
  std::vector<c10::IValue> host_args = args;
  call.set_results(std::move(args));
  run_on_worker(call.dev, info.name, [&] {
    c10::DeviceGuard guard(c10::Device(c10::kPrivateUse1, index));
    call.op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::CPU), &call.stack);
  });
  // Arguments the CPU kernel wrote take the geometry it gave them (out=
  // resizing); ones it had to reallocate got host memory: bring that back.
  for (size_t i = 0; i < device_args.size(); ++i) {
    if (!info.mutable_arg[i] || !device_args[i].isTensor()) continue;
    const at::Tensor& dev_t = device_args[i].toTensor();
    const at::Tensor& host_t = host_args[i].toTensor();
    if (!dev_t.defined() || !dev_t.is_privateuseone()) continue;
    auto* impl = dev_t.unsafeGetTensorImpl();
    if (!aliases.still_aliases(host_t)) {
      at::Tensor fresh = empty_device(host_t.sizes(), host_t.strides(), host_t.scalar_type(), index);
      copy_host_to_device(host_t, fresh);
      impl->set_storage_keep_dtype(fresh.storage());
    }
    impl->set_sizes_and_strides(host_t.sizes(), host_t.strides(), host_t.storage_offset());
  }
  for (size_t i = call.first; i < call.stack.size(); ++i) {
    call.stack[i] = map_tensors(call.stack[i], [&](const at::Tensor& r) {
      if (r.is_privateuseone()) return r;
      at::Tensor v = aliases.device_view(r);
      if (v.defined()) return v;
      // A fresh host result: move it into device memory.
      at::Tensor out = r.is_non_overlapping_and_dense()
                           ? empty_device(r.sizes(), r.strides(), r.scalar_type(), index)
                           : empty_device(r.sizes(), c10::contiguous_strides(r.sizes()), r.scalar_type(), index);
      copy_host_to_device(r, out);
      return out;
    });
  }
}

// The op's meta kernel, memoized (shape_inference.h); null when the output
// geometry depends on data, or on an error: the CPU kernel on the host then
// gives eager's answer, and the call is done.
std::shared_ptr<const InferredShapes> infer_or_run_on_host(Call& call) {
  try {
    return infer_shapes(call.op, call.info.mutable_arg, call.stack, call.first, call.info.shapes);
  } catch (const std::exception& e) {
    if (log_enabled("dispatch")) {
      const std::string why = e.what();
      log("dispatch", call.info.name + ": no meta geometry, runs on the host: " + why.substr(0, why.find('\n')));
    }
    run_on_host(call, "data-dependent shape");
    return nullptr;
  }
}

// The call's outputs: arguments written in place take their new geometry;
// fresh outputs are allocated from `returns` (the meta results, or what the
// CPU kernel returned: InferredShapes::cpu_returns).
Outputs make_outputs(Call& call, const InferredShapes& shapes, const std::vector<c10::IValue>& returns) {
  for (size_t i = 0; i < shapes.written.size(); ++i) {
    if (shapes.written[i] && call.stack[call.first + i].isTensor()) {
      const at::Tensor& t = call.stack[call.first + i].toTensor();
      if (t.defined() && t.is_privateuseone()) adopt_geometry(t, *shapes.written[i]);
    }
  }
  Outputs outs;
  for (size_t j = 0; j < returns.size(); ++j) {
    int a = call.info.return_alias_arg[j];
    if (a >= 0) outs.push_back(call.stack[call.first + a]);
    else outs.push_back(map_tensors(returns[j], [&](const at::Tensor& m) { return empty_like_meta(m, call.index()); }));
  }
  return outs;
}

Outputs make_outputs(Call& call, const InferredShapes& shapes) { return make_outputs(call, shapes, shapes.returns); }

// Keeps the geometry of the results a host run just left on the stack, for
// later calls of an op whose meta kernel gets it wrong (OpInfo::geometry_from_cpu).
void learn_cpu_geometry(const Call& call, const InferredShapes& shapes) {
  if (!call.info.geometry_from_cpu || shapes.argument_shapes == 0) return;
  auto returns = std::make_shared<std::vector<c10::IValue>>();
  for (size_t i = call.first; i < call.stack.size(); ++i) {
    returns->push_back(map_tensors(call.stack[i], [](const at::Tensor& r) {
      return at::empty_strided(r.sizes(), r.strides(), r.options().device(c10::kMeta));
    }));
  }
  shapes.cpu_returns.store(std::move(returns));
}

// The CPU kernel as a launch over aliases of the device memory, writing
// `outputs`.
trace::HeldLaunch library_launch(const Call& call, const Outputs& outputs) {
  const OpInfo& info = call.info;
  AliasSet aliases(c10::DispatchKey::CPU);
  std::vector<c10::IValue> args =
      host_arguments(info, call.stack, call.first, aliases, call.index(), /*snapshot_cpu=*/true);
  std::vector<c10::IValue> fresh;  // aliases of fresh outputs, by return position (None if aliased)
  for (size_t j = 0; j < outputs.size(); ++j) {
    fresh.push_back(info.return_alias_arg[j] >= 0 ? c10::IValue() : map_tensors(outputs[j], [&](const at::Tensor& t) {
      return aliases.alias(t);
    }));
  }
  // The out= overload writes straight into the outputs; it cannot take an
  // undefined output (a gradient the caller did not ask for), and is only
  // trusted with dense inputs: the first call with these shapes checked the
  // functional kernel, and some out= kernels are wrong for strided inputs
  // (native_batch_norm.out's save_mean, torch 2.13).
  bool out_variant_fits = info.out_variant.has_value() && !info.out_variant_failed.load(std::memory_order_relaxed);
  for (const auto& o : outputs) {
    if (o.isTensor() && !o.toTensor().defined()) out_variant_fits = false;
  }
  for (size_t i = call.first; i < call.stack.size() && out_variant_fits; ++i) {
    for_each_tensor(call.stack[i], [&](const at::Tensor& t) {
      if (t.defined() && t.dim() > 0 && !t.is_non_overlapping_and_dense()) out_variant_fits = false;
    });
  }
  trace::HeldLaunch launch{info.name, {}, [&info] { Metrics::global().add(Counter::LibraryKernels, info.name); }};
  if (out_variant_fits) {
    launch.work = [&info, op = call.op, args = std::move(args), fresh = std::move(fresh)]() mutable {
      std::vector<c10::IValue> out_args = args;  // the boxed call consumes its stack; args serve a retry
      for (auto& f : fresh) out_args.push_back(f);
      std::vector<Geometry> planned;
      for (auto& f : fresh) planned.push_back(Geometry::of(f.toTensor()));
      // An out= kernel that gives up may have warned on its way (mse_loss.out
      // resizing a 0-dim output): its warnings count only if it succeeds.
      HeldWarnings held;
      try {
        {
          c10::WarningUtils::WarningHandlerGuard guard(&held);
          info.out_variant->redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::CPU), &out_args);
        }
        held.release();
        for (size_t j = 0; j < fresh.size(); ++j) planned[j].restore(fresh[j].toTensor());
        return;
      } catch (const c10::Error&) {
        // Either the out= kernel cannot write exact-size outputs, or the
        // inputs are bad: the functional kernel tells which, with eager's error.
      }
      op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::CPU), &args);
      info.out_variant_failed.store(true, std::memory_order_relaxed);
      for (size_t j = 0; j < fresh.size(); ++j) copy_result_into(fresh[j], args[j]);
    };
  } else {
    launch.work = [op = call.op, args = std::move(args), fresh = std::move(fresh)]() mutable {
      op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::CPU), &args);
      for (size_t j = 0; j < fresh.size(); ++j) {
        copy_result_into(fresh[j], args[j]);
      }
    };
  }
  return launch;
}

// The CPU kernel launched on the device's queue, after a flush of what the
// device recorded.
void launch_library_kernel(Call& call, Outputs&& outputs) {
  trace::HeldLaunch launch = library_launch(call, outputs);
  launch.count();
  enqueue(call.dev, launch.name, std::move(launch.work));
  call.set_results(std::move(outputs));
}

// The call's argument case (argument_check.h): its argument pattern when
// the shape key describes the arguments (`exact`), else its dtypes and
// ranks, with the values of scalars that do not fit every dtype of the call.
uint64_t call_case(const Call& call, const InferredShapes& shapes, bool exact) {
  return argument_case(exact ? shapes.argument_pattern : argument_signature(call.stack, call.first), call.stack,
                       call.first);
}

void log_disagreement(const OpInfo& info) {
  log("dispatch", info.name + ": meta kernel disagrees with the CPU kernel; runs on the host");
}

// The first call of an argument case: on the host, after a sync, as eager
// does, so that a bad argument raises at the op. The results tell whether
// the meta kernel gives the CPU kernel's geometry (the case's verdict).
void run_first_call(Call& call, const InferredShapes& shapes, uint64_t signature) {
  run_on_host(call, kFirstCall);
  const std::vector<c10::IValue>& meta = shapes.returns;
  bool agrees = call.stack.size() - call.first == meta.size();
  for (size_t j = 0; agrees && j < meta.size(); ++j) agrees = same_geometry(call.stack[call.first + j], meta[j]);
  call.info.set_verdict(signature, agrees ? OpInfo::Verdict::Agrees : OpInfo::Verdict::Disagrees);
  if (!agrees) {
    log_disagreement(call.info);
    learn_cpu_geometry(call, shapes);
  }
}

// Whether the first call of an argument case, in lazy mode, runs as eager
// mode's does (run_first_call): under the library tier, when what is
// pending runs as library kernels (or nothing is) and the op is not large
// (a large op starts a trace that runs fused: engine::fused_at_first_sight).
// The op is then not recorded: the trace ends before it, as at any op
// launched on its own, and its later calls are recorded. Not under
// torch.use_deterministic_algorithms: the traces would then depend on the
// verdicts the store holds.
bool first_call_runs_on_host(const Call& call) {
  const bool counts_only = at::globalContext().deterministicAlgorithms();
  if (counts_only || !engine::library_tier()) return false;
  int64_t elements = 0;  // the op's largest tensor: a large op starts a trace that runs fused
  for (size_t i = call.first; i < call.stack.size(); ++i) {
    for_each_tensor(call.stack[i], [&](const at::Tensor& t) { elements = std::max(elements, t.numel()); });
  }
  return !engine::fused_at_first_sight(elements) && !trace::recorder(call.index()).pending_for_fusing();
}

// An op with a lowering, in lazy mode. The first call of each argument case
// checks the arguments as eager does, at the op (argument_check.h). Under
// the library tier it runs as eager's first call does (first_call_runs_on_host):
// the library kernel would compute it again. Otherwise its inputs may not be
// computed yet, so it is checked on zero-filled twins, without a sync.
// Recorded if the meta kernel gives the CPU kernel's geometry and the
// lowering takes the call; launched otherwise.
void run_traced(Call& call) {
  std::shared_ptr<const InferredShapes> shapes = infer_or_run_on_host(call);
  if (!shapes) return;
  const OpInfo& info = call.info;
  auto verdict = static_cast<OpInfo::Verdict>(shapes->verdict.load(std::memory_order_relaxed));
  if (verdict == OpInfo::Verdict::Unknown) {
    // Arguments the shape key cannot describe are checked at every call.
    const bool exact = shapes->argument_shapes != 0;
    const uint64_t signature = call_case(call, *shapes, exact);
    if (exact) verdict = info.verdict(signature);
    if (verdict == OpInfo::Verdict::Unknown && exact && first_call_runs_on_host(call)) {
      run_first_call(call, *shapes, signature);
      return;
    }
    if (verdict == OpInfo::Verdict::Unknown) {
      verdict = check_case_on_twins(call.op, info, call.stack, call.first, call.index(), *shapes);
      if (exact) info.set_verdict(signature, verdict);
      if (verdict == OpInfo::Verdict::Disagrees) log_disagreement(info);
    }
    shapes->verdict.store(static_cast<int>(verdict));
  }
  if (verdict == OpInfo::Verdict::Disagrees) {
    run_on_host(call, "meta kernel disagrees with CPU");
    return;
  }
  Outputs outputs = [&] {
    // Recorded, this op runs after the trace's ops; declined, it is launched
    // after them: either way its outputs may take memory only the trace holds.
    const ReuseHeldBlocks reuse;
    return make_outputs(call, *shapes);
  }();
  c10::SmallVector<bool, 4> fresh;
  for (size_t j = 0; j < outputs.size(); ++j) fresh.push_back(info.return_alias_arg[j] < 0);
  const Recorded recorded = try_record(info, call.stack, call.first, call.index(), outputs, fresh,
                                       [&] { return library_launch(call, outputs); });
  if (recorded == Recorded::No) launch_library_kernel(call, std::move(outputs));
  else call.set_results(std::move(outputs));
}

// An op that is never recorded flushes the pending trace before it allocates
// its outputs, as launching it would after: the flush lets go of the inputs
// the trace kept alive, so the outputs can take their memory, which is where
// eager mode's would be (the frees of the ops before came first).
void flush_before_outputs(Call& call) { flush_trace(call.dev, "untraced op"); }

// Every other op whose outputs the meta kernel can allocate. The first call
// of each case (dtypes and ranks, or exact shapes) runs on the host, so
// argument errors raise at the op; later calls launch.
void run_async(Call& call) {
  std::shared_ptr<const InferredShapes> shapes = infer_or_run_on_host(call);
  if (!shapes) return;
  const OpInfo& info = call.info;
  auto verdict = static_cast<OpInfo::Verdict>(shapes->verdict.load(std::memory_order_relaxed));
  uint64_t signature = 0;
  if (verdict == OpInfo::Verdict::Unknown) {
    const bool exact = shapes->argument_shapes != 0;
    signature = call_case(call, *shapes, exact);
    verdict = info.verdict(signature);
    if (verdict != OpInfo::Verdict::Unknown) shapes->verdict.store(static_cast<int>(verdict));
  }
  switch (verdict) {
    case OpInfo::Verdict::Disagrees:
      if (auto learned = shapes->cpu_returns.load()) {
        flush_before_outputs(call);
        launch_library_kernel(call, make_outputs(call, *shapes, *learned));
        return;
      }
      run_on_host(call, "meta kernel disagrees with CPU");
      learn_cpu_geometry(call, *shapes);
      return;
    case OpInfo::Verdict::Unknown: run_first_call(call, *shapes, signature); return;
    case OpInfo::Verdict::Agrees:
      flush_before_outputs(call);
      launch_library_kernel(call, make_outputs(call, *shapes));
      return;
  }
}

void neuron_library_kernel(const c10::OperatorHandle& op, c10::DispatchKeySet, torch::jit::Stack* stack) {
  const TimeScope timing(TimeCategory::HostRecord);  // host_record_s (kiln.metrics.breakdown)
  const OpInfo& info = op_info_for(op);
  const size_t first = stack->size() - op.schema().arguments().size();
  with_torch_errors([&] {
    runtime::Device& dev = device(resolve_device(info, *stack, first));  // validates the index (and fork state)
    Call call{op, info, *stack, first, dev};
    switch (info.path) {
      case Path::View: run_view(call); break;
      case Path::Async:
        // The mode is read once per call: the whole call takes one path.
        if (info.lowering != nullptr && trace::lazy_mode()) run_traced(call);
        else run_async(call);
        break;
      case Path::Host: run_on_host(call, info.host_reason); break;
    }
  });
}

}  // namespace

void route_composite_ops_to_library_kernel() {
  // Ops with both a CPU kernel and a CompositeExplicitAutograd kernel would
  // run the composite on the device, which is not always what CPU computes
  // (native_layer_norm's composite goes through batch norm) and costs an
  // extra dispatch (structured ops: functional -> empty + out=). On the
  // device they run whole, as their CPU kernel, like every other op.
  static std::once_flag once;
  std::call_once(once, [] {
    static auto* lib =
        new torch::Library(torch::Library::IMPL, "aten", c10::DispatchKey::PrivateUse1, __FILE__, __LINE__);
    auto& dispatcher = c10::Dispatcher::singleton();
    for (const c10::OperatorName& name : dispatcher.getAllOpNames()) {
      if (name.name.rfind("aten::", 0) != 0) continue;
      auto op = dispatcher.findOp(name);
      if (!op || op->hasKernelForDispatchKey(c10::DispatchKey::PrivateUse1)) continue;
      if (!op->hasKernelForDispatchKey(c10::DispatchKey::CPU)) continue;
      if (!op->hasKernelForDispatchKey(c10::DispatchKey::CompositeExplicitAutograd) &&
          !op->hasKernelForDispatchKey(c10::DispatchKey::CompositeExplicitAutogradNonFunctional)) {
        continue;
      }
      std::string qualified = name.name.substr(6) + (name.overload_name.empty() ? "" : "." + name.overload_name);
      lib->impl(qualified.c_str(), torch::CppFunction::makeFromBoxedFunction<&neuron_library_kernel>());
    }
  });
}

TORCH_LIBRARY_IMPL(_, PrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&neuron_library_kernel>());
}

// Composite ops whose composite kernel would pick a device-specific backend
// (convolution -> convolution_overrideable, which no device implements). On
// the device they run whole, as the CPU implementation, like any other op.
// (They have no CPU kernel of their own, so the routing below misses them.)
TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  for (const char* name : {"convolution", "convolution_backward", "_convolution"}) {
    m.impl(name, torch::CppFunction::makeFromBoxedFunction<&neuron_library_kernel>());
  }
}

}  // namespace kiln::dispatch
