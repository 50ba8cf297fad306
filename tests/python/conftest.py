import atexit
import os
import shutil
import subprocess
import sys
import tempfile

# The suite never reads or writes the user's kernel cache: it and every
# interpreter it starts share a store of their own, empty at the start
# (set before torch's autoload imports kiln).
CACHE_DIR = tempfile.mkdtemp(prefix="kiln-test-cache-")
os.environ["KILN_CACHE_DIR"] = CACHE_DIR
atexit.register(shutil.rmtree, CACHE_DIR, True)

# The tests of this process count what fusion does at a trace's first flush
# (regions, kernels, library kernels): they run under the fixed policy,
# every trace fused and compiled at its first flush. The adaptive policy's
# library tier (the defaults) is tested in fresh interpreters (run_python
# drops KILN_ variables: test_compile_tiers.py, test_real_models.py, ...);
# `make test-adaptive` (part of `make test`) runs conformance, the
# differential test and the cache suites under the defaults too.
FIXED_POLICY = {"KILN_ASYNC_COMPILE": "0", "KILN_COMPILE_THRESHOLD": "1"}
for _knob, _value in FIXED_POLICY.items():
    os.environ.setdefault(_knob, _value)
# Whether this process runs under the fixed policy (not the defaults).
UNDER_FIXED_POLICY = all(os.environ[k] == v for k, v in FIXED_POLICY.items())
# The policy this process runs under, for the fresh processes of the suites
# that run under both (the cache suites: `make test-adaptive` runs them again
# under the defaults).
POLICY = {k: os.environ[k] for k in FIXED_POLICY}

import pytest  # noqa: E402
import torch  # noqa: E402

import kiln  # noqa: E402, F401  (autoload imports it too; explicit keeps the tests honest when autoload is off)

DEVICE = kiln.DEVICE_NAME


def same_under_policy(a, b, rel):
    """What fresh runs of one program on one store must agree on: the same
    bits under the fixed policy, which fuses every trace at its first flush
    on a cold store as on a warm one; within `rel` under the defaults, whose
    warm runs fuse at once where cold ones ran library kernels first, and
    fused kernels may differ in the last bits (docs/tuning.md, "Tiers")."""
    return a == b if UNDER_FIXED_POLICY else a == pytest.approx(b, rel=rel, abs=1e-6)


REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture
def dev():
    return torch.device(DEVICE, 0)


@pytest.fixture(autouse=True)
def _clean_device():
    """Every test starts and ends with no pending device error."""
    getattr(torch, DEVICE).synchronize()
    yield
    try:
        getattr(torch, DEVICE).synchronize()
    except RuntimeError:
        pass


@pytest.fixture(params=["lazy", "eager"])
def mode(request):
    """Runs the test in kiln's lazy and eager modes; restores the mode after."""
    previous = kiln.mode()
    kiln.set_mode(request.param)
    try:
        yield request.param
    finally:
        kiln.set_mode(previous)


def sync():
    """Waits for the device (and raises what its launches left pending)."""
    getattr(torch, DEVICE).synchronize()


def run_python(code, env=None, timeout=120):
    """Runs `code` in a fresh interpreter; returns the CompletedProcess."""
    # KILN_MODE carries over: the suite runs whole in each mode; and the suite's kernel cache.
    kept = ("KILN_MODE", "KILN_CACHE_DIR")
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("KILN_") or k in kept}
    full_env.update(env or {})
    return subprocess.run(
        [sys.executable, "-c", code], env=full_env, capture_output=True, text=True, timeout=timeout, cwd=REPO
    )


def rerun_with_launch_blocking(test_file, selection, mode):
    """Runs the tests of `test_file` that `selection` (-k) picks in a fresh
    interpreter in kiln mode `mode` with KILN_LAUNCH_BLOCKING=1; they must pass."""
    code = (
        f"import sys, pytest; sys.exit(pytest.main(['-q', '-p', 'no:cacheprovider', '-k', {selection!r}, "
        f"{os.path.abspath(test_file)!r}]))"
    )
    r = run_python(code, env={"KILN_MODE": mode, "KILN_LAUNCH_BLOCKING": "1"}, timeout=300)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    assert " passed" in r.stdout, r.stdout[-500:]
