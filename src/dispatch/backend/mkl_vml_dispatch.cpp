// One first call of each MKL-backed vector math op (see mkl_vml_dispatch.h).
#include "dispatch/backend/mkl_vml_dispatch.h"

#include <ATen/ATen.h>
#include <ATen/Context.h>
#include <ATen/core/dispatch/Dispatcher.h>

#include <mutex>

namespace kiln::dispatch {

void resolve_mkl_vml_dispatch() {
  static std::once_flag once;
  std::call_once(once, [] {
    if (!at::hasMKL()) return;
    for (const at::ScalarType dtype : {at::kFloat, at::kDouble}) {
      // One element: under ATen's grain size, so one thread makes the call.
      const at::Tensor one = at::full({1}, 0.5, at::TensorOptions().dtype(dtype));
      for (const std::string& name : mkl_vml_ops()) {
        (void)c10::Dispatcher::singleton()
            .findSchemaOrThrow(("aten::" + name).c_str(), "")
            .typed<at::Tensor(const at::Tensor&)>()
            .call(one);
      }
    }
  });
}

const std::vector<std::string>& mkl_vml_ops() {
  // The IMPLEMENT_VML_MKL entries of ATen's cpu/vml.h (torch 2.13).
  static const std::vector<std::string> names = {"acos", "asin",  "atan", "cos",  "erf", "erfc", "erfinv", "exp",
                                                 "log",  "log10", "sin",  "sqrt", "tan", "tanh", "trunc",  "log2"};
  return names;
}

}  // namespace kiln::dispatch
