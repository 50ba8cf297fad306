"""The measuring processes `make bench` starts (bench/measure_one.py and the
probes), each writing one JSON object to the --out path added here, and the
lockstep in which a group of them takes turns at its timed steps.

Why lockstep: on the shared 2-core VM the same contender's steady step moved
by 10-30% from one process to the next when they ran one after another
(mlp_train, 5 processes each of CPU eager and kiln lazy: medians 3.3-4.8 ms
and 3.1-3.9 ms), with no steal time, while two processes of kiln lazy taking
turns of 5-6 steps differed by 0-6% (13 pairs; bench/notes.md). The
machine's speed drifts over seconds; processes that alternate every fraction
of a second see the same drift. What is left is the process's own: where its
memory landed, which thread got which core.
"""

import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import time


class Child:
    """One started child; `finish` waits for it and reads its JSON."""

    def __init__(self, argv, env, pass_fds=()):
        self._tmp = tempfile.TemporaryDirectory(prefix="kiln-bench-")
        self._out = os.path.join(self._tmp.name, "result.json")
        self._log_path = os.path.join(self._tmp.name, "log.txt")
        self.started = time.perf_counter()
        with open(self._log_path, "w") as log:
            # Its own session (process group), so that what it started (Inductor's
            # compile workers) ends with it, and a timeout ends them all.
            self.proc = subprocess.Popen(
                [sys.executable, *argv, "--out", self._out],
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                pass_fds=pass_fds,
            )

    def finish(self, timeout_s):
        """(result, wall seconds since the start); the result says why if it failed or ran past `timeout_s`."""
        try:
            self.proc.wait(timeout=max(0.0, self.started + timeout_s - time.perf_counter()))
            timed_out = False
        except subprocess.TimeoutExpired:
            timed_out = True
        wall = time.perf_counter() - self.started
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait()
        with open(self._log_path, errors="replace") as fh:
            text = fh.read()
        if timed_out:
            result = {"skipped": f"failed: timed out after {timeout_s} s"}
        else:
            try:
                with open(self._out) as fh:
                    result = json.load(fh)
            except (OSError, json.JSONDecodeError):
                tail = text.strip().splitlines()[-1:] or [""]
                result = {"skipped": f"failed: exit code {self.proc.returncode}: {tail[0][:200]}"}
        self._tmp.cleanup()
        if "skipped" in result and text.strip():
            sys.stderr.write(text[-4000:])
        return result, wall


def run_child(argv, env, timeout_s):
    """Runs one child to its end; (result, wall seconds)."""
    return Child(argv, env).finish(timeout_s)


class TurnTaker:
    """A child of a lockstep group (measure_one.py --turns): the parent's ends of its two pipes."""

    def __init__(self, argv, env, timeout_s):
        to_child, self._commands = os.pipe()
        self._replies, from_child = os.pipe()
        try:
            self.child = Child(argv + [f"--turns={to_child},{from_child}"], env, pass_fds=(to_child, from_child))
        finally:
            os.close(to_child)
            os.close(from_child)
        self._timeout_s = timeout_s
        self._deadline = self.child.started + timeout_s
        self._pending = b""
        self.timed_s, self.steps = 0.0, 0
        self.taking_turns = self._reply() == "ready"  # False: it failed before its timed steps

    def _reply(self):
        """The child's next line, or None once it closed its end or ran out of time."""
        while b"\n" not in self._pending:
            left = self._deadline - time.perf_counter()
            if left <= 0 or not select.select([self._replies], [], [], left)[0]:
                return None
            chunk = os.read(self._replies, 4096)
            if not chunk:
                return None
            self._pending += chunk
        line, self._pending = self._pending.split(b"\n", 1)
        return line.decode()

    def _send(self, line):
        try:
            os.write(self._commands, (line + "\n").encode())
            return True
        except BrokenPipeError:
            return False

    def turn(self, seconds, most_steps):
        """One turn of timed steps; False once the child stopped answering."""
        reply = self._reply() if self._send(f"turn {seconds} {most_steps}") else None
        if reply is None:
            self.taking_turns = False
            return False
        timed_s, steps = reply.split()
        self.timed_s, self.steps = float(timed_s), int(steps)
        return True

    def finish(self):
        self._send("end")
        os.close(self._commands)
        os.close(self._replies)
        return self.child.finish(self._timeout_s)


def take_turns(takers, turn_s, budget_s, min_steps, max_steps):
    """Hands out turns of `turn_s` (`budget_s` at most) until every taker has
    timed `budget_s` and `min_steps` steps (or `max_steps`), in rounds of one
    turn each, the order reversed every other round (no taker always follows
    the same one)."""
    forward = True
    while True:
        due = [t for t in takers if t.taking_turns and not done(t, budget_s, min_steps, max_steps)]
        if not due:
            return
        for t in due if forward else reversed(due):
            t.turn(min(turn_s, budget_s), max_steps - t.steps)
        forward = not forward


def done(taker, budget_s, min_steps, max_steps):
    return taker.steps >= max_steps or (taker.steps >= min_steps and taker.timed_s >= budget_s)
