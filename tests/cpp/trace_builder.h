// Test helper: traces over float32 host arrays, planned by fusion and run
// through codegen, to check that fusing keeps eager's answers.
#pragma once

#include <cstdint>
#include <map>
#include <utility>
#include <vector>

#include "kiln/codegen.h"
#include "kiln/fusion.h"

namespace kiln::test {

constexpr ir::DType F = ir::DType::Float32;

// Builds traces over float32 host arrays and runs their plans.
struct TraceBuilder {
  using View = trace::View;
  using Op = ir::Op;

  trace::Trace t;
  std::map<int32_t, std::vector<float>> memory;

  int32_t buffer(size_t elems, bool fresh = true) {
    trace::Buffer b;
    b.nbytes = elems * 4;
    b.fresh = fresh;
    t.buffers.push_back(b);
    const auto id = static_cast<int32_t>(t.buffers.size()) - 1;
    memory[id].assign(elems, 0.f);
    return id;
  }
  // A contiguous view of `buf` shaped `shape`, seen from an op over `space`
  // (right-aligned broadcasting, as torch does).
  static View view(int32_t buf, std::vector<int64_t> shape, std::vector<int64_t> space, int64_t offset = 0) {
    View v;
    v.buffer = buf;
    v.dtype = F;
    v.offset = offset;
    std::vector<int64_t> own(shape.size());
    int64_t s = 1;
    for (size_t i = shape.size(); i-- > 0;) {
      own[i] = shape[i] == 1 ? 0 : s;
      s *= shape[i];
    }
    v.strides.assign(space.size(), 0);
    for (size_t i = 0; i < shape.size(); ++i) v.strides[space.size() - shape.size() + i] = own[i];
    return v;
  }
  trace::TraceOp& op(const char* name, std::vector<int64_t> sizes, uint64_t reduced = 0) {
    trace::TraceOp o;
    o.name = name;
    o.sizes = std::move(sizes);
    o.reduced = reduced;
    t.ops.push_back(std::move(o));
    return t.ops.back();
  }
  void unary(Op f, View in, View out, std::vector<int64_t> space) {
    auto& o = op(ir::op_name(f), space);
    o.store(out, o.add_node(f, F, o.load(in)));
  }
  void binary(Op f, View a, View b, View out, std::vector<int64_t> space) {
    auto& o = op(ir::op_name(f), space);
    o.store(out, o.add_node(f, F, o.load(a), o.load(b)));
  }
  void with_scalar(Op f, View a, double s, View out, std::vector<int64_t> space) {
    auto& o = op(ir::op_name(f), space);
    o.store(out, o.add_node(f, F, o.load(a), o.cast(o.scalar_float(s), F)));
  }
  // Reduces the last dim of `space` into a keepdim output.
  void reduce_last(ir::ReduceKind kind, View in, View out, std::vector<int64_t> space) {
    auto& o = op(ir::reduce_name(kind), space, uint64_t(1) << (space.size() - 1));
    o.store(out, o.reduce(kind, F, o.load(in)));
  }

  fusion::Plan run(int max_ops = 64) {
    fusion::Plan p = fusion::plan(t, {max_ops});
    std::map<int32_t, std::vector<float>> scratch;
    for (const auto& s : p.scratch) scratch[s.buffer].assign(memory[s.buffer].size(), 0.f);
    for (const auto& k : p.kernels) {
      auto obj = codegen::compile(k.kernel, "kiln_fusion_test", {});
      auto loaded = codegen::load(obj.object, "kiln_fusion_test");
      std::vector<void*> bufs;
      for (int32_t id : k.buffer_ids) {
        const int32_t in = t.buffers[id].memory_of >= 0 ? t.buffers[id].memory_of : id;  // an adopting output
        bufs.push_back(scratch.count(id) ? scratch[id].data() : memory[in].data());
      }
      loaded->fn(bufs.data(), k.ints.data(), k.scalars.data(), 0, k.work);
    }
    return p;
  }
};

inline std::vector<float> iota(size_t n, float scale = 0.1f, float shift = -1.f) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = shift + scale * static_cast<float>(i % 37) + 0.013f * static_cast<float>(i);
  return v;
}

}  // namespace kiln::test
