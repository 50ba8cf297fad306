"""The adaptive policy's tiers. The first call of an op with new argument
shapes runs as eager mode's does, on the host, unrecorded. A trace's first
occurrences run as library kernels as they are recorded (the library tier)
until it was seen KILN_COMPILE_THRESHOLD times; then its fused kernels
compile, on the compile thread under KILN_ASYNC_COMPILE. Once they are
queued it runs fused from its first occurrence after the program waited
for the device (a .cpu(), a synchronize), and at the latest from the
occurrence after next. A trace is told apart at its first op, by that op
and the trace flushed before it. Which tier an occurrence runs in depends
on counts, program order and cache contents only, so results never depend
on compile timing. A trace whose fused kernels would each hold one op
stays in the library tier. Library kernels give eager CPU's bits; kiln's own float
sin, tanh and erf may differ from them by an ulp, so the tiers agree within
float tolerance (docs/tuning.md, "Tiers").
"""

import json
import os

import pytest

from conftest import REPO, run_python

# One trace structure, flushed five times (each .cpu() is a sync point).
SAME_TRACE_FIVE_TIMES = """
import json, torch, kiln
d = kiln.DEVICE_NAME
torch.manual_seed(0)
x = torch.randn(4096)
xd = x.to(d)
got = []
for i in range(5):
    got.append((((xd * (i + 2)).sin() + 1).tanh().amax(0)).cpu())
want = [((x * (i + 2)).sin() + 1).tanh().amax(0) for i in range(5)]
c = kiln.metrics.counters()
print(json.dumps({"tiers": c["tiers"], "compiled": c["kernels_compiled"], "values": [g.item() for g in got],
                  "close": all(torch.allclose(g, w) for g, w in zip(got, want))}))
"""


def run(code, threshold, async_compile="0", extra=None):
    env = {"KILN_MODE": "lazy", "KILN_CACHE": "0", "KILN_ASYNC_COMPILE": async_compile}
    env["KILN_COMPILE_THRESHOLD"] = str(threshold)
    env.update(extra or {})
    r = run_python(code, env=env, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_the_fixed_policy_fuses_every_trace_at_first_sight():
    out = run(SAME_TRACE_FIVE_TIMES, 1)
    assert out["close"] and out["tiers"] == {"fused": 5}, out


def test_by_default_first_occurrences_run_as_library_kernels_while_compiling():
    # The first occurrence's ops are first calls: on the host, unrecorded.
    # The second follows no trace, the third follows the second: two start
    # keys. The third key's trace finds its kernels queued; the program
    # waits (.cpu()), and the fourth runs fused.
    prompt = run(SAME_TRACE_FIVE_TIMES, 1, async_compile="1")
    assert prompt["close"] and prompt["tiers"] == {"library": 2, "fused": 2}, prompt
    late = run(SAME_TRACE_FIVE_TIMES, 1, async_compile="1", extra={"KILN_COMPILE_DELAY_MS": "200"})
    assert late["tiers"] == prompt["tiers"] and late["values"] == prompt["values"], (late, prompt)
    assert sum(late["compiled"].values()) == sum(prompt["compiled"].values()) > 0, (late, prompt)


def test_library_occurrences_give_eager_modes_bits():
    tiered = run(SAME_TRACE_FIVE_TIMES, 6)
    assert tiered["tiers"] == {"library": 4}, tiered
    eager = run(SAME_TRACE_FIVE_TIMES, 1, extra={"KILN_MODE": "eager"})
    assert tiered["values"] == eager["values"], (tiered, eager)


def test_below_the_threshold_a_trace_runs_as_library_kernels_then_fused():
    # Without the compile thread, the occurrence that reaches the threshold
    # (the third, the second of its start key) is recorded for a fused flush.
    out = run(SAME_TRACE_FIVE_TIMES, 3)
    assert out["close"] and out["tiers"] == {"library": 2, "fused": 2}, out
    fused = run(SAME_TRACE_FIVE_TIMES, 1)
    assert out["values"][3:] == fused["values"][3:], (out, fused)
    assert out["compiled"] == fused["compiled"], (out, fused)


def test_under_async_compile_the_threshold_counts_before_the_compile_is_queued():
    # Seen twice (the second and third occurrences), queued, then fused after the program's wait.
    out = run(SAME_TRACE_FIVE_TIMES, 2, async_compile="1", extra={"KILN_COMPILE_DELAY_MS": "50"})
    assert out["close"] and out["tiers"] == {"library": 2, "fused": 2}, out
    many = run(SAME_TRACE_FIVE_TIMES, 4, async_compile="1")
    assert many["close"] and many["tiers"] == {"library": 4}, many
    assert sum(many["compiled"].values()) == 0, many


def test_a_trace_never_seen_often_enough_compiles_nothing():
    few = run(SAME_TRACE_FIVE_TIMES, 6)
    assert few["close"] and few["tiers"] == {"library": 4}, few
    assert sum(few["compiled"].values()) == 0, few


# Traces that fuse nothing: an embedding's add and a layer norm, each
# between two untraced ops (index_select, mm), as varlen_infer's are.
FUSES_NOTHING = """
import json, torch, kiln
d = kiln.DEVICE_NAME
torch.manual_seed(0)
F = torch.nn.functional
table, pos, w = torch.randn(50, 64), torch.randn(600, 64), torch.randn(64, 64)
idx = torch.randint(0, 50, (600,))
tabled, posd, wd, idxd = table.to(d), pos.to(d), w.to(d), idx.to(d)
got = [torch.mm(F.layer_norm(torch.mm(F.embedding(idxd, tabled) + posd, wd), (64,)), wd).cpu() for _ in range(5)]
want = [torch.mm(F.layer_norm(torch.mm(F.embedding(idx, table) + pos, w), (64,)), w) for _ in range(5)]
c = kiln.metrics.counters()
print(json.dumps({"tiers": c["tiers"], "compiled": c["kernels_compiled"], "regions": c["regions"],
                  "equal": [torch.equal(g, x) for g, x in zip(got, want)],
                  "close": all(torch.allclose(g, x, atol=1e-5) for g, x in zip(got, want))}))
"""


def test_a_trace_whose_kernels_would_each_hold_one_op_is_compiled_one_occurrence_later():
    # Its fused kernels would do only what its ops' library kernels do,
    # less their fixed cost (ops of 38400 elements here, below 2^17): a
    # pass over new sizes would compile them for nothing, a loop repays
    # them. Two traces a step; the first step's ops are first calls, on
    # the host. Under the default threshold of 2, a trace that fuses would
    # run fused from its third occurrence (the fourth step); these, from
    # their fourth (the fifth step).
    out = run(FUSES_NOTHING, 2, async_compile="1")
    assert out["tiers"] == {"library": 6, "fused": 2} and set(out["regions"]) == {"1 op"}, out
    assert out["compiled"] == {"pointwise": 1, "row": 1}, out
    # Library kernels give eager CPU's bits; the fused layer norm may differ
    # in its last bits, as it sums its row in another order (docs/tuning.md,
    # "Where the tiers differ").
    assert out["equal"][:4] == [True] * 4 and out["close"], out
    earlier = run(FUSES_NOTHING, 1, async_compile="1")
    assert earlier["tiers"] == {"library": 4, "fused": 4}, earlier
    # Below the threshold, nothing compiled.
    never = run(FUSES_NOTHING, 5, async_compile="1")
    assert never["tiers"] == {"library": 8} and never["compiled"] == {}, never
    assert never["equal"] == [True] * 5, never
    # The fixed policy fuses the same traces at first sight.
    fixed = run(FUSES_NOTHING, 1)
    assert "library" not in fixed["tiers"] and sum(fixed["compiled"].values()) > 0, fixed
    assert set(fixed["regions"]) == {"1 op"}, fixed


# The same trace six times with no wait for the device between them: an
# untraced op (mm) ends each one, and the results are fetched at the end.
SAME_TRACE_SIX_TIMES_WITHOUT_A_WAIT = """
import json, torch, kiln
d = kiln.DEVICE_NAME
torch.manual_seed(0)
x, w = torch.randn(64, 64), torch.randn(64, 64)
xd, wd = x.to(d), w.to(d)
got = [torch.mm(((xd * (i + 2)).sin() + 1).tanh(), wd) for i in range(6)]
got = [g.cpu() for g in got]
want = [torch.mm(((x * (i + 2)).sin() + 1).tanh(), w) for i in range(6)]
c = kiln.metrics.counters()
print(json.dumps({"tiers": c["tiers"], "compiled": c["kernels_compiled"],
                  "close": all(torch.allclose(g, w, atol=1e-5) for g, w in zip(got, want))}))
"""


def test_a_queued_trace_runs_fused_after_the_programs_wait_or_else_the_occurrence_after_next():
    # First calls on the host; then two start keys (the first follows no
    # trace): the second's kernels are queued at its first occurrence, and
    # with no wait since, it runs as library kernels once more.
    out = run(SAME_TRACE_SIX_TIMES_WITHOUT_A_WAIT, 1, async_compile="1")
    assert out["close"] and out["tiers"] == {"library": 3, "fused": 2}, out
    # Waiting after every occurrence, the one after the queueing runs fused.
    waits = run(SAME_TRACE_FIVE_TIMES, 1, async_compile="1")
    assert waits["tiers"] == {"library": 2, "fused": 2}, waits


def test_a_trace_that_starts_with_a_large_op_runs_fused_at_first_sight():
    large = SAME_TRACE_FIVE_TIMES.replace("torch.randn(4096)", "torch.randn(1 << 20)")
    out = run(large, 2, async_compile="1")
    assert out["close"] and out["tiers"] == {"fused": 5}, out


# A large op alone between two untraced ops (a transformer's GELU between
# its matmuls): its launch is held until the flush, which finds no second
# op and launches it as a library kernel; no compile is waited for.
LARGE_OP_ALONE = """
import json, torch, kiln
d = kiln.DEVICE_NAME
torch.manual_seed(0)
a, w = torch.randn(1024, 1024), torch.randn(1024, 16)
ad, wd = a.to(d), w.to(d)
(ad @ wd).cpu()  # mm's first call: on the host
for _ in range(2):  # the third would run fused: its kernel was queued at the second (threshold 2)
    got = (torch.nn.functional.gelu(ad) @ wd).cpu()  # gelu: a trace of one large op, ended by mm
want = torch.nn.functional.gelu(a) @ w
c = kiln.metrics.counters()
print(json.dumps({"tiers": c["tiers"], "gelu": c["library_kernels"].get("aten::gelu", 0),
                  "equal": torch.equal(got, want)}))
"""


def test_a_large_op_alone_runs_as_a_library_kernel():
    out = run(LARGE_OP_ALONE, 2, async_compile="1")
    assert out["equal"], out  # eager CPU's own kernel: the same bits
    assert "fused" not in out["tiers"] and out["gelu"] >= 1, out


def test_a_program_whose_kernels_are_stored_runs_fused_at_first_sight(tmp_path):
    script = tmp_path / "five_traces.py"
    script.write_text(SAME_TRACE_FIVE_TIMES)
    code = f"import runpy, sys; sys.argv = [{str(script)!r}]; runpy.run_path({str(script)!r}, run_name='__main__')"
    store = {"KILN_CACHE": "1", "KILN_CACHE_DIR": str(tmp_path / "cache")}
    first = run(code, 1, async_compile="1", extra=store)
    assert first["tiers"] == {"library": 2, "fused": 2}, first
    warm = run(code, 1, async_compile="1", extra=store)
    assert warm["tiers"] == {"fused": 5}, warm
    assert sum(warm["compiled"].values()) == 0, warm
    assert warm["values"][2:] == first["values"][2:], (warm, first)


TRAIN = os.path.join(REPO, "tests", "python", "scripts", "cache_train.py")


@pytest.mark.parametrize(("threshold", "async_compile"), [(3, "0"), (1, "1")])
def test_a_training_script_gives_the_same_bits_run_to_run_whatever_the_compile_timing(threshold, async_compile):
    code = f"import runpy, sys; sys.argv = [{TRAIN!r}, '--steps', '4']; runpy.run_path({TRAIN!r}, run_name='__main__')"
    keys = ("loss", "checksum", "first")
    prompt = run(code, threshold, async_compile)
    late = run(code, threshold, async_compile, {"KILN_COMPILE_DELAY_MS": "30"})
    assert {k: late[k] for k in keys} == {k: prompt[k] for k in keys}
    at_first_sight = run(code, 1)
    assert prompt["loss"] == pytest.approx(at_first_sight["loss"], rel=1e-5, abs=1e-6)
    assert prompt["first"] == pytest.approx(at_first_sight["first"], rel=1e-5, abs=1e-6)


# A small transformer language model's training step, eight times, under the
# defaults: per step, the tiers its traces ran in, the kernels compiled and
# fused kernels launched, and the library kernels it launched, by op.
TRANSFORMER_STEPS = """
import json, torch, kiln
torch.manual_seed(0)
d = kiln.DEVICE_NAME
layer = torch.nn.TransformerEncoderLayer(32, 2, 128, dropout=0.0, batch_first=True, norm_first=True)
blocks = torch.nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
emb, norm, head = torch.nn.Embedding(64, 32), torch.nn.LayerNorm(32), torch.nn.Linear(32, 64)
model = torch.nn.ModuleList([emb, blocks, norm, head]).to(d)
mask = torch.nn.Transformer.generate_square_subsequent_mask(16).to(d)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
idx, tgt = torch.randint(0, 64, (2, 16)).to(d), torch.randint(0, 64, (2, 16)).to(d)

def counts():
    c = kiln.metrics.counters()
    return {"tiers": c["tiers"], "compiled": c["kernels_compiled"], "fused": c["executable_launches"],
            "library": {op: n for op, n in c["launches"].items() if op.startswith("aten::")}}

def minus(now, before):
    return {g: {k: n - before[g].get(k, 0) for k, n in now[g].items() if n != before[g].get(k, 0)} for g in now}

steps, before = [], counts()
for _ in range(8):
    opt.zero_grad()
    logits = head(norm(blocks(emb(idx), mask=mask, is_causal=True)))
    loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), tgt.flatten())
    loss.backward()
    opt.step()
    loss.item()
    now = counts()
    steps.append(minus(now, before))
    before = now
print(json.dumps({"steps": steps, "loss": loss.item()}))
"""


def test_a_training_loop_reaches_its_steady_step_within_five_steps_whatever_the_thread_timing():
    # Autograd sums a gradient in place only when nothing else holds its
    # storage: a device queue that held a copy's source until it ran made
    # the ops of a backward (add or add_), and with them the traces and
    # their tiers, depend on how far behind the device was.
    # Which kernels compile is decided by counts; in which step a background
    # compile finishes is not, so compiles are compared over the whole run.
    runs = [
        run(TRANSFORMER_STEPS, 2, async_compile="1"),
        run(TRANSFORMER_STEPS, 2, async_compile="1", extra={"KILN_COMPILE_DELAY_MS": "20"}),
        run(TRANSFORMER_STEPS, 2, async_compile="1", extra={"KILN_LAUNCH_BLOCKING": "1"}),
    ]
    compiled = [sum(sum(step.pop("compiled").values()) for step in r["steps"]) for r in runs]
    assert compiled[0] > 0 and len(set(compiled)) == 1, compiled
    assert runs[1]["steps"] == runs[0]["steps"], (runs[1]["steps"], runs[0]["steps"])
    assert runs[2]["steps"] == runs[0]["steps"], (runs[2]["steps"], runs[0]["steps"])
    assert len({r["loss"] for r in runs}) == 1, [r["loss"] for r in runs]
    steps = runs[0]["steps"]
    steady = steps[-1]
    assert steady["tiers"].get("fused", 0) > 0 and steady["fused"], steady
    assert all(step == steady for step in steps[4:]), steps  # from the fifth step on
    # The loss gradient's one-element fill stays a library kernel: fused
    # alone it would cost what its library kernel does, and its compile,
    # queued in the fourth step, would stall the fifth (docs/tuning.md, "Tiers").
    assert steady["library"].get("aten::fill_.Scalar") == 1, steady
