"""A script written against torch.accelerator runs on the device through autoload."""

import os

from conftest import DEVICE, REPO, run_python

SCRIPT = os.path.join(REPO, "tests", "python", "scripts", "accelerator_train.py")


def _run(env):
    with open(SCRIPT) as fh:
        return run_python(fh.read(), env=env)


def _value(stdout, key):
    for line in stdout.splitlines():
        if line.startswith(key + ":"):
            return line.split(":", 1)[1].strip()
    raise AssertionError(f"{key} missing from output:\n{stdout}")


def test_script_trains_on_the_device_through_autoload():
    r = _run({})
    assert r.returncode == 0, r.stderr
    assert _value(r.stdout, "device") == DEVICE
    assert int(_value(r.stdout, "memory_allocated")) > 0
    assert int(_value(r.stdout, "max_memory_allocated")) >= int(_value(r.stdout, "memory_allocated"))
    assert int(_value(r.stdout, "device_count")) >= 1


def test_autoload_off_runs_on_cpu_with_the_same_result():
    on_device = _run({})
    on_cpu = _run({"TORCH_DEVICE_BACKEND_AUTOLOAD": "0"})
    assert on_cpu.returncode == 0, on_cpu.stderr
    assert _value(on_cpu.stdout, "device") == "cpu"
    assert _value(on_cpu.stdout, "loss") == _value(on_device.stdout, "loss")


def test_current_accelerator_reports_the_device():
    r = run_python(
        "import torch; a = torch.accelerator.current_accelerator(); print(a.type, torch.accelerator.is_available())"
    )
    assert r.stdout.strip() == f"{DEVICE} True", r.stderr
