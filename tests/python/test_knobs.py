"""Knobs: validation at import, unknown-variable warnings, the CLI and docs/knobs.md."""

import os
import subprocess
import sys

import pytest

from conftest import REPO, run_python

BAD_VALUES = [
    ("KILN_DEVICE_COUNT", "abc"),
    ("KILN_DEVICE_COUNT", "0"),
    ("KILN_DEVICE_COUNT", "-1"),
    ("KILN_DEVICE_COUNT", "99"),
    ("KILN_DEVICE_MEMORY_MB", "lots"),
    ("KILN_DEVICE_MEMORY_MB", "0"),
    ("KILN_LAUNCH_BLOCKING", "yes"),
    ("KILN_FALLBACK", "loud"),
    ("KILN_METRICS", "2"),
    ("KILN_LOG", "everything"),
    ("KILN_DEVICE_NAME", "Bad Name"),
    ("KILN_DEVICE_NAME", "cuda"),
    ("KILN_STREAM_MIN_MB", "-1"),
    ("KILN_STREAM_MIN_MB", "8MB"),
    ("KILN_CACHE_MAX_MB", "0"),
    ("KILN_CACHE_MAX_MB", "2GB"),
    ("KILN_CACHE", "maybe"),
    ("KILN_CACHE_READONLY", "2"),
    ("KILN_ASYNC_COMPILE", "on"),
    ("KILN_COMPILE_DELAY_MS", "-5"),
    ("KILN_COMPILE_DELAY_MS", "1s"),
    ("KILN_COMPILE_THRESHOLD", "0"),
    ("KILN_COMPILE_THRESHOLD", "two"),
    ("KILN_OPT_LEVEL", "4"),
    ("KILN_OPT_LEVEL", "-1"),
    ("KILN_OPT_LEVEL", "O2"),
]


@pytest.mark.parametrize("name,value", BAD_VALUES)
def test_bad_value_fails_at_import_naming_variable_value_and_accepted(name, value):
    r = run_python("import torch", env={name: value})
    assert r.returncode != 0
    assert name in r.stderr and f"'{value}'" in r.stderr
    assert "accepted" in r.stderr or "reserved" in r.stderr


def test_bad_value_with_autoload_off_fails_at_import_kiln():
    r = run_python("import torch; import kiln", env={"KILN_DEVICE_COUNT": "abc", "TORCH_DEVICE_BACKEND_AUTOLOAD": "0"})
    assert r.returncode != 0
    assert "ValueError" in r.stderr and "KILN_DEVICE_COUNT" in r.stderr and "an integer in 1..16" in r.stderr


def test_unknown_variable_warns_with_closest_knob():
    r = run_python("import torch; print(torch.accelerator.device_count())", env={"KILN_DEVICE_CONT": "3"})
    assert r.returncode == 0, r.stderr
    assert "KILN_DEVICE_CONT" in r.stderr and "did you mean KILN_DEVICE_COUNT" in r.stderr
    assert r.stdout.strip() == "2"  # the misspelt knob did nothing


def test_knob_values_take_effect():
    r = run_python(
        "import torch, kiln; print(kiln.DEVICE_NAME, torch.accelerator.device_count(),"
        " torch.npu.mem_get_info()[1] >> 20)",
        env={"KILN_DEVICE_NAME": "npu", "KILN_DEVICE_COUNT": "3", "KILN_DEVICE_MEMORY_MB": "64"},
    )
    assert r.stdout.split() == ["npu", "3", "64"], r.stderr


def test_cli_lists_value_and_source():
    env = {k: v for k, v in os.environ.items() if not k.startswith("KILN_") or k == "KILN_CACHE_DIR"}
    env["KILN_DEVICE_COUNT"] = "4"
    out = subprocess.run([sys.executable, "-m", "kiln", "knobs"], env=env, capture_output=True, text=True, cwd=REPO)
    assert out.returncode == 0, out.stderr
    line = next(s for s in out.stdout.splitlines() if s.startswith("KILN_DEVICE_COUNT"))
    assert "4" in line and "(environment)" in line
    line = next(s for s in out.stdout.splitlines() if s.startswith("KILN_FALLBACK"))
    assert "warn" in line and "(default)" in line


def test_docs_knobs_md_is_current():
    generated = subprocess.run(
        [sys.executable, "-m", "kiln", "knobs", "--markdown"],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={k: v for k, v in os.environ.items() if not k.startswith("KILN_") or k == "KILN_CACHE_DIR"},
    )
    with open(os.path.join(REPO, "docs", "knobs.md")) as fh:
        committed = fh.read()
    assert generated.stdout == committed, "docs/knobs.md is stale: run `make docs`"


def test_log_channels_print_to_stderr():
    code = (
        "import torch, warnings; warnings.simplefilter('ignore'); x = torch.randn(4).to('neuron'); "
        "torch.logcumsumexp(x, 0).cpu()"
    )
    r = run_python(code, env={"KILN_LOG": "runtime,fallback"})
    assert r.returncode == 0, r.stderr
    assert "[kiln:runtime] started 2 device(s)" in r.stderr
    assert "[kiln:fallback] aten::_logcumsumexp runs on the host" in r.stderr
    quiet = run_python(code)
    assert "[kiln:" not in quiet.stderr
