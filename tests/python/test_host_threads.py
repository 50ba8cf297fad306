"""The host's threads: the device's ATen work runs on its worker thread, and
the program's thread lets go of its OpenMP team when it waits for the device
(src/dispatch/backend/host_threads.h). libgomp keeps a team of threads per
thread that starts a parallel loop and stops them spinning between loops
once it manages more threads than the machine has cores: with the
program's team kept beside the worker's, a library kernel ran at about one
core's speed."""

import json

import pytest
import torch

from conftest import FIXED_POLICY, run_python

TEAMS = """
import json, os, time, torch, kiln
d = kiln.DEVICE_NAME

def threads():
    return len(os.listdir("/proc/self/task"))

def settled(want=None):
    # A team's threads leave on their own time: wait until the count is steady (or `want`).
    last, deadline = threads(), time.monotonic() + 5
    while time.monotonic() < deadline:
        time.sleep(0.05)
        now = threads()
        if (want is None and now == last) or now == want:
            return now
        last = now
    return threads()

a = torch.randn(512, 512)
ad = a.to(d)
for _ in range(3):
    (ad @ ad + 1).sum().item()  # the worker runs mm: its team exists from here, and kiln's own threads
base = settled()
a @ a  # a CPU op on the program's thread: it builds its own team
with_cpu_team = settled()
(ad @ ad + 1).sum().item()  # the program waits for the device
after_wait = settled(base)
b = torch.randn(300, 700).to(d)
torch.accelerator.synchronize()
c = b @ b.T  # a first call with new shapes: eager's work, on the worker; no wait after it
after_first_call = settled(base)
e = torch.randn(640, 480).to(d)
torch.accelerator.synchronize()
f = e * 3 + 1  # recorded: its first sight is checked on zero-filled twins, on this thread
after_check = settled(base)
print(json.dumps({"base": base, "with_cpu_team": with_cpu_team, "after_wait": after_wait,
                  "after_first_call": after_first_call, "after_check": after_check}))
"""


@pytest.mark.skipif(torch.get_num_threads() < 2, reason="one thread: ATen builds no OpenMP team")
def test_the_program_lets_go_of_its_openmp_team_and_a_first_call_builds_none(tmp_path):
    # Every op's first sight checked, none run on the host; an empty cache
    # directory: no verdict stored by another test skips a first call.
    r = run_python(TEAMS, env={**FIXED_POLICY, "KILN_CACHE_DIR": str(tmp_path)})
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["with_cpu_team"] > out["base"], out  # the CPU op's team: the count can tell
    assert out["after_wait"] == out["base"], out  # gone when the program waited
    assert out["after_first_call"] == out["base"], out  # a host run built no team on this thread
    assert out["after_check"] == out["base"], out  # a check's team went with it


HOST_RUN_WARNS = """
import inspect, json, warnings, torch, kiln
d = kiln.DEVICE_NAME
boundaries = torch.arange(0.0, 40.0).reshape(4, 10).to(d).t().contiguous().t()  # non-contiguous
values = torch.rand(4, 3).to(d) * 40
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    line = inspect.currentframe().f_lineno + 1
    got = torch.searchsorted(boundaries, values)  # its first call runs eager's kernel: it warns
want = torch.searchsorted(boundaries.cpu(), values.cpu())
print(json.dumps({"warnings": [[str(w.message), w.lineno] for w in caught], "line": line,
                  "equal": torch.equal(got.cpu(), want)}))
"""


def test_a_host_runs_warning_reaches_the_program_at_its_line(tmp_path):
    r = run_python(HOST_RUN_WARNS, env={"KILN_CACHE_DIR": str(tmp_path)})  # no stored verdict: a first call
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["equal"], out
    raised = [w for w in out["warnings"] if "non-contiguous" in w[0]]
    assert raised, out
    assert raised[0][1] == out["line"], out


HOST_RUN_FAILS = """
import torch, kiln, torch.nn.functional as F
d = kiln.DEVICE_NAME
weight = torch.randn(3, 4).to(d)
try:
    F.embedding(torch.tensor([[0, 5]]).to(d), weight)  # its first call runs eager's kernel: out of range
except IndexError as e:
    print("IndexError", str(e))
"""


def test_a_host_runs_error_reaches_the_program_with_eagers_type(tmp_path):
    r = run_python(HOST_RUN_FAILS, env={"KILN_CACHE_DIR": str(tmp_path)})  # no stored verdict: a first call
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.strip().splitlines()[-1] == "IndexError index out of range in self", r.stdout + r.stderr[-2000:]
