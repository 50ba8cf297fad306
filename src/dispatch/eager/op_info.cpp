#include "dispatch/eager/op_info.h"

#include <atomic>
#include <shared_mutex>
#include <unordered_set>

#include "dispatch/eager/tensor_alias.h"
#include "kiln/engine.h"
#include "kiln/hash_mix.h"
#include "kiln/trace.h"

namespace kiln::dispatch {
namespace {

// Ops whose output shape depends on input values. They have no meta kernel
// (there is no shape to infer), yet are ordinary device work, not fallbacks.
const std::unordered_set<std::string> kDataDependentOps = {
    "aten::nonzero",
    "aten::masked_select",
    "aten::unique_dim",
    "aten::_unique",
    "aten::_unique2",
    "aten::unique_consecutive",
    "aten::unique_dim_consecutive",
    "aten::repeat_interleave",
    "aten::_ctc_loss",
    "aten::bincount",
    "aten::histogram",
    "aten::_histogramdd_bin_edges",
    "aten::_histogramdd_from_bin_cts",
    "aten::_histogramdd_from_bin_tensors",
};

// Ops whose meta kernel returns a wrong output geometry that the arguments
// alone determine. mkldnn_rnn_layer's workspace is oneDNN's to size (53,248
// bytes for a 2x32 LSTM layer over 5x3 inputs; the meta kernel says 0): run
// on the host at every call, it was a sync point per layer and direction.
const std::unordered_set<std::string> kGeometryFromCpuOps = {
    "aten::mkldnn_rnn_layer",
};

}  // namespace

// Flags count by value: batch norm's `training` changes its outputs' shapes.
uint64_t argument_signature(const torch::jit::Stack& stack, size_t first) {
  uint64_t h = 1469598103934665603ull;
  auto mix = [&](uint64_t v) { h = mix_in(h, v); };
  for (size_t i = first; i < stack.size(); ++i) {
    const c10::IValue& v = stack[i];
    mix(v.isTensor()          ? 1
        : v.isDouble()        ? 2
        : v.isInt()           ? 3
        : v.isBool()          ? 4 + v.toBool()
        : v.isComplexDouble() ? 6
        : v.isNone()          ? 7
                              : 8);
    for_each_tensor(v, [&](const at::Tensor& t) {
      mix(static_cast<uint64_t>(t.scalar_type()) + 64 * static_cast<uint64_t>(t.dim()) +
          4096 * static_cast<uint64_t>(t.is_cpu()));
    });
  }
  return h;
}

bool same_geometry(const c10::IValue& device_result, const c10::IValue& meta_result) {
  if (device_result.isTensor() != meta_result.isTensor()) return false;
  if (device_result.isTensor()) {
    const at::Tensor& d = device_result.toTensor();
    const at::Tensor& m = meta_result.toTensor();
    if (d.defined() != m.defined()) return false;
    if (!d.defined()) return true;
    if (d.sizes() != m.sizes() || d.scalar_type() != m.scalar_type()) return false;
    // Strides too (svd's Vh is column-major on CPU, row-major from its meta
    // kernel): a script sees them (is_contiguous, view). Dims of size 1
    // have no meaningful stride.
    for (int64_t k = 0; k < d.dim(); ++k) {
      if (d.size(k) > 1 && d.stride(k) != m.stride(k)) return false;
    }
    return true;
  }
  if (device_result.isTensorList() && meta_result.isTensorList()) {
    auto d = device_result.toTensorList();
    auto m = meta_result.toTensorList();
    if (d.size() != m.size()) return false;
    for (size_t k = 0; k < d.size(); ++k) {
      if (!same_geometry(d.get(k), m.get(k))) return false;
    }
  }
  return true;
}

namespace {

bool same_alias_set(const c10::AliasInfo& a, const c10::AliasInfo& b) {
  for (const auto& s : a.beforeSets()) {
    if (b.beforeSets().count(s)) return true;
  }
  return false;
}

bool is_generator_type(const c10::TypePtr& type) {
  if (type->kind() == c10::TypeKind::GeneratorType) return true;
  auto opt = type->cast<c10::OptionalType>();
  return opt && opt->getElementType()->kind() == c10::TypeKind::GeneratorType;
}

// The functional op's `.out` overload when its schema is exactly the
// functional arguments followed by one out tensor per returned tensor.
std::optional<c10::OperatorHandle> find_out_variant(const c10::FunctionSchema& schema) {
  if (schema.returns().empty()) return std::nullopt;
  for (const auto& r : schema.returns()) {
    if (r.type()->kind() != c10::TypeKind::TensorType || r.alias_info()) return std::nullopt;
  }
  const std::string& overload = schema.overload_name();
  std::vector<std::string> candidates =
      overload.empty() ? std::vector<std::string>{"out"} : std::vector<std::string>{overload + "_out", "out"};
  for (const auto& cand : candidates) {
    auto handle = c10::Dispatcher::singleton().findOp({schema.name(), cand});
    if (!handle) continue;
    const auto& out = handle->schema();
    const size_t n = schema.arguments().size();
    if (out.arguments().size() != n + schema.returns().size()) continue;
    bool ok = true;
    for (size_t i = 0; i < n && ok; ++i) {
      ok = out.arguments()[i].name() == schema.arguments()[i].name() &&
           *out.arguments()[i].type() == *schema.arguments()[i].type();
    }
    for (size_t i = n; i < out.arguments().size() && ok; ++i) {
      const auto& a = out.arguments()[i];
      ok = a.type()->kind() == c10::TypeKind::TensorType && a.alias_info() && a.alias_info()->isWrite();
    }
    if (ok && handle->hasKernelForDispatchKey(c10::DispatchKey::CPU)) return handle;
  }
  return std::nullopt;
}

std::unique_ptr<OpInfo> make_op_info(const c10::OperatorHandle& op) {
  const auto& schema = op.schema();
  auto owned = std::make_unique<OpInfo>();
  OpInfo& info = *owned;
  info.name = schema.name() + (schema.overload_name().empty() ? "" : "." + schema.overload_name());
  info.trace_name = trace::intern_op_name(info.name);
  info.name_hash = 1469598103934665603ull;
  for (unsigned char c : info.name) info.name_hash = mix_in(info.name_hash, c);
  info.lowering = find_lowering(info.name);
  const auto& args = schema.arguments();
  for (const auto& a : args) {
    info.mutable_arg.push_back(a.alias_info() && a.alias_info()->isWrite());
    info.generator_arg.push_back(is_generator_type(a.type()));
  }
  bool any_view_return = false, any_host_value = false;
  for (const auto& r : schema.returns()) {
    int alias_arg = -1;
    if (r.alias_info()) {
      for (size_t i = 0; i < args.size(); ++i) {
        if (args[i].alias_info() && same_alias_set(*r.alias_info(), *args[i].alias_info())) alias_arg = int(i);
      }
      if (!r.alias_info()->isWrite()) any_view_return = true;
    }
    info.return_alias_arg.push_back(alias_arg);
    auto kind = r.type()->kind();
    bool tensorish =
        kind == c10::TypeKind::TensorType ||
        (kind == c10::TypeKind::ListType && r.type()->containedType(0)->kind() == c10::TypeKind::TensorType);
    if (!tensorish) any_host_value = true;
  }
  const bool has_meta = op.hasKernelForDispatchKey(c10::DispatchKey::Meta);
  if (any_view_return) {
    info.path = Path::View;
  } else if (!has_meta) {
    info.path = Path::Host;
    info.is_fallback = kDataDependentOps.count(schema.name()) == 0;
    info.host_reason = info.is_fallback ? "fallback" : "data-dependent shape";
  } else if (any_host_value) {
    info.path = Path::Host;
    info.host_reason = "host value";
  } else {
    info.path = Path::Async;
    info.out_variant = find_out_variant(schema);
    info.geometry_from_cpu = kGeometryFromCpuOps.count(schema.name()) != 0;
  }
  return owned;
}

// The infos of every op dispatched so far, shared by all threads. Never freed
// (nor is this): a launch still queued, or a call in flight on another
// thread, may use a deregistered op's info.
struct InfoRegistry {
  std::shared_mutex mu;
  std::unordered_map<c10::OperatorName, std::unique_ptr<OpInfo>> infos;
  std::vector<std::unique_ptr<OpInfo>> retired;  // of deregistered ops
  std::atomic<uint64_t> epoch{0};                // bumped when an op is deregistered
};

InfoRegistry& registry() {
  static auto* r = new InfoRegistry();
  return *r;
}

// A deregistered op's info is retired, and the per-thread maps, keyed by the
// op's address (which the next op registered may reuse), start over.
class RetireDeregisteredInfos : public c10::OpRegistrationListener {
 public:
  void onOperatorRegistered(const c10::OperatorHandle&) override {}
  void onOperatorDeregistered(const c10::OperatorHandle& op) override {
    InfoRegistry& r = registry();
    std::unique_lock lock(r.mu);
    auto it = r.infos.find(op.operator_name());
    if (it != r.infos.end()) {
      r.retired.push_back(std::move(it->second));
      r.infos.erase(it);
    }
    r.epoch.fetch_add(1, std::memory_order_release);
  }
};

// What one thread has looked up: no lock on the way of every dispatched op.
struct SeenInfos {
  uint64_t epoch = 0;
  std::unordered_map<c10::OperatorHandle, const OpInfo*> infos;
};

}  // namespace

OpInfo::Verdict OpInfo::verdict(uint64_t signature) const {
  {
    std::lock_guard<std::mutex> lock(verdict_mu);
    auto it = verdicts.find(signature);
    if (it != verdicts.end()) return it->second;
  }
  if (!engine::verdict_is_stored(name_hash, signature)) return Verdict::Unknown;
  std::lock_guard<std::mutex> lock(verdict_mu);  // an earlier process's check agreed
  if (verdicts.size() >= kMaxVerdicts) verdicts.clear();
  verdicts[signature] = Verdict::Agrees;
  return Verdict::Agrees;
}

void OpInfo::set_verdict(uint64_t signature, Verdict v) const {
  {
    std::lock_guard<std::mutex> lock(verdict_mu);
    if (verdicts.size() >= kMaxVerdicts) verdicts.clear();
    verdicts[signature] = v;
  }
  if (v == Verdict::Agrees) engine::store_verdict(name_hash, signature);
}

const OpInfo& op_info_for(const c10::OperatorHandle& op) {
  static auto* listening = new c10::RegistrationHandleRAII(
      c10::Dispatcher::singleton().addRegistrationListener(std::make_unique<RetireDeregisteredInfos>()));
  (void)listening;
  InfoRegistry& r = registry();
  thread_local auto* seen = new SeenInfos();  // not destroyed: a late destructor may dispatch
  const uint64_t epoch = r.epoch.load(std::memory_order_acquire);
  if (seen->epoch != epoch) {
    seen->infos.clear();
    seen->epoch = epoch;
  }
  auto hit = seen->infos.find(op);
  if (hit != seen->infos.end()) return *hit->second;
  const auto& name = op.operator_name();
  const OpInfo* found = nullptr;
  {
    std::shared_lock lock(r.mu);
    auto it = r.infos.find(name);
    if (it != r.infos.end()) found = it->second.get();
  }
  if (found == nullptr) {
    auto info = make_op_info(op);
    std::unique_lock lock(r.mu);
    found = r.infos.emplace(name, std::move(info)).first->second.get();
  }
  seen->infos.emplace(op, found);
  return *found;
}

}  // namespace kiln::dispatch
