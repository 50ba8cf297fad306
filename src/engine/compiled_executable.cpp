#include "engine/compiled_executable.h"

#include <algorithm>

namespace kiln::engine {
namespace {
// Below this many elements per chunk, waking another thread costs more than it saves.
constexpr int64_t kElementsPerChunk = 64 * 1024;
}  // namespace

void CompiledExecutable::run(const runtime::LaunchArgs& args) {
  const int64_t grain = std::max<int64_t>(1, kElementsPerChunk / std::max<int64_t>(args.unit_elements, 1));
  codegen::KernelFn fn = code_->fn;
  pool_.parallel_for(args.work, grain, [&](int64_t begin, int64_t end) {
    fn(args.buffers.data(), args.ints.data(), args.scalars.data(), begin, end);
  });
}

}  // namespace kiln::engine
