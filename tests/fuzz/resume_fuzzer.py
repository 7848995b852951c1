"""``%resume`` kill fuzzer: SIGKILL a real kernel at random moments, then check ``%resume``.

Each round starts a kernel through jupyter_client, loads the extension and runs
a random sequence of ``%%checkpoint cN`` cells.  Cell ``i`` binds ``vi``, an array
derived from the last element of ``v(i-1)``, and ``tagi``, a string naming the
round and ``vi[0]``, so a stale, half-written or other round's value has another
digest.  The sizes are mixed: mostly under 64 KB (staged as one record), some
1 MB (staged in the kernel's process), some 8 MB (written by a forked child) and,
in every fifth round, one of 200 MB.  The harness records which cells' replies
came back, then SIGKILLs the kernel (never its forked writer, as in a real crash)

* ``in-cell``: while a cell runs (it may sleep in the middle),
* ``sleeper``: during a following cell that sleeps,
* ``between``: a random moment after a reply, with the kernel idle,
* ``after-reply``: as soon as a reply is read.

A fresh kernel then runs ``%load_ext ipy_resume`` and ``%resume``, and the
harness reads back the digest of every ``vi`` and ``tagi`` it holds.  The
expected states come from running the same cell bodies in the harness's own
process.  A round passes when the resumed names equal the state after the last
cell whose reply the harness read, or after the cell that was running at the
kill (it may have returned without its reply being read).  It is *short* when
it equals an earlier state of the round (the last returned cell is missing)
and *wrong* otherwise (a half-written value, a mix, a value of another round,
the sleeper's name).

A store continues over a series of rounds (``--series``, new store after that):
later rounds' ``%resume`` must pick the latest kernel session among several,
with an older session's names and checkpoints of the same cells in the store.
When no cell of a round returned, ``%resume`` must give what the previous
round's ``%resume`` gave (its restore is the latest session), or the state after
the running cell.

Run it alone with ``python tests/fuzz/resume_fuzzer.py --rounds N``; it prints
a JSON summary as its last line.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import queue
import random
import shutil
import statistics
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from kernel_utils import Kernel, kernel_env

MODES = ("in-cell", "sleeper", "between", "after-reply")
# name: (elements, dtype, the harness's guess of the cell's own time in seconds)
SIZES: dict[str, tuple[int, str, float]] = {
    "small": (0, "int64", 0.03),  # 1..6000 elements, drawn per cell: at most 48 KB
    "1MB": (131_072, "int64", 0.05),
    "8MB": (1_000_000, "float64", 0.07),
    "200MB": (25_000_000, "int64", 0.7),
}
BIG_EVERY = 5  # rounds with a 200 MB cell: 1 in BIG_EVERY
SLEEPER = "%%checkpoint sleeper\nimport time\ntime.sleep(60)\nzz = 1"
NAMES = r"(v|tag)\d+|zz"
VERDICTS = ("passed", "short", "wrong", "errors")

# The digest both sides take: the kernel's probe runs this source, the harness execs it.
DIGEST_SOURCE = """
def _digest(value):
    import hashlib
    import numpy as np
    if isinstance(value, np.ndarray):
        h = hashlib.sha256(f"{value.dtype.str}{value.shape}".encode())
        h.update(memoryview(np.ascontiguousarray(value)).cast("B"))
        return h.hexdigest()[:16]
    return "repr:" + hashlib.sha256(repr(value).encode()).hexdigest()[:16]
"""
PROBE = (
    DIGEST_SOURCE
    + "import json as _json, re as _re\n"
    + f"print(_json.dumps({{_n: _digest(_v) for _n, _v in list(globals().items()) "
    f"if _re.fullmatch({NAMES!r}, _n)}}, sort_keys=True))"
)


def _digest_function() -> Any:
    space: dict[str, Any] = {}
    exec(DIGEST_SOURCE, space)
    return space["_digest"]


@dataclass
class Cell:
    """One ``%%checkpoint`` cell of a round: its source, and its body without the sleep."""

    index: int
    size: str
    sleep: float
    source: str
    body: str

    @property
    def guess(self) -> float:
        return SIZES[self.size][2] + self.sleep


def make_cell(index: int, size: str, elements: int, sleep: float, round_id: int) -> Cell:
    """Cell *index*: ``v<index>`` from the previous cell's last element, then a tag."""
    _, dtype, _ = SIZES[size]
    base = round_id if index == 0 else f"(int(v{index - 1}[-1]) * 31 + {index}) % 2**40"
    lines = [
        "import time",
        "import numpy as np",
        f"v{index} = np.arange({elements}, dtype=np.{dtype}) + {base}",
        f"time.sleep({sleep:.3f})",
        f"tag{index} = '{round_id}:{index}:' + str(v{index}[:1].tolist())",
    ]
    body = "\n".join(line for line in lines if not line.startswith("time.sleep"))
    return Cell(index, size, sleep, f"%%checkpoint c{index}\n" + "\n".join(lines), body)


@dataclass
class Plan:
    """What a round runs and where the kill lands."""

    cells: list[Cell]
    mode: str
    target: int  # in-cell: the running cell; otherwise the last cell run before the kill
    delay: float  # seconds after sending the running cell / after the reply


@dataclass
class Outcome:
    seen: int = -1  # the last cell whose reply the harness read
    running: int | None = None  # the cell in flight at the kill
    unseen_reply: bool = False  # its reply was found after the kill
    errors: list[str] = field(default_factory=list)


def make_plan(rng: random.Random, round_no: int) -> Plan:
    """Round *round_no*'s cells and kill: the kill moment cycles through :data:`MODES`."""
    count = rng.randint(2, 6)
    sizes = [rng.choices(("small", "1MB", "8MB"), weights=(70, 8, 22))[0] for _ in range(count)]
    big = round_no % BIG_EVERY == BIG_EVERY // 2
    if big:
        sizes[rng.randrange(count)] = "200MB"
    mode = MODES[round_no % len(MODES)]
    if big:  # the kill lands in, or just after, the 200 MB cell or its forked save
        target = rng.randint(sizes.index("200MB"), min(sizes.index("200MB") + 1, count - 1))
    else:
        target = rng.randrange(count)
    round_id = rng.randrange(1 << 20, 1 << 40)
    cells = []
    for i, size in enumerate(sizes):
        elements = rng.randint(1, 6000) if size == "small" else SIZES[size][0]
        # a cell killed while it runs mostly sleeps in the middle: its kill lands before,
        # in or after the sleep, or (a quarter of kills) after its reply
        sleepy = 0.7 if mode == "in-cell" and i == target else 0.5
        sleep = rng.uniform(0.05, 0.6) if rng.random() < sleepy else 0.0
        cells.append(make_cell(i, size, elements, sleep, round_id))
    if mode == "in-cell":
        delay = rng.uniform(0, 1.3 * cells[target].guess)
    elif mode == "sleeper":
        delay = rng.uniform(0, 1.5)
    elif mode == "between":
        delay = rng.uniform(0, 1.0)
    else:
        delay = 0.0
    return Plan(cells, mode, target, delay)


def expected_states(plan: Plan, before: dict[str, str]) -> list[dict[str, str]]:
    """Digests after each cell, from the same bodies run here; the last item is *before*
    (so ``states[-1]`` is the state before the round, as list indices go)."""
    digest = _digest_function()
    space: dict[str, Any] = {}
    states: list[dict[str, str]] = []
    for cell in plan.cells:
        exec(cell.body, space)
        made = {n: digest(space[n]) for n in (f"v{cell.index}", f"tag{cell.index}")}
        states.append({**(states[-1] if states else {}), **made})
        space.pop(f"v{cell.index - 1}", None)  # only the last array is an input
    states.append(before)
    return states


def _reply_by(kernel: Kernel, msg_id: str, deadline: float) -> dict[str, Any] | None:
    """The execute_reply to *msg_id* if it comes before *deadline* (monotonic seconds)."""
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return None
        try:
            msg: dict[str, Any] = kernel.client.get_shell_msg(timeout=left)
        except queue.Empty:
            return None
        if msg["parent_header"].get("msg_id") == msg_id:
            return msg


def run_until_kill(kernel: Kernel, plan: Plan) -> Outcome:
    """Run the plan's cells in *kernel* and SIGKILL it where the plan says."""
    out = Outcome()
    last = plan.target - 1 if plan.mode == "in-cell" else plan.target
    for cell in plan.cells[: last + 1]:
        done = kernel.run(cell.source, timeout=300)
        if done.status != "ok":
            out.errors.append(f"c{cell.index} ({cell.size}) failed: {done.error}")
            return out
        out.seen = cell.index
    running: tuple[int, str] | None = None  # the cell sent last and its request's id
    if plan.mode == "in-cell":
        running = plan.target, kernel.client.execute(plan.cells[plan.target].source)
    elif plan.mode == "sleeper":
        kernel.client.execute(SLEEPER)
    if running is None:
        time.sleep(plan.delay)
    else:
        reply = _reply_by(kernel, running[1], time.monotonic() + plan.delay)
        if reply is None:
            out.running = running[0]
        elif reply["content"]["status"] == "ok":
            out.seen = running[0]  # it returned first: the kill lands between cells
        else:
            out.errors.append(f"c{running[0]} failed: {reply['content']}")
    kernel.kill()
    if out.running is not None and running is not None:
        # a reply the kernel sent before it died, not read before the kill
        out.unseen_reply = _reply_by(kernel, running[1], time.monotonic() + 0.2) is not None
    return out


def resume(kernel: Kernel) -> tuple[dict[str, str], str]:
    """Restart the dead kernel, ``%resume``, and read back the digests of the names."""
    kernel.restart()
    loaded = kernel.run("%load_ext ipy_resume")
    if loaded.status != "ok":
        raise RuntimeError(f"%load_ext failed: {loaded.error}")
    resumed = kernel.run("%resume", timeout=600)
    if resumed.status != "ok":
        raise RuntimeError(f"%resume failed: {resumed.error} {resumed.stderr[-500:]}")
    probe = kernel.run(PROBE, timeout=300)
    if probe.status != "ok":
        raise RuntimeError(f"probe failed: {probe.error}")
    return json.loads(probe.stdout.strip().splitlines()[-1]), (resumed.stdout + resumed.stderr)


def difference(got: dict[str, str], want: dict[str, str]) -> str:
    """How a resumed state differs from the expected one, by name."""
    missing = sorted(want.keys() - got.keys())
    extra = sorted(got.keys() - want.keys())
    changed = sorted(n for n in want.keys() & got.keys() if want[n] != got[n])
    return f"missing {missing}, extra {extra}, different {changed}"


class Fuzzer:
    def __init__(self, work: Path, seed: int, series: int, progress: bool = False) -> None:
        self.work = work
        self.progress = progress
        self.rng = random.Random(seed)
        self.series = series
        self.counts: dict[str, Any] = {
            "rounds": 0,
            "passed": 0,
            "short": 0,
            "wrong": 0,
            "errors": 0,
            "modes": Counter(),
            "returned_by_size": Counter(),  # cells whose reply was read before the kill
            "killed_running_by_size": Counter(),
            "nothing_returned": 0,
            "running_at_kill": 0,
            "running_restored": 0,  # the running cell's checkpoint came back (it had returned)
            "unseen_replies": 0,
            "cells_short": Counter(),  # how many cells a short round missed
            "failures": [],
        }
        self.round_seconds: list[float] = []

    def fail(self, what: str) -> None:
        if len(self.counts["failures"]) < 20:
            self.counts["failures"].append(what)

    def run(self, rounds: int) -> dict[str, Any]:
        """*rounds* rounds, a new store every ``series`` of them; returns the counts."""
        before: dict[str, str] = {}
        folder = self.work
        for round_no in range(rounds):
            if round_no % self.series == 0:
                with contextlib.suppress(FileNotFoundError):
                    if round_no:
                        shutil.rmtree(folder)  # 200 MB arrays add up over a long run
                folder = self.work / f"series{round_no // self.series}"
                folder.mkdir(parents=True)
                before = {}
            started = time.monotonic()
            tally = [self.counts[k] for k in VERDICTS]
            before = self.round(round_no, folder, before)
            self.round_seconds.append(time.monotonic() - started)
            if self.progress:
                verdict = next(
                    k for k, n in zip(VERDICTS, tally, strict=True) if self.counts[k] != n
                )
                print(
                    f"round {round_no}: {verdict} ({self.round_seconds[-1]:.1f} s; so far "
                    + ", ".join(f"{self.counts[k]} {k}" for k in VERDICTS)
                    + ")",
                    file=sys.stderr,
                    flush=True,
                )
        self.counts["seconds_per_round"] = round(statistics.median(self.round_seconds), 2)
        self.counts["slowest_round"] = round(max(self.round_seconds), 2)
        return self.counts

    def round(self, round_no: int, folder: Path, before: dict[str, str]) -> dict[str, str]:
        """One kill and ``%resume``; returns what it resumed (the next round's *before*)."""
        plan = make_plan(self.rng, round_no)
        sizes = "".join(c.size[0] if c.size != "200MB" else "B" for c in plan.cells)
        label = f"round {round_no} ({plan.mode} at c{plan.target}, sizes {sizes})"
        self.counts["rounds"] += 1
        self.counts["modes"][plan.mode] += 1
        states = expected_states(plan, before)
        try:
            with Kernel(folder, kernel_env(folder)) as kernel:
                if kernel.run("%load_ext ipy_resume").status != "ok":
                    raise RuntimeError("%load_ext failed")
                outcome = run_until_kill(kernel, plan)
                got, said = resume(kernel)
        except Exception as exc:  # counted, and the test asserts there are none
            self.counts["errors"] += 1
            self.fail(f"{label}: {type(exc).__name__}: {exc}")
            return before
        if outcome.errors:
            self.counts["errors"] += 1
            self.fail(f"{label}: {outcome.errors[0]}")
            return got
        for cell in plan.cells[: outcome.seen + 1]:
            self.counts["returned_by_size"][cell.size] += 1
        self.counts["nothing_returned"] += outcome.seen < 0
        accepted = [outcome.seen]
        if outcome.running is not None:
            self.counts["running_at_kill"] += 1
            self.counts["unseen_replies"] += outcome.unseen_reply
            self.counts["killed_running_by_size"][plan.cells[outcome.running].size] += 1
            accepted.append(outcome.running)
        if any(got == states[i] for i in accepted):
            self.counts["passed"] += 1
            if outcome.running is not None and got == states[outcome.running]:
                self.counts["running_restored"] += 1
        elif any(got == states[i] for i in range(-1, outcome.seen)):
            self.counts["short"] += 1
            back = next(i for i in range(outcome.seen - 1, -2, -1) if got == states[i])
            self.counts["cells_short"][outcome.seen - back] += 1
            self.fail(f"{label}: short by {outcome.seen - back} cell(s): {said.strip()[-300:]}")
        else:
            self.counts["wrong"] += 1
            self.fail(
                f"{label}: wrong: {difference(got, states[outcome.seen])}: {said.strip()[-300:]}"
            )
        return got


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--rounds", type=int, default=int(os.environ.get("IPY_RESUME_RESUME_FUZZ_ROUNDS", "12"))
    )
    parser.add_argument(
        "--seed", type=int, default=int(os.environ.get("IPY_RESUME_FUZZ_SEED", "1"))
    )
    parser.add_argument("--series", type=int, default=4, help="rounds per store")
    parser.add_argument("--progress", action="store_true", help="a line per round on stderr")
    parser.add_argument("--work", type=Path, help="folder for the stores (default: a temp one)")
    args = parser.parse_args(argv)
    work = args.work or Path(tempfile.mkdtemp(prefix="ipy-resume-fuzz-"))
    started = time.monotonic()
    try:
        counts = Fuzzer(work, args.seed, args.series, args.progress).run(args.rounds)
    finally:
        if args.work is None:
            shutil.rmtree(work, ignore_errors=True)
    counts["seconds"] = round(time.monotonic() - started, 1)
    print(json.dumps(counts, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
