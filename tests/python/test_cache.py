"""The persistent executable cache (KILN_CACHE_DIR), from the outside: fresh
processes running a training script against one store."""

import json
import os
import re
import stat
import subprocess
import sys

import pytest

from conftest import POLICY, REPO, run_python, same_under_policy

SCRIPT = os.path.join(REPO, "tests", "python", "scripts", "cache_train.py")
CHAINS = os.path.join(REPO, "tests", "python", "scripts", "cache_chains.py")


def train(cache_dir, *args, env=None, check=True, script=SCRIPT):
    """Runs the script in a fresh process on `cache_dir`; its JSON line, and stderr."""
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("KILN_")}
    # The pytest process's policy: the fixed one (every trace compiled and
    # fused at its first flush), or, in `make test-adaptive`, the defaults.
    full_env.update({"KILN_MODE": "lazy", "KILN_CACHE_DIR": str(cache_dir), **POLICY})
    full_env.update(env or {})
    r = subprocess.run(
        [sys.executable, script, *args], env=full_env, capture_output=True, text=True, timeout=180, cwd=REPO
    )
    if check:
        assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout.strip().splitlines()[-1]) if r.returncode == 0 else None
    return out, r.stderr


def same_results(a, b):
    keys = ("loss", "extra", "checksum", "first")
    return all(same_under_policy(a[k], b[k], rel=1e-5) for k in keys)


def test_a_second_run_compiles_nothing_and_gives_the_same_bits(tmp_path):
    cold, _ = train(tmp_path / "c")
    assert cold["compiled"] > 0
    assert cold["store"].get("miss", 0) == cold["compiled"]
    assert cold["store"].get("hit", 0) == 0
    warm, _ = train(tmp_path / "c")
    assert warm["compiled"] == 0, warm
    assert warm["store"]["hit"] == cold["compiled"]
    assert same_results(cold, warm)
    off, _ = train(tmp_path / "off", env={"KILN_CACHE": "0"})
    assert same_results(cold, off)
    assert off["store"] == {}
    assert not (tmp_path / "off").exists()


def test_the_directory_is_private(tmp_path):
    train(tmp_path / "c")
    assert stat.S_IMODE(os.stat(tmp_path / "c").st_mode) == 0o700
    assert stat.S_IMODE(os.stat(tmp_path / "c" / "store").st_mode) == 0o700


def test_a_directory_others_can_write_is_refused_and_the_run_goes_on(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o777)
    reference, _ = train(tmp_path / "ok")
    out, err = train(shared)
    assert "writable by other users (mode 0777)" in err
    assert "UserWarning" in err
    assert out["compiled"] > 0 and out["store"] == {}
    assert same_results(reference, out)
    assert os.listdir(shared) == []


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a directory to another user needs root")
def test_a_directory_another_user_owns_is_refused(tmp_path):
    theirs = tmp_path / "theirs"
    theirs.mkdir(mode=0o700)
    os.chown(theirs, 65534, 65534)
    out, err = train(theirs)
    assert "is owned by user 65534" in err
    assert out["store"] == {}


def test_a_directory_that_cannot_be_created_degrades_to_memory(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    out, err = train(blocker / "kiln")
    assert "cannot be created" in err and "in this process's memory only" in err
    assert out["compiled"] > 0


def test_another_opt_level_misses_and_trains_alike(tmp_path):
    """KILN_OPT_LEVEL changes the generated code: each level is its own cache
    environment, and every level trains to the same numbers within tolerance
    (row sums are summed in order below level 2, in vector lanes from it)."""
    cold, _ = train(tmp_path / "c")
    for level in ("0", "1", "3"):
        other, log = train(tmp_path / "c", env={"KILN_OPT_LEVEL": level, "KILN_LOG": "cache"})
        assert other["store"] == {"miss (other environment)": cold["compiled"]}, (level, other["store"])
        reasons = [line for line in log.splitlines() if ": miss (" in line]
        # (the closest stored environment: the default's, or an earlier level's)
        assert reasons and all(re.search(f"opt_level: '[0-3]' there, '{level}' here", r) for r in reasons), reasons
        assert other["loss"] == pytest.approx(cold["loss"], rel=1e-4)
        assert other["checksum"] == pytest.approx(cold["checksum"], rel=1e-4, abs=1e-4)


def test_read_only_mode_serves_hits_and_never_writes(tmp_path):
    cold, _ = train(tmp_path / "c")
    before = sorted((p.name, p.stat().st_size, p.stat().st_mtime_ns) for p in (tmp_path / "c" / "store").iterdir())
    warm, _ = train(tmp_path / "c", "--variant", "3", env={"KILN_CACHE_READONLY": "1"})
    assert warm["store"]["hit"] == cold["compiled"]
    assert warm["store"]["miss"] >= 1  # the variant's own chain: compiled, not stored
    after = sorted((p.name, p.stat().st_size, p.stat().st_mtime_ns) for p in (tmp_path / "c" / "store").iterdir())
    assert after == before
    again, _ = train(tmp_path / "c", "--variant", "3")
    assert again["store"]["miss"] == warm["store"]["miss"]  # nothing of the read-only run was stored


def test_a_code_shaping_knob_misses(tmp_path):
    cold, _ = train(tmp_path / "c")
    fast, log = train(tmp_path / "c", env={"KILN_FAST_MATH": "1", "KILN_LOG": "cache"})
    assert fast["store"].get("hit", 0) == 0
    assert fast["compiled"] == cold["compiled"]
    # Each miss says why: the same kernel is stored, built with another value of the knob.
    assert fast["store"] == {"miss (other environment)": cold["compiled"]}, fast["store"]
    reasons = [line for line in log.splitlines() if ": miss (" in line]
    assert len(reasons) == cold["compiled"], log[-3000:]
    assert all("built for another environment: fast_math: '0' there, '1' here" in line for line in reasons), reasons
    both, _ = train(tmp_path / "c", env={"KILN_FAST_MATH": "1"})
    assert both["compiled"] == 0


def corrupt_the_tables(tmp_path):
    """A cold run, a second writer session, then flipped bytes in every table file; the cold run's result."""
    cold, _ = train(tmp_path / "c")
    train(tmp_path / "c", "--variant", "2")  # a second writer session: the first batch is in a table file now
    # Its kernel list would have the next run preload the variant's chain too:
    # the tests count what a plain run loads and compiles.
    for profile in (tmp_path / "c").glob("kernels-*.bin"):
        profile.unlink()
    tables = sorted((tmp_path / "c" / "store").glob("*.sst"), key=lambda p: p.stat().st_size)
    assert tables, os.listdir(tmp_path / "c" / "store")
    for table in tables:
        data = bytearray(table.read_bytes())
        for i in range(len(data) // 4, len(data) // 2, 97):  # a run of flips in the data blocks
            data[i] ^= 0x5A
        table.write_bytes(bytes(data))
    return cold


def test_a_flipped_byte_on_disk_is_caught_and_the_kernel_recompiled(tmp_path):
    cold = corrupt_the_tables(tmp_path)
    out, _ = train(tmp_path / "c")
    assert same_results(cold, out)
    assert out["store"].get("hit", 0) + out["compiled"] == cold["compiled"]
    assert out["compiled"] > 0
    assert out["store"].get("corrupt", 0) > 0 or out["store"].get("miss", 0) > 0
    healed, _ = train(tmp_path / "c")
    assert same_results(cold, healed)


def test_the_run_after_a_corruption_compiles_nothing(tmp_path):
    """The recompiling run rebuilds the damaged database keeping what reads back, so its successor hits."""
    corrupt_the_tables(tmp_path)
    train(tmp_path / "c")
    healed, _ = train(tmp_path / "c")
    assert healed["compiled"] == 0, healed


def test_the_store_stays_within_its_cap_and_keeps_the_most_recent(tmp_path):
    """A workload that wants about three times KILN_CACHE_MAX_MB: the least recently used entries go."""
    env = {"KILN_CACHE_MAX_MB": "1"}
    cold, _ = train(tmp_path / "c", "120", env=env, script=CHAINS)
    assert cold["store"]["evicted"] > 0, cold
    r = run_python(
        "from kiln import _C; e = _C.cache_entries(); print(sum(x[1] for x in e), max(x[1] for x in e), len(e))",
        env={"KILN_CACHE_DIR": str(tmp_path / "c")},
    )
    stored_bytes, largest, entries = map(int, r.stdout.split())
    assert stored_bytes <= (1 << 20) + largest
    assert entries + cold["store"]["evicted"] == cold["compiled"]
    newest, _ = train(tmp_path / "c", "120", "--first", "110", env=env, script=CHAINS)
    assert newest["compiled"] == 0 and newest["store"]["hit"] > 0, newest  # the newest kernels were kept
    oldest, log = train(tmp_path / "c", "10", env={**env, "KILN_LOG": "cache"}, script=CHAINS)
    assert oldest["compiled"] == 10, oldest  # the oldest were evicted: all ten compiled again
    assert oldest["store"].get("miss (evicted)") == 10, oldest  # and each miss says so
    assert sum("s ago, the least recently used past the size cap)" in line for line in log.splitlines()) == 10, log


def test_a_warm_start_skips_the_first_sight_checks(tmp_path):
    """Argument cases an earlier run checked are not checked again: no host round trips at first sight."""
    cold, _ = train(tmp_path / "c")
    assert cold["verdicts"]["learned"] > 0 and "used" not in cold["verdicts"]
    assert cold["first_calls"] > 0
    (verdicts,) = (tmp_path / "c").glob("verdicts-*.bin")
    assert stat.S_IMODE(verdicts.stat().st_mode) == 0o600
    warm, _ = train(tmp_path / "c")
    assert warm["verdicts"]["used"] > 0 and "learned" not in warm["verdicts"], warm["verdicts"]
    assert warm["first_calls"] == 0
    assert same_results(cold, warm)
    off, _ = train(tmp_path / "off", env={"KILN_CACHE": "0"})
    assert off["verdicts"] == {} and off["first_calls"] == cold["first_calls"]


def test_a_warm_start_still_raises_eager_errors_at_the_op(tmp_path):
    code = (
        "import torch, kiln\n"
        "a = torch.ones(3, device=kiln.DEVICE_NAME)\n"
        "print((a + a).sum().item())\n"
        "try:\n"
        "    a + torch.ones(4, device=kiln.DEVICE_NAME)\n"
        "except RuntimeError as e:\n"
        "    print('raised at the op:', 'must match the size' in str(e))\n"
    )
    env = {"KILN_CACHE_DIR": str(tmp_path / "c"), "KILN_MODE": "lazy"}
    for run in ("cold", "warm"):
        r = run_python(code, env=env)
        assert r.returncode == 0, r.stderr
        assert r.stdout.split() == ["6.0", "raised", "at", "the", "op:", "True"], (run, r.stdout)


def test_a_damaged_verdict_file_is_ignored_and_replaced(tmp_path):
    cold, _ = train(tmp_path / "c")
    (verdicts,) = (tmp_path / "c").glob("verdicts-*.bin")
    data = bytearray(verdicts.read_bytes())
    data[len(data) // 2] ^= 0x40
    verdicts.write_bytes(bytes(data))
    out, log = train(tmp_path / "c", env={"KILN_LOG": "cache"})
    assert "ignored: a checksum mismatch" in log
    assert same_results(cold, out)
    assert "used" not in out["verdicts"] and out["first_calls"] == cold["first_calls"]  # nothing of it trusted
    again, _ = train(tmp_path / "c")
    assert again["verdicts"]["used"] > 0 and again["first_calls"] == 0  # rewritten whole at the exit


def test_read_only_mode_uses_verdicts_and_never_writes_them(tmp_path):
    train(tmp_path / "c")
    (verdicts,) = (tmp_path / "c").glob("verdicts-*.bin")
    before = verdicts.read_bytes()
    out, _ = train(tmp_path / "c", "--variant", "2", env={"KILN_CACHE_READONLY": "1"})
    assert out["verdicts"]["used"] > 0 and "learned" not in out["verdicts"]
    assert verdicts.read_bytes() == before


def test_a_warm_start_finds_its_kernels_loaded_and_its_device_memory_reserved(tmp_path):
    """What a program's last run needed is made ready while it starts
    (engine/warm_start.h): its kernels loaded from the store, its device
    memory reserved and paged in; its flushes and allocations take them."""
    cold, _ = train(tmp_path / "c")
    assert cold["warm_start"] == {}
    for kind in ("memory", "kernels"):
        (profile,) = (tmp_path / "c").glob(f"{kind}-*.bin")
        assert stat.S_IMODE(profile.stat().st_mode) == 0o600
    warm, _ = train(tmp_path / "c", "--idle-s", "1")
    assert warm["warm_start"]["preloaded_kernels"] == cold["compiled"], warm["warm_start"]
    assert warm["store"]["hit"] == cold["compiled"]  # each loaded once: by the preload
    assert warm["compiled"] == 0
    assert warm["warm_start"]["prefilled_bytes"] > 0, warm["warm_start"]
    assert 0 < warm["warm_start"]["prefill_used_bytes"] <= warm["warm_start"]["prefilled_bytes"]
    assert same_results(cold, warm)
    before = [p.read_bytes() for p in sorted((tmp_path / "c").glob("[mk]e*-*.bin"))]
    ro, _ = train(tmp_path / "c", "--idle-s", "1", "--variant", "3", env={"KILN_CACHE_READONLY": "1"})
    assert ro["warm_start"]["prefilled_bytes"] > 0 and ro["warm_start"]["preloaded_kernels"] > 0
    assert [p.read_bytes() for p in sorted((tmp_path / "c").glob("[mk]e*-*.bin"))] == before  # used, not saved
    off, _ = train(tmp_path / "off", env={"KILN_CACHE": "0"})
    assert off["warm_start"] == {}


@pytest.mark.parametrize("kind", ["memory", "kernels"])
def test_a_damaged_warm_start_file_is_ignored_and_replaced(tmp_path, kind):
    cold, _ = train(tmp_path / "c")
    (profile,) = (tmp_path / "c").glob(f"{kind}-*.bin")
    data = bytearray(profile.read_bytes())
    data[-3] ^= 0x10
    profile.write_bytes(bytes(data))
    out, log = train(tmp_path / "c", "--idle-s", "0.5", env={"KILN_LOG": "cache"})
    assert f"{kind} profile" in log and "ignored: a checksum mismatch" in log, log[-2000:]
    counter = {"memory": "prefilled_bytes", "kernels": "preloaded_kernels"}[kind]
    other = {"memory": "preloaded_kernels", "kernels": "prefilled_bytes"}[kind]
    assert out["warm_start"].get(counter, 0) == 0 and out["warm_start"][other] > 0  # the other file is intact
    assert same_results(cold, out)
    again, _ = train(tmp_path / "c", "--idle-s", "1")
    assert again["warm_start"][counter] > 0  # rewritten whole at the exit


def test_a_program_given_with_dash_c_keeps_no_warm_start_files(tmp_path):
    code = "import torch, kiln\nprint((torch.ones(1000, device=kiln.DEVICE_NAME) * 2).sum().item())\n"
    r = run_python(code, env={"KILN_CACHE_DIR": str(tmp_path / "c"), "KILN_MODE": "lazy"})
    assert r.returncode == 0, r.stderr
    assert list((tmp_path / "c").glob("memory-*.bin")) == list((tmp_path / "c").glob("kernels-*.bin")) == []


def test_cli_stats_list_verify_and_clear(tmp_path):
    cold, _ = train(tmp_path / "c")
    env = {"KILN_CACHE_DIR": str(tmp_path / "c")}

    def cli(*args):
        return run_python(f"from kiln.__main__ import main; main({list(args)!r})", env=env)

    r = cli("cache", "stats")
    assert r.returncode == 0, r.stderr
    assert f"entries: {cold['compiled']} (0 bad" in r.stdout
    r = cli("cache", "list")
    assert len(r.stdout.strip().splitlines()) == cold["compiled"]
    assert all(line.endswith("ok") for line in r.stdout.strip().splitlines())
    r = cli("cache", "verify")
    assert r.returncode == 0 and f"{cold['compiled']} entries, 0 bad" in r.stdout
    r = cli("cache", "clear")
    assert f"{cold['compiled']} entries deleted" in r.stdout
    assert "entries: 0 " in cli("cache", "stats").stdout
    again, _ = train(tmp_path / "c")
    assert again["compiled"] == cold["compiled"]


def test_eight_processes_share_one_empty_cache(tmp_path):
    """Eight processes at once, each with a shared workload and a kernel of its own."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("KILN_")}
    env.update({"KILN_MODE": "lazy", "KILN_CACHE_DIR": str(tmp_path / "c"), **POLICY})
    procs = [
        subprocess.Popen(
            [sys.executable, SCRIPT, "--variant", str(v)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=REPO,
        )
        for v in range(1, 9)
    ]
    firsts = []
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err[-3000:]
        firsts.append(json.loads(out.strip().splitlines()[-1]))
    for v in range(1, 9):
        again, _ = train(tmp_path / "c", "--variant", str(v))
        assert again["compiled"] == 0, (v, again)
        assert same_results(firsts[v - 1], again)


def cli(cache_dir, *args, env=None):
    """`python -m kiln ARGS` in a fresh process on `cache_dir`."""
    full_env = {"KILN_CACHE_DIR": str(cache_dir)}
    full_env.update(env or {})
    return run_python(f"from kiln.__main__ import main; main({list(args)!r})", env=full_env)


def stored_count(cache_dir):
    r = cli(cache_dir, "cache", "stats")
    assert r.returncode == 0, r.stderr
    return int(r.stdout.split("entries: ")[1].split()[0])


def test_export_then_import_into_an_empty_store_compiles_nothing(tmp_path):
    cold, _ = train(tmp_path / "a")
    exported = tmp_path / "kernels.kiln"
    r = cli(tmp_path / "a", "cache", "export", str(exported))
    assert r.returncode == 0, r.stderr
    assert f"exported {cold['compiled']} entries" in r.stdout
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".kiln-export")] == []  # no temp file left
    r = cli(tmp_path / "b", "cache", "import", str(exported))
    assert r.returncode == 0, r.stderr
    assert f"imported {cold['compiled']}, skipped 0 built for another environment, 0 bad" in r.stdout
    warm, _ = train(tmp_path / "b")
    assert warm["compiled"] == 0, warm
    assert warm["store"]["hit"] == cold["compiled"]
    assert same_results(cold, warm)


@pytest.mark.parametrize("damage", ["flip", "truncate"])
def test_a_damaged_export_file_is_refused_and_nothing_is_written(tmp_path, damage):
    cold, _ = train(tmp_path / "a")
    exported = tmp_path / "kernels.kiln"
    assert cli(tmp_path / "a", "cache", "export", str(exported)).returncode == 0
    data = bytearray(exported.read_bytes())
    if damage == "flip":
        data[len(data) // 2] ^= 0x04
    else:
        del data[len(data) - 100 :]
    exported.write_bytes(bytes(data))
    r = cli(tmp_path / "b", "cache", "import", str(exported))
    assert r.returncode == 1
    assert "is refused" in r.stderr and "nothing was imported" in r.stderr, r.stderr
    assert "checksum mismatch" in r.stderr
    assert stored_count(tmp_path / "b") == 0
    again, _ = train(tmp_path / "b")
    assert again["compiled"] == cold["compiled"]


def test_import_skips_entries_built_for_another_environment(tmp_path):
    fast = {"KILN_FAST_MATH": "1"}
    cold, _ = train(tmp_path / "a", env=fast)
    exported = tmp_path / "fast.kiln"
    assert cli(tmp_path / "a", "cache", "export", str(exported), env=fast).returncode == 0
    r = cli(tmp_path / "b", "cache", "import", str(exported))
    assert r.returncode == 0, r.stderr
    assert f"imported 0, skipped {cold['compiled']} built for another environment, 0 bad" in r.stdout
    assert stored_count(tmp_path / "b") == 0
    r = cli(tmp_path / "b", "cache", "import", str(exported), env=fast)
    assert f"imported {cold['compiled']}, skipped 0" in r.stdout


def test_prune_deletes_what_another_environment_built(tmp_path):
    cold, _ = train(tmp_path / "c")
    train(tmp_path / "c", env={"KILN_FAST_MATH": "1"})
    assert stored_count(tmp_path / "c") == 2 * cold["compiled"]
    r = cli(tmp_path / "c", "cache", "prune")
    assert r.returncode == 0, r.stderr
    assert f"deleted {cold['compiled']} entries (bad or built for another environment), kept {cold['compiled']}" in (
        r.stdout
    )
    assert stored_count(tmp_path / "c") == cold["compiled"]
    warm, _ = train(tmp_path / "c")
    assert warm["compiled"] == 0
    fast, _ = train(tmp_path / "c", env={"KILN_FAST_MATH": "1"})
    assert fast["compiled"] == cold["compiled"]  # its entries were the ones pruned


def test_read_only_mode_refuses_the_commands_that_write(tmp_path):
    cold, _ = train(tmp_path / "c")
    exported = tmp_path / "kernels.kiln"
    assert cli(tmp_path / "c", "cache", "export", str(exported), env={"KILN_CACHE_READONLY": "1"}).returncode == 0
    for args in (["clear"], ["prune"], ["import", str(exported)]):
        r = cli(tmp_path / "c", "cache", *args, env={"KILN_CACHE_READONLY": "1"})
        assert r.returncode == 1, (args, r.stdout)
        assert "KILN_CACHE_READONLY=1 makes read-only" in r.stderr, r.stderr
    assert stored_count(tmp_path / "c") == cold["compiled"]
    r = cli(tmp_path / "c", "cache", "import")
    assert r.returncode == 1 and "needs a FILE" in r.stderr


def test_stats_shows_the_recent_runs(tmp_path):
    cold, _ = train(tmp_path / "c")
    warm, _ = train(tmp_path / "c")
    log = tmp_path / "c" / "runs.log"
    assert stat.S_IMODE(os.stat(log).st_mode) == 0o600
    n = cold["compiled"]
    for _ in range(2):  # a `stats` run uses no kernels: it adds no run of its own
        r = cli(tmp_path / "c", "cache", "stats")
        assert r.returncode == 0, r.stderr
        assert f"runs recorded: 2: {n} hits, {n} misses, hit rate 50.0%, {n} compiles, 0 evicted" in r.stdout
    runs = [line for line in r.stdout.splitlines() if " pid " in line]
    assert len(runs) == 2
    assert runs[0].endswith(f"0 hits, {n} misses, {n} compiles, 0 evicted")
    assert runs[1].endswith(f"{warm['store']['hit']} hits, 0 misses, 0 compiles, 0 evicted")
    train(tmp_path / "c", env={"KILN_CACHE_READONLY": "1"})
    assert len(log.read_text().splitlines()) == 2  # read-only runs never write the directory


def test_a_full_disk_degrades_to_memory_with_one_warning(tmp_path):
    """Writes past 32 KiB of one file fail with EFBIG (Python ignores SIGXFSZ), as on a full disk. The entries
    of the longest chains (up to 45 KiB each) cannot fit in the write-ahead log however the writer batches
    them; the first, smaller ones may. (At 64 KiB, a writer quick enough to store one entry per batch met no
    failure at all: CI failed so.)"""
    import resource

    reference, _ = train(tmp_path / "ok", "40", script=CHAINS)
    env = {k: v for k, v in os.environ.items() if not k.startswith("KILN_")}
    env.update({"KILN_MODE": "lazy", "KILN_CACHE_DIR": str(tmp_path / "full"), **POLICY})
    limit = 32 * 1024
    r = subprocess.run(
        [sys.executable, CHAINS, "40"],
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        cwd=REPO,
        preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit)),
    )
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["total"] == reference["total"]
    assert out["compiled"] == reference["compiled"]
    assert r.stderr.count("UserWarning") == 1, r.stderr
    assert "could not be written" in r.stderr and "in-memory cache only" in r.stderr, r.stderr
    assert stored_count(tmp_path / "full") < out["compiled"]  # what did reach the store still reads back


# The defaults, whichever policy the pytest process runs under: these tests are about them.
ADAPTIVE = {"KILN_ASYNC_COMPILE": "1", "KILN_COMPILE_THRESHOLD": "2"}


def test_under_the_defaults_the_traces_a_program_fused_before_run_fused_from_their_first_occurrence(tmp_path):
    # Five steps: the cold run's traces are seen often enough to run fused.
    cold, _ = train(tmp_path / "c", "--steps", "5", env=ADAPTIVE)
    assert cold["tiers"].get("library", 0) > 0 and cold["tiers"].get("fused", 0) > 0, cold
    warm, _ = train(tmp_path / "c", "--steps", "5", env=ADAPTIVE)
    # The traces the cold run fused run fused at once, from kernels it
    # stored; the few it never fused (its first step's, which differ: its
    # first calls ran on the host, unrecorded) run as library kernels, and
    # compile nothing in a run of five steps, as in the cold run.
    assert warm["compiled"] == 0, warm
    assert warm["tiers"]["fused"] > cold["tiers"]["fused"], (cold, warm)
    assert warm["tiers"].get("library", 0) < cold["tiers"]["library"], (cold, warm)
    # A fused kernel's GELU (kiln's own erf) may differ from eager's in the last bits.
    assert warm["loss"] == pytest.approx(cold["loss"], rel=1e-5, abs=1e-6)
    assert warm["checksum"] == pytest.approx(cold["checksum"], rel=1e-5)


def test_a_damaged_fused_traces_file_is_ignored_and_replaced(tmp_path):
    cold, _ = train(tmp_path / "c", "--steps", "5", env=ADAPTIVE)
    (profile,) = (tmp_path / "c").glob("traces-*.bin")
    assert stat.S_IMODE(profile.stat().st_mode) == 0o600
    data = bytearray(profile.read_bytes())
    data[-3] ^= 0x10
    profile.write_bytes(bytes(data))
    out, log = train(tmp_path / "c", "--steps", "5", env={**ADAPTIVE, "KILN_LOG": "cache"})
    assert "traces profile" in log and "ignored: a checksum mismatch" in log, log[-2000:]
    assert out["loss"] == pytest.approx(cold["loss"], rel=1e-5, abs=1e-6)
    assert profile.read_bytes() != bytes(data)  # rewritten whole at the exit
    again, log = train(tmp_path / "c", "--steps", "5", env={**ADAPTIVE, "KILN_LOG": "cache"})
    assert "traces profile" not in log and again["compiled"] == 0, (log[-2000:], again)


def test_with_deterministic_algorithms_a_warm_run_takes_the_cold_runs_tiers_and_bits(tmp_path):
    cold, _ = train(tmp_path / "c", "--deterministic", env=ADAPTIVE)
    warm, _ = train(tmp_path / "c", "--deterministic", env=ADAPTIVE)
    assert warm["compiled"] == 0, warm
    assert warm["tiers"] == cold["tiers"] and cold["tiers"].get("library", 0) > 0, (cold, warm)
    assert same_results(cold, warm)


# The store's writer, and RocksDB's threads, run at idle priority: at the
# program's they took a core from the device's kernels in the steps that
# stored the first kernels. So the exit writes what is still queued on the
# program's own thread. Here a busy process holds the one CPU the program
# may use, and every kernel must still reach the store.
STORE_THREADS = """
import glob, json, runpy, sys
sys.argv = [sys.argv[1]]
runpy.run_path(sys.argv[0], run_name="__main__")
policies = {}
for stat in glob.glob("/proc/self/task/*/stat"):
    tid = stat.split("/")[4]
    try:
        name = open(f"/proc/self/task/{tid}/comm").read().strip()
        policy = int(open(stat).read().rsplit(")", 1)[1].split()[38])
    except OSError:  # a thread that ended meanwhile
        continue
    if name == "kiln-store" or name.startswith("rocksdb"):
        policies.setdefault(name, []).append(policy)
print(json.dumps(policies))
"""


def test_the_store_writes_at_idle_priority_and_the_exit_stores_every_kernel_on_a_busy_core(tmp_path):
    pin = lambda: os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})  # noqa: E731
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"], preexec_fn=pin)
    try:
        env = {k: v for k, v in os.environ.items() if not k.startswith("KILN_")}
        env.update({"KILN_MODE": "lazy", "KILN_CACHE_DIR": str(tmp_path / "c"), **POLICY})
        r = subprocess.run(
            [sys.executable, "-c", STORE_THREADS, SCRIPT],
            env=env,
            capture_output=True,
            text=True,
            timeout=180,
            cwd=REPO,
            preexec_fn=pin,
        )
    finally:
        busy.kill()
        busy.wait()
    assert r.returncode == 0, r.stderr[-3000:]
    lines = r.stdout.strip().splitlines()
    cold, policies = json.loads(lines[-2]), json.loads(lines[-1])
    assert cold["compiled"] > 0, cold
    assert policies.get("kiln-store"), policies  # the writer outlives the script
    assert all(p == 5 for ps in policies.values() for p in ps), policies  # SCHED_IDLE
    warm, _ = train(tmp_path / "c")
    assert warm["compiled"] == 0, warm
    assert warm["store"]["hit"] == cold["compiled"], (cold, warm)
