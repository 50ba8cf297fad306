import os
import subprocess
import sys

import pytest
import torch

import kiln  # noqa: F401  (autoload imports it too; explicit keeps the tests honest when autoload is off)

DEVICE = kiln.DEVICE_NAME
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


def run_python(code, env=None, timeout=120):
    """Runs `code` in a fresh interpreter; returns the CompletedProcess."""
    # KILN_MODE carries over: the suite runs whole in each mode.
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("KILN_") or k == "KILN_MODE"}
    full_env.update(env or {})
    return subprocess.run([sys.executable, "-c", code], env=full_env, capture_output=True, text=True,
                          timeout=timeout, cwd=REPO)
