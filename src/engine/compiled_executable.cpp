#include "engine/compiled_executable.h"

#include <algorithm>

namespace kiln::engine {
namespace {
// Below this many elements per chunk, waking another thread costs more than it saves.
constexpr int64_t kElementsPerChunk = 64 * 1024;
}  // namespace

void CompiledExecutable::run(const runtime::LaunchArgs& args) {
  // ints begin with the sizes: kept dims first, then the reduced ones.
  int64_t work = 1, row = 1;
  for (int d = 0; d < rank_; ++d) (d < rank_ - reduce_rank_ ? work : row) *= args.ints[d];
  const int64_t grain = std::max<int64_t>(1, kElementsPerChunk / std::max<int64_t>(row, 1));
  codegen::KernelFn fn = code_->fn;
  pool_.parallel_for(work, grain, [&](int64_t begin, int64_t end) {
    fn(args.buffers.data(), args.ints.data(), args.scalars.data(), begin, end);
  });
}

}  // namespace kiln::engine
