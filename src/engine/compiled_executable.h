// A loaded kernel as a runtime::Executable: splits LaunchArgs::work over the pool.
#pragma once

#include <memory>
#include <string>

#include "kiln/codegen.h"
#include "kiln/runtime.h"
#include "kiln/thread_pool.h"

namespace kiln::engine {

class CompiledExecutable final : public runtime::Executable {
 public:
  CompiledExecutable(std::string name, std::unique_ptr<codegen::LoadedKernel> code, runtime::ThreadPool& pool)
      : name_(std::move(name)), code_(std::move(code)), pool_(pool) {}

  const std::string& name() const override { return name_; }
  const char* kind() const override { return "fused kernel"; }
  void run(const runtime::LaunchArgs& args) override;

 private:
  std::string name_;
  std::unique_ptr<codegen::LoadedKernel> code_;
  runtime::ThreadPool& pool_;
};

}  // namespace kiln::engine
