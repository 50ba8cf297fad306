"""KILN_SHAPE_SPECIALIZE: kernels with their launch geometry baked in. One
kernel per geometry instead of one for every size, the same values."""

import json

from conftest import FIXED_POLICY, run_python

# One chain over three sizes, and a row sum over three row lengths.
SIZES = """
import json, torch, kiln
d = kiln.DEVICE_NAME
torch.manual_seed(0)
values = []
for n in (1000, 1003, 4096):
    x = torch.randn(n)
    values.append(((x.to(d) * 1.5 + 0.25).tanh() * 2).cpu().tolist())
    values.append((x.to(d).view(1, n) * 3).sum(1).cpu().tolist())
c = kiln.metrics.counters()
print(json.dumps({"compiled": sum(c["kernels_compiled"].values()), "values": values}))
"""


def run(specialize):
    env = {"KILN_MODE": "lazy", "KILN_CACHE": "0", **FIXED_POLICY, "KILN_SHAPE_SPECIALIZE": specialize}
    r = run_python(SIZES, env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_a_specialized_kernel_serves_one_geometry_and_computes_the_same():
    generic, specialized = run("0"), run("1")
    assert generic["compiled"] == 2, generic  # the chain and the row sum, for every size
    assert specialized["compiled"] == 6, specialized  # each for each of three sizes
    for g, s in zip(generic["values"], specialized["values"]):
        assert len(g) == len(s)
        assert all(abs(a - b) <= 1e-5 * max(1.0, abs(a)) for a, b in zip(g, s)), (g[:4], s[:4])
    chains = [v for i, v in enumerate(generic["values"]) if i % 2 == 0]
    assert chains == [v for i, v in enumerate(specialized["values"]) if i % 2 == 0]  # pointwise: the same bits
