// Test helper: compiles a Kernel with codegen, loads it and runs it on host buffers.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "kiln/codegen.h"
#include "kiln/kernel_ir.h"

namespace kiln::test {

struct Compiled {
  std::unique_ptr<codegen::LoadedKernel> loaded;
  explicit Compiled(const ir::Kernel& k, codegen::Options o = {}) {
    auto obj = codegen::compile(k, "kiln_test_kernel", o);
    EXPECT_GT(obj.object.size(), 0u);
    loaded = codegen::load(obj.object, "kiln_test_kernel");
  }
  void operator()(std::vector<void*> bufs, const std::vector<int64_t>& ints, const std::vector<double>& scalars,
                  int64_t begin, int64_t end) {
    loaded->fn(bufs.data(), ints.data(), scalars.data(), begin, end);
  }
};

}  // namespace kiln::test
