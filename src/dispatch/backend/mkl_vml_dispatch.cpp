// One first call of each MKL-backed vector math op (see mkl_vml_dispatch.h).
#include "dispatch/backend/mkl_vml_dispatch.h"

#include <ATen/ATen.h>
#include <ATen/Context.h>

#include <mutex>
#include <utility>

namespace kiln::dispatch {
namespace {

using UnaryOp = at::Tensor (*)(const at::Tensor&);

// The IMPLEMENT_VML_MKL entries of ATen's cpu/vml.h (torch 2.13).
const std::vector<std::pair<std::string, UnaryOp>>& table() {
  static const std::vector<std::pair<std::string, UnaryOp>> ops = {
      {"acos", [](const at::Tensor& t) { return at::acos(t); }},
      {"asin", [](const at::Tensor& t) { return at::asin(t); }},
      {"atan", [](const at::Tensor& t) { return at::atan(t); }},
      {"cos", [](const at::Tensor& t) { return at::cos(t); }},
      {"erf", [](const at::Tensor& t) { return at::erf(t); }},
      {"erfc", [](const at::Tensor& t) { return at::erfc(t); }},
      {"erfinv", [](const at::Tensor& t) { return at::erfinv(t); }},
      {"exp", [](const at::Tensor& t) { return at::exp(t); }},
      {"log", [](const at::Tensor& t) { return at::log(t); }},
      {"log10", [](const at::Tensor& t) { return at::log10(t); }},
      {"sin", [](const at::Tensor& t) { return at::sin(t); }},
      {"sqrt", [](const at::Tensor& t) { return at::sqrt(t); }},
      {"tan", [](const at::Tensor& t) { return at::tan(t); }},
      {"tanh", [](const at::Tensor& t) { return at::tanh(t); }},
      {"trunc", [](const at::Tensor& t) { return at::trunc(t); }},
      {"log2", [](const at::Tensor& t) { return at::log2(t); }},
  };
  return ops;
}

}  // namespace

void resolve_mkl_vml_dispatch() {
  static std::once_flag once;
  std::call_once(once, [] {
    if (!at::hasMKL()) return;
    for (const at::ScalarType dtype : {at::kFloat, at::kDouble}) {
      // One element: under ATen's grain size, so one thread makes the call.
      const at::Tensor one = at::full({1}, 0.5, at::TensorOptions().dtype(dtype));
      for (const auto& [name, op] : table()) (void)op(one);
    }
  });
}

const std::vector<std::string>& mkl_vml_ops() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> out;
    for (const auto& entry : table()) out.push_back(entry.first);
    return out;
  }();
  return names;
}

}  // namespace kiln::dispatch
