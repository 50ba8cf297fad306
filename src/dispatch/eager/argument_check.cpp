#include "dispatch/eager/argument_check.h"

#include <ATen/CPUGeneratorImpl.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/ScalarType.h>
#include <c10/util/Exception.h>
#include <c10/util/overflows.h>

#include <algorithm>
#include <cstring>
#include <type_traits>

#include "dispatch/backend/devices.h"
#include "dispatch/backend/host_threads.h"
#include "dispatch/eager/small_stand_in.h"
#include "dispatch/eager/tensor_alias.h"
#include "kiln/hash_mix.h"
#include "kiln/metrics.h"

namespace kiln::dispatch {
namespace {

using DTypes = c10::SmallVector<c10::ScalarType, 4>;

// Whether Scalar::to<T> takes `v` for every T in `dtypes` without raising
// (c10::checked_convert's rule; conversions to bool never raise).
template <typename From>
bool fits_all(From v, const DTypes& dtypes) {
  for (c10::ScalarType st : dtypes) {
    if (st == c10::kBool) continue;
    bool fits = false;
    switch (st) {
#define FITS_CASE(T, name) \
  case c10::ScalarType::name: fits = !c10::overflows<T, From>(v); break;
      AT_FORALL_SCALAR_TYPES_WITH_COMPLEX(FITS_CASE)
#undef FITS_CASE
      default: break;  // a dtype without a checked conversion: its own case
    }
    if (!fits) return false;
  }
  return true;
}

// A CPU 0-dim tensor argument's value (a Python number arrives as one).
template <typename Fn>
void with_value(const at::Tensor& t, Fn&& fn) {
  switch (t.scalar_type()) {
    case c10::kDouble: fn(*static_cast<const double*>(t.const_data_ptr())); break;
    case c10::kFloat: fn(static_cast<double>(*static_cast<const float*>(t.const_data_ptr()))); break;
    case c10::kLong: fn(*static_cast<const int64_t*>(t.const_data_ptr())); break;
    case c10::kInt: fn(static_cast<int64_t>(*static_cast<const int32_t*>(t.const_data_ptr()))); break;
    case c10::kComplexDouble: fn(*static_cast<const c10::complex<double>*>(t.const_data_ptr())); break;
    case c10::kComplexFloat:
      fn(static_cast<c10::complex<double>>(*static_cast<const c10::complex<float>*>(t.const_data_ptr())));
      break;
    default: break;  // bool and narrow types fit every dtype Scalar::to checks against, or are rare
  }
}

int64_t bits_of(double d) {
  int64_t b;
  std::memcpy(&b, &d, sizeof b);
  return b;
}

// Whether anything warned while it was installed: a stand-in's warning may
// be about its small sizes (var with a correction above its element count).
class NoteWarnings : public c10::WarningHandler {
 public:
  void process(const c10::Warning&) override { warned = true; }
  bool warned = false;
};

}  // namespace

uint64_t argument_case(uint64_t argument_pattern, const torch::jit::Stack& stack, size_t first) {
  DTypes dtypes;
  for (size_t i = first; i < stack.size(); ++i) {
    for_each_tensor(stack[i], [&](const at::Tensor& t) {
      if (!t.is_cpu() && std::find(dtypes.begin(), dtypes.end(), t.scalar_type()) == dtypes.end()) {
        dtypes.push_back(t.scalar_type());
      }
    });
  }
  uint64_t h = argument_pattern;
  auto mix = [&](uint64_t position, int64_t value) {
    h = mix_in(h, position);
    h = mix_in(h, static_cast<uint64_t>(value));
  };
  auto note = [&](size_t i, auto v) {
    if (fits_all(v, dtypes)) return;
    if constexpr (std::is_same_v<decltype(v), c10::complex<double>>) {
      mix(i, bits_of(v.real()));
      mix(i, bits_of(v.imag()));
    } else if constexpr (std::is_same_v<decltype(v), double>) {
      mix(i, bits_of(v));
    } else {
      mix(i, v);
    }
  };
  for (size_t i = first; i < stack.size(); ++i) {
    const c10::IValue& v = stack[i];
    if (v.isDouble()) note(i, v.toDouble());
    else if (v.isInt()) note(i, v.toInt());
    else if (v.isComplexDouble()) note(i, static_cast<c10::complex<double>>(v.toComplexDouble()));
    else if (v.isTensor() && v.toTensor().defined() && v.toTensor().is_cpu() && v.toTensor().dim() == 0) {
      with_value(v.toTensor(), [&](auto x) { note(i, x); });
    }
  }
  return h;
}

OpInfo::Verdict check_on_zeroed_twins(const c10::OperatorHandle& op, const OpInfo& info, const torch::jit::Stack& stack,
                                      size_t first, c10::DeviceIndex index, const InferredShapes& shapes) {
  AliasSet twins = AliasSet::zeroed_twins();
  torch::jit::Stack args;
  args.reserve(stack.size() - first);
  for (size_t i = first; i < stack.size(); ++i) {
    const c10::IValue& v = stack[i];
    if (info.generator_arg[i - first]) {
      args.emplace_back(at::detail::createCPUGenerator());  // the program's generators do not advance
      continue;
    }
    c10::IValue twin = map_tensors(
        v, [&](const at::Tensor& t) { return t.device().type() == c10::kPrivateUse1 ? twins.alias(t) : t; });
    if (twin.isDevice() && twin.toDevice().type() == c10::kPrivateUse1) twin = c10::Device(c10::kCPU);
    args.push_back(std::move(twin));
  }
  std::vector<c10::IValue> arg_twins(args.begin(), args.end());
  {
    // The check runs here, beside the worker's launches, not on the worker:
    // a team this thread builds for it would stay beside the worker's
    // (host_threads.h), so it goes with the check, raising or not.
    struct LetGoOfTheTeam {
      ~LetGoOfTheTeam() { release_host_openmp_team(); }
    } let_go;
    c10::DeviceGuard guard(c10::Device(c10::kPrivateUse1, index));
    op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::CPU), &args);
  }
  bool agrees = args.size() == shapes.returns.size();
  for (size_t j = 0; agrees && j < args.size(); ++j) agrees = same_geometry(args[j], shapes.returns[j]);
  for (size_t i = 0; agrees && i < shapes.written.size(); ++i) {
    if (!shapes.written[i] || !arg_twins[i].isTensor()) continue;
    const at::Tensor& t = arg_twins[i].toTensor();
    agrees = t.sizes() == c10::IntArrayRef(shapes.written[i]->sizes);
  }
  return agrees ? OpInfo::Verdict::Agrees : OpInfo::Verdict::Disagrees;
}

OpInfo::Verdict check_case_on_twins(const c10::OperatorHandle& op, const OpInfo& info, const torch::jit::Stack& stack,
                                    size_t first, c10::DeviceIndex index, const InferredShapes& shapes) {
  if (shapes.argument_pattern != 0) {
    if (std::optional<torch::jit::Stack> small = small_stand_in(op, stack, first)) {
      try {
        NoteWarnings warnings;
        const c10::WarningUtils::WarningHandlerGuard guard(&warnings);
        ShapeCache scratch;
        std::shared_ptr<const InferredShapes> small_shapes = infer_shapes(op, info.mutable_arg, *small, first, scratch);
        // The same case by the case's own definition, strides and sharing
        // included (contiguous strides of small sizes can fall into other classes).
        if (small_shapes->argument_pattern == shapes.argument_pattern &&
            check_on_zeroed_twins(op, info, *small, first, index, *small_shapes) == OpInfo::Verdict::Agrees &&
            !warnings.warned) {
          Metrics::global().add(Counter::FirstSightChecks, "small stand-in");
          return OpInfo::Verdict::Agrees;
        }
      } catch (const std::exception&) {
        // checked again below, at full size
      }
    }
  }
  Metrics::global().add(Counter::FirstSightChecks, "zero-filled twins");
  return check_on_zeroed_twins(op, info, stack, first, index, shapes);
}

}  // namespace kiln::dispatch
