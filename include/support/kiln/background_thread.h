// Kiln's background threads (compiles, the store's writer, warm start) take
// only the time the program and the device leave idle: on a small machine a
// thread at the program's priority takes a core from the device's kernels,
// whose OpenMP threads then wait for it at every barrier.
#pragma once

namespace kiln {

// Names the calling thread (at most 15 characters) and lowers it to
// SCHED_IDLE (no privilege needed; where it is refused, nice 19).
void become_background_thread(const char* name);

}  // namespace kiln
