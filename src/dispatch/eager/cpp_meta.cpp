#include "dispatch/eager/cpp_meta.h"

#include <ATen/MetaFunctions.h>
#include <ATen/Operators.h>

#include <unordered_map>

namespace kiln::dispatch {

namespace {

using Table = std::unordered_map<c10::OperatorName, c10::KernelFunction>;

c10::OperatorName parse(const char* full_name) {
  const std::string_view text(full_name);
  const size_t dot = text.find('.');
  if (dot == std::string_view::npos) return {std::string(text), ""};
  return {std::string(text.substr(0, dot)), std::string(text.substr(dot + 1))};
}

Table build() {
  Table table;
  // The cast picks the overload of the meta function whose signature is the
  // operator's schema (at::meta::add has add, add_, add_out and add_outf).
#define CPP_META_ENTRY(name, ops_struct, function)                                \
  table.emplace(parse(name), c10::KernelFunction::makeFromUnboxedRuntimeFunction( \
                                 static_cast<at::_ops::ops_struct::schema*>(&at::meta::function)));
#include "dispatch/eager/cpp_meta_table.inc"
#undef CPP_META_ENTRY
  for (auto& [name, kernel] : written_meta_kernels()) table.emplace(parse(name), std::move(kernel));
  return table;
}

}  // namespace

const c10::KernelFunction* cpp_meta_kernel(const c10::OperatorName& name) {
  static const Table table = build();
  auto it = table.find(name);
  return it == table.end() ? nullptr : &it->second;
}

}  // namespace kiln::dispatch
