// The engine's options from the knobs (see include/engine/kiln/engine.h): the one
// place a Settings field becomes an engine, fusion or codegen option.
#include "kiln/engine.h"
#include "kiln/knobs.h"

namespace kiln::engine {

Options options_for(const Settings& s) {
  Options o;
  o.fusion.max_ops = s.fusion_max_ops;
  o.fusion.stream_min_bytes = s.stream_min_mb << 20;
  o.codegen.fast_math = s.fast_math;
  o.codegen.opt_level = s.opt_level;
  o.num_threads = s.num_threads;
  o.async_compile = s.async_compile;
  o.compile_threshold = s.compile_threshold;
  o.shape_specialize = s.shape_specialize;
  o.compile_delay_ms = static_cast<int>(s.compile_delay_ms);
  o.queue_low_watermark = s.queue_low_watermark;
  o.dump_dir = s.dump_dir;
  if (s.cache) o.cache_dir = s.cache_dir;
  o.cache_read_only = s.cache_read_only;
  o.cache_max_bytes = static_cast<uint64_t>(s.cache_max_mb) << 20;
  return o;
}

}  // namespace kiln::engine
