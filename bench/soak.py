"""The memory soak of the persistent-cache issue: one process runs N distinct
random programs in lazy mode (the differential test's generator,
tests/python/lazy_programs.py), checks each against eager CPU, and samples
its resident memory. Every compiled kernel and plan of a program it never
sees again is dead weight, so what the process keeps must be bounded: the
memory level of the executable cache and the plan cache drop their least
recently used entries (and unload the kernels' code). The process's
resident memory must level off: the last half of the programs may add less
than 5% to it.

    python bench/soak.py [--programs 20000] [--sample-every 500] [--out FILE]

Prints one line per sample and, at the end, a JSON object (also written to
FILE): the samples, the growth over the last half, the programs that
differed from eager, and kiln's counters. Exit status 1 if any program
differed or the growth is 5% or more.
"""

import argparse
import atexit
import json
import os
import resource
import shutil
import sys
import tempfile
import time
import warnings

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "tests", "python"))
# A store of its own, empty (set before torch's autoload imports kiln): the
# soak's tens of thousands of kernels stay out of the user's cache.
os.environ["KILN_CACHE_DIR"] = tempfile.mkdtemp(prefix="kiln-soak-cache-")
# Registered before kiln's own handler, so it runs after the store closed.
atexit.register(shutil.rmtree, os.environ["KILN_CACHE_DIR"], True)

import torch  # noqa: E402

import kiln  # noqa: E402
from lazy_programs import Program  # noqa: E402
from test_lazy_differential import check  # noqa: E402

GROWTH_LIMIT = 0.05


def resident_mib():
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def main(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument("--programs", type=int, default=20000)
    parser.add_argument("--sample-every", type=int, default=500)
    parser.add_argument("--first-seed", type=int, default=1_000_000, help="seeds the differential test does not use")
    parser.add_argument("--out")
    args = parser.parse_args(argv)
    kiln.set_mode("lazy")
    warnings.simplefilter("ignore")  # eager's own warnings about the programs' ops, thousands of them
    dev = torch.device(kiln.DEVICE_NAME)
    samples, failures = [], []
    t0 = time.perf_counter()
    for i in range(args.programs):
        seed = args.first_seed + i
        try:
            check(Program(seed), dev)
        except Exception as e:  # noqa: BLE001 - every failure is reported, the soak goes on
            failures.append(f"seed {seed}: {type(e).__name__}: {str(e)[:300]}")
            try:
                torch.neuron.synchronize()
            except RuntimeError:
                pass
        if (i + 1) % args.sample_every == 0 or i + 1 == args.programs:
            c = kiln.metrics.counters()
            sample = {
                "programs": i + 1,
                "rss_MiB": round(resident_mib(), 1),
                "max_rss_MiB": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
                "kernels_compiled": sum(c["kernels_compiled"].values()),
                "executables_evicted": c["executable_cache"].get("evicted", 0),
                "plans_evicted": c["plan_cache"].get("evicted", 0),
                "seconds": round(time.perf_counter() - t0, 1),
            }
            samples.append(sample)
            print(json.dumps(sample), flush=True)
    half = next(s for s in samples if s["programs"] >= args.programs // 2)
    growth = (samples[-1]["rss_MiB"] - half["rss_MiB"]) / half["rss_MiB"]
    result = {
        "programs": args.programs,
        "samples": samples,
        "last_half_growth": growth,
        "growth_limit": GROWTH_LIMIT,
        "failures": failures,
        "counters": kiln.metrics.counters(),
    }
    print(json.dumps({k: v for k, v in result.items() if k not in ("samples", "counters")}))
    if args.out:
        with open(args.out, "w") as fh:
            json.dump(result, fh, indent=1)
    return 1 if failures or growth >= GROWTH_LIMIT else 0


if __name__ == "__main__":
    sys.exit(main())
