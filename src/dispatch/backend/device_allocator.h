// The device allocator's one switch (the allocator itself registers with c10
// in device_allocator.cpp).
#pragma once

#include <c10/core/Storage.h>

namespace kiln::dispatch {

// Whether the storage's memory came from a device pool through this
// allocator: freeing it then reaches the pending trace first (a trace may
// drop the stores of a buffer freed before its flush).
bool allocated_by_device_pool(const c10::Storage& storage);

// While one is alive on this thread, in lazy mode, an allocation may take the
// memory of a buffer that only the pending trace still keeps alive (its owner
// freed it after the ops that read it were recorded), where eager mode would
// have reused that memory. For the outputs of an op about to be recorded or
// launched: only ops ordered after the trace's may write it.
class ReuseHeldBlocks {
 public:
  ReuseHeldBlocks();
  ~ReuseHeldBlocks();
  ReuseHeldBlocks(const ReuseHeldBlocks&) = delete;
  ReuseHeldBlocks& operator=(const ReuseHeldBlocks&) = delete;

 private:
  bool previous_;
};

}  // namespace kiln::dispatch
