"""bench/memory_backing.py: what a bench child holds until its first step."""

import os
import sys

import pytest

from conftest import REPO

sys.path.insert(0, os.path.join(REPO, "bench"))
import memory_backing  # noqa: E402


def resident_mib():
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


@pytest.mark.parametrize(
    "argv, mb",
    [
        (["measure_one.py", "w", "c"], 0),
        (["measure_one.py", "w", "c", "--back-memory-mb=64"], 64),
        (["measure_one.py", "--back-memory-mb", "16", "w"], 16),
        (["measure_one.py", "--back-memory-mb=0"], 0),
    ],
)
def test_the_flag_is_read_before_argparse(argv, mb):
    assert memory_backing.mb_from_argv(argv) == mb


@pytest.mark.parametrize("value", ["-1", "lots", "1.5"])
def test_a_bad_size_names_the_flag_and_what_it_accepts(value):
    with pytest.raises(SystemExit, match=r"--back-memory-mb: expected a whole number of MiB, 0 or more; got"):
        memory_backing.mb_from_argv([f"--back-memory-mb={value}"])


def test_held_memory_is_resident_until_released():
    before = resident_mib()
    held = memory_backing.HeldMemory(64)
    assert held.held and held.seconds > 0 and held.record() == {"mb": 64, "seconds": held.seconds}
    assert resident_mib() - before >= 60  # every page written, so resident
    held.release()
    assert not held.held and resident_mib() - before < 16
    held.release()  # a second release is a no-op


def test_nothing_is_held_for_zero():
    held = memory_backing.HeldMemory(0)
    assert not held.held and held.record() == {"mb": 0, "seconds": 0.0}
    held.release()
