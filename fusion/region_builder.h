// One region while it grows, and the kernel it becomes (internal to fusion/).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "kiln/fusion.h"

namespace kiln::fusion {

class RegionBuilder {
 public:
  struct StoreRef {
    trace::View view;  // region coordinates
    int32_t value;     // region node
    int32_t op;        // trace op that stored it
  };

  // `memory` maps each buffer id to the id of the buffer whose memory it is
  // (itself, or the one an adopting output took it from: trace::Buffer::memory_of).
  RegionBuilder(int max_ops, const std::vector<int32_t>& memory) : max_ops_(max_ops), memory_(&memory) {}

  // Adds trace op `index` (of buffer-sharing component `component`), or
  // returns why it cannot join (nothing changes then).
  std::string try_add(const trace::TraceOp& op, int32_t index, int32_t component);
  int num_ops() const { return static_cast<int>(ops_.size()); }
  Region region(std::string ended_by) const;
  const std::vector<trace::View>& memory_loads() const { return memory_loads_; }
  const std::vector<StoreRef>& stores() const { return stores_; }
  int64_t store_bytes(const StoreRef& s) const;

  // The kernel computing the stores marked in `keep` (nullopt: nothing to
  // compute); `scratch` marks the buffers the plan gives scratch memory.
  std::optional<PlannedKernel> build(const std::vector<bool>& keep, const std::vector<bool>& scratch) const;

 private:
  std::optional<std::vector<int32_t>> embed(const trace::TraceOp& op) const;
  trace::View to_region(const trace::View& v, const std::vector<int32_t>& map) const;
  bool overlaps(const trace::View& a, const trace::View& b) const;
  // Whether a and b are the same view of the same memory (buffers sharing memory included).
  bool same_memory_view(const trace::View& a, const trace::View& b) const;
  int32_t memory_load(const trace::View& v);

  int max_ops_;
  const std::vector<int32_t>* memory_;
  std::vector<int32_t> ops_;  // trace ops, as they joined
  int32_t component_ = -1;
  std::vector<int64_t> sizes_;
  uint64_t reduced_ = 0;
  bool has_sincos_ = false;      // a float sin or cos joined (rule 10)
  std::vector<ir::Node> nodes_;  // Load args index memory_loads_
  std::vector<trace::View> memory_loads_;
  std::vector<trace::Scalar> scalars_;
  std::vector<PlannedKernel::ScalarRef> scalar_refs_;  // where each of scalars_ came from
  std::vector<ir::Reduction> reductions_;
  std::vector<StoreRef> stores_;
};

}  // namespace kiln::fusion
