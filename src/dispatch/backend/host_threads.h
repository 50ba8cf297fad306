// The host's OpenMP teams: ATen's CPU kernels (the library tier, kiln's
// host runs) split their loops over a team of OpenMP threads, one team per
// thread that starts a parallel loop.
#pragma once

namespace kiln::dispatch {

// Lets go of the calling thread's OpenMP team, if it has one; a no-op when
// torch's parallel backend is not libgomp. Called when the program's thread
// blocks on a device (the runtime's host wait): the device's worker is then
// the thread that runs ATen's kernels.
//
// Why: libgomp's idle threads spin between parallel loops, which is what
// makes a loop of tens of microseconds run on all cores, but only while it
// manages no more threads than the machine has CPUs. The program's thread
// keeps a team from its first CPU op on (building a model, a host run); a
// second team on the device's worker then puts libgomp over that count and
// its threads sleep between loops instead, so a library kernel on the
// worker ran at about one core's speed. The next parallel loop on the
// program's thread builds its team again (one thread start).
void release_host_openmp_team();

}  // namespace kiln::dispatch
