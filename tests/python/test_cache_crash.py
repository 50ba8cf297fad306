"""Training processes killed at random moments (importing, compiling, writing
the store from its background writer, saving the warm-start files at exit)
leave a cache that opens, verifies clean, and serves only valid entries.
The store layer's own kill test (StoreCrash.SurvivesFiftyKillsAtRandomMoments)
kills its writers; this one kills whole kiln programs (about 2 minutes)."""

import json
import os
import random
import signal
import subprocess
import sys
import time

from conftest import POLICY, REPO, same_under_policy

CHAINS = os.path.join(REPO, "tests", "python", "scripts", "cache_chains.py")
KILLS = 50


def _env(cache_dir, **extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith("KILN_")}
    # The pytest process's policy: the fixed one, or the defaults in `make test-adaptive`.
    env.update({"KILN_MODE": "lazy", "KILN_CACHE_DIR": str(cache_dir), **POLICY})
    env.update(extra)
    return env


def _chains(cache_dir, first, last, **extra):
    """A complete run of chain lengths first..last: its JSON line."""
    r = subprocess.run(
        [sys.executable, CHAINS, str(last), "--first", str(first)],
        env=_env(cache_dir, **extra),
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def _verify(cache_dir):
    r = subprocess.run(
        [sys.executable, "-m", "kiln", "cache", "verify"],
        env=_env(cache_dir),
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
    )
    return r


def test_fifty_programs_killed_at_random_moments_leave_a_cache_that_verifies(tmp_path):
    rng = random.Random(20261203)
    cache = tmp_path / "c"
    kills = runs = 0
    while kills < KILLS:
        # A window of 20 chain lengths out of 120 under a 1 MiB cap: every run
        # finds some kernels stored, compiles others, and its writer evicts.
        first = 1 + rng.randrange(0, 100)
        proc = subprocess.Popen(
            [sys.executable, CHAINS, str(first + 19), "--first", str(first), "--announce"],
            env=_env(cache, KILN_CACHE_MAX_MB="1"),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=REPO,
        )
        assert proc.stdout.readline().strip() == b"started"  # imported: kiln's part begins
        # Then it looks up, compiles, writes and evicts for about 0.3-1.2 s, and
        # saves its warm-start and verdict files at exit: killed anywhere in that.
        time.sleep(rng.uniform(0.0, 1.3))
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
            kills += 1
        _, err = proc.communicate(timeout=120)
        if proc.returncode != -signal.SIGKILL:
            assert proc.returncode == 0, err.decode()[-3000:]  # ended on its own: it must have passed
        v = _verify(cache)
        assert v.returncode == 0 and ", 0 bad" in v.stdout, (kills, v.stdout[-2000:], v.stderr[-2000:])
        if kills % 10 == 0 and proc.returncode == -signal.SIGKILL:
            # A run after the kill: whatever it loads from the store gives eager's numbers.
            got = _chains(cache, 1, 40)
            assert same_under_policy(got["total"], reference(tmp_path)["total"], rel=1e-6), (got, kills)
            runs += 1
    assert runs >= 4
    final = _chains(cache, 1, 80)
    assert same_under_policy(
        final["total"], _chains(tmp_path / "memory-only", 1, 80, KILN_CACHE="0")["total"], rel=1e-6
    )
    v = _verify(cache)
    assert v.returncode == 0 and ", 0 bad" in v.stdout, v.stdout


_REFERENCE = {}


def reference(tmp_path):
    """Lengths 1..40 without a store: what every run of them must give."""
    if "r" not in _REFERENCE:
        _REFERENCE["r"] = _chains(tmp_path / "reference", 1, 40, KILN_CACHE="0")
    return _REFERENCE["r"]
