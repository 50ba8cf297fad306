"""Memory a bench child holds from its start and lets go of just before its
first step, so that the first step's fresh pages are pages the guest already
backs, whatever ran before it.

Why: the bench VM (Firecracker) returns guest memory that stays free for a
couple of seconds to the host (virtio-balloon free page reporting; the kernel
command line sets page_reporting_order=11). A page the host took back faults
in the host again at its next touch. Whether a first step's fresh blocks land
on such pages depends on what the machine ran in the seconds before, not on
the contender: in make bench at 4c19914, adamw_foreach_off's first step took
66-116 ms in some processes and 489-653 ms in others under either kiln policy,
with about 1 s of system time in the slow ones, and its per-round ratios of
one policy to the other spanned 0.26-5.20.

Measured on that VM, both policies alike: released just before the first
step, 1 GiB held from the child's start took adamw_foreach_off's first step
from 284-687 ms (6 fresh processes) to 61-92 ms (8), and memory_chain's from
16-32 or 84-115 ms to 20-32 ms (8). Writing it costs a child 0.06-1.49 s
at its start (the full run at 33cd996), before `import torch`: no
contender's thread runs beside it, and no timed step.

The largest first step of make bench's workloads grows the process by about
400 MiB (adamw_foreach_off's optimizer state; the others by 150 MiB at most);
1 GiB leaves room for the allocators' own.
"""

import ctypes
import mmap
import threading
import time

FLAG = "--back-memory-mb"


def mb_from_argv(argv):
    """The MiB `FLAG=N` (or `FLAG N`) in `argv` asks for; 0 when absent. Read
    before argparse: the memory is held before `import torch`."""
    for i, arg in enumerate(argv):
        if arg.startswith(FLAG + "="):
            value = arg[len(FLAG) + 1 :]
        elif arg == FLAG and i + 1 < len(argv):
            value = argv[i + 1]
        else:
            continue
        try:
            mb = int(value)
        except ValueError:
            mb = -1
        if mb < 0:
            raise SystemExit(f"{FLAG}: expected a whole number of MiB, 0 or more; got {value!r}")
        return mb
    return 0


class HeldMemory:
    """`mb` MiB of anonymous memory, every page written (two threads: the faults
    are the cost, and each takes its half); `seconds` is what that took."""

    def __init__(self, mb):
        self.mb = mb
        self.seconds = 0.0
        self._map = None
        if mb == 0:
            return
        start = time.perf_counter()
        size = mb << 20
        self._map = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        if hasattr(mmap, "MADV_HUGEPAGE"):
            self._map.madvise(mmap.MADV_HUGEPAGE)  # as kiln's device pool does: fewer faults
        base = ctypes.addressof(ctypes.c_char.from_buffer(self._map))
        half = size // 2
        # ctypes lets go of the GIL around memset: the two halves fault at once.
        writers = [threading.Thread(target=ctypes.memset, args=(base + k * half, 1, half)) for k in range(2)]
        for w in writers:
            w.start()
        for w in writers:
            w.join()
        self.seconds = time.perf_counter() - start

    def release(self):
        """Unmaps the memory (once): the guest has its pages free, and backed, for what runs next."""
        if self._map is not None:
            self._map.close()
            self._map = None

    @property
    def held(self):
        return self._map is not None

    def record(self):
        return {"mb": self.mb, "seconds": self.seconds}
