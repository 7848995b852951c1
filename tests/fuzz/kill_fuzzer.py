"""Kill fuzzer: SIGKILL a checkpointing writer at every I/O step and at random instants.

The harness process imports everything once, then for every kill forks a
writer child that saves checkpoints of varied sizes (packed small values, HDF5
arrays, out-of-band buffers, blobs shared with earlier checkpoints) into one
store, appending ``<checkpoint id> <seed>`` to a log after each ``save``
returns.  The child dies by a real SIGKILL, either

* from an injection hook in :mod:`ipy_resume.store.fsio`: the N-th primitive
  operation (open, write, fsync, rename, link, mkdir, unlink, rmdir) kills the
  process just *before* or just *after* it runs, for every N of two saves (and
  of a ``gc`` in some rounds), or
* from the harness, after a random delay.

Every other round the child saves through the background writer instead
(:mod:`ipy_resume.store.background`): it snapshots and queues each save, changes
the values in place at once (as a kernel may once the cell has returned), and
logs a checkpoint as committed only when the writer reports it durable.  The
kills then land before, during and after each step of the writer (blob writes,
the group's folder fsyncs, manifest publication, the manifests' folder fsyncs),
and the same checks apply: nothing reported durable is lost, nothing half-written
or changed after the snapshot is ever restored, older checkpoints stay intact.

After each kill the harness (a different process, reading the store afresh)
checks that every checkpoint whose ``save`` returned restores exactly, that
every manifest present restores exactly the values of its own seed (nothing
half-written is ever restored), and, every few kills and at the end, that
``verify`` finds nothing.  At the end ``gc`` must remove every leftover: no
temporary file and no unreferenced blob survives it.

Run it alone with ``python tests/fuzz/kill_fuzzer.py --store DIR --kills N``;
it prints a JSON summary as its last line.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import signal
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from ipy_resume.store import Store, background, fsio

KEY = bytes(range(32))
SHARED = np.zeros(8_192)  # a 64 KB array every few saves reuse: the dedup path
OPS = ("_open", "_write", "_fsync", "_replace", "_link", "_mkdir", "_unlink", "_rmdir")
# the background writer's steps the test requires killed before and after each
BACKGROUND_STEPS = ("write", "fsync", "replace", "link")
BACKGROUND_TOP_UPS = 4  # extra background cycles at most, when the budget missed a step


def values_for(seed: int) -> dict[str, Any]:
    """The values a save with *seed* stores: deterministic, of a size that varies with seed."""
    rng = np.random.default_rng(seed)
    values: dict[str, Any] = {
        "seed": seed,
        "words": [f"w{seed}-{i}" for i in range(seed % 7)],
        "mapping": {"a": seed * 0.5, "b": (seed, str(seed))},
    }
    kind = seed % 4
    if kind in (1, 3):
        values["array"] = rng.standard_normal(8_192 + 512 * (seed % 5))  # HDF5 blob
    if kind in (2, 3):
        values["nested"] = {"buffer": rng.integers(0, 255, 70_000, dtype=np.uint8)}  # raw blob
    if kind == 3 or seed % 5 == 0:
        values["shared"] = SHARED  # the same blob as many other saves
    return values


def equal(a: Any, b: Any) -> bool:
    """Exact equality for the values above (arrays by dtype, shape and bytes)."""
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return (
            isinstance(a, np.ndarray)
            and isinstance(b, np.ndarray)
            and a.dtype == b.dtype
            and a.shape == b.shape
            and a.tobytes() == b.tobytes()
        )
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(equal(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(map(equal, a, b))
    return type(a) is type(b) and bool(a == b)


def cell_of(seed: int) -> tuple[str, str]:
    return f"cell{seed % 3}", f"k{seed}"


# ---------------------------------------------------------------------------
# the writer child


def _install_hook(target: int, phase: str, log_fd: int) -> None:
    count = 0
    for name in OPS:
        real = getattr(fsio, name)

        def hooked(*args: Any, _real: Any = real, _name: str = name, **kwargs: Any) -> Any:
            nonlocal count
            count += 1
            if count == target and phase == "before":
                os.write(log_fd, f"KILL {_name} before\n".encode())
                os.kill(os.getpid(), signal.SIGKILL)
            result = _real(*args, **kwargs)
            if count == target and phase == "after":
                os.write(log_fd, f"KILL {_name} after\n".encode())
                os.kill(os.getpid(), signal.SIGKILL)
            return result

        setattr(fsio, name, hooked)


def _mutate(values: dict[str, Any]) -> None:
    """What a kernel may do once the cell has returned: change the arrays in place."""
    for arr in (values.get("array"), values.get("nested", {}).get("buffer")):
        if isinstance(arr, np.ndarray):
            arr[:] = 7


def _child(
    store: Store,
    seeds: list[int],
    log: Path,
    hook: tuple[int, str] | None,
    gc: bool,
    bg: bool = False,
) -> None:
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    if hook is not None:
        _install_hook(hook[0], hook[1], fd)
    if bg:
        # The background writer: snapshots queued together (one group commit), each
        # logged once the writer reports it durable; the values are changed in place
        # as soon as the save is queued, which must not reach the store.
        def durable(job: background.Job) -> None:
            seed = job.snapshot.manifest.info["fuzz_seed"]
            if job.error is None:
                os.write(fd, f"{job.snapshot.id} {seed}\n".encode())
            else:
                os.write(fd, f"ERROR {job.error}\n".encode())

        # All snapshots first, then queued back to back: the writer takes them as one
        # group in (nearly) every run, so the N-th I/O operation is the same step each time.
        made = []
        for seed in seeds:
            cell, key = cell_of(seed)
            values = values_for(seed)
            made.append((seed, values, store.snapshot(cell, key, values, info={"fuzz_seed": seed})))
        for seed, values, snap in made:
            job = store.writer.submit(snap, notify=durable)
            assert job is not None, "the snapshot budget refused a small save"
            os.write(fd, f"QUEUED {snap.id} {seed}\n".encode())
            _mutate(values)
        background.flush()
    else:
        for seed in seeds:
            cell, key = cell_of(seed)
            saved = store.save(cell, key, values_for(seed), info={"fuzz_seed": seed})
            os.write(fd, f"{saved.manifest.id} {seed}\n".encode())
    if gc:
        store.gc(grace=0)
        os.write(fd, b"GC done\n")


def _fork_writer(
    store: Store,
    seeds: list[int],
    log: Path,
    hook: tuple[int, str] | None,
    gc: bool,
    bg: bool = False,
) -> int:
    pid = os.fork()
    if pid == 0:  # pragma: no cover - child
        code = 0
        try:
            _child(store, seeds, log, hook, gc, bg)
        except BaseException as exc:
            print(f"writer failed: {type(exc).__name__}: {exc}", file=sys.stderr)
            code = 3
        os._exit(code)
    return pid


# ---------------------------------------------------------------------------
# the harness


class Fuzzer:
    def __init__(self, root: Path, seed: int) -> None:
        self.root = root
        self.rng = random.Random(seed)
        self.attempt = 0  # hook-kill attempts so far (each on fresh seeds)
        self.store = Store(root, key=KEY)
        self.next_seed = 1 << 30  # random-instant kills: far from the hook kills' seeds
        self.checked: set[str] = set()
        self.removed_by_retention: set[str] = set()
        self.counts: dict[str, Any] = {
            "kills": 0,
            "hook_kills": 0,
            "timer_kills": 0,
            "kill_points": {},
            "saves_committed": 0,
            "committed_checked": 0,
            "manifests_checked": 0,
            "lost": 0,
            "half_written_restored": 0,
            "verify_problems": 0,
            "verify_runs": 0,
            "writer_errors": 0,
            "leftover_temp_removed": 0,
            "leftover_blobs_removed": 0,
            "background_kills": 0,
            "background_kill_points": {},
            "background_queued": 0,
            "background_durable": 0,
            "failures": [],
        }

    def fail(self, what: str) -> None:
        if len(self.counts["failures"]) < 20:
            self.counts["failures"].append(what)

    def seeds(self, n: int) -> list[int]:
        out = list(range(self.next_seed, self.next_seed + n))
        self.next_seed += n
        return out

    def run_child(
        self,
        seeds: list[int],
        hook: tuple[int, str] | None,
        gc: bool,
        timer: float | None,
        bg: bool = False,
    ) -> tuple[bool, list[str]]:
        log = self.root.parent / "fuzz.log"
        log.write_bytes(b"")
        pid = _fork_writer(self.store, seeds, log, hook, gc, bg)
        if timer is not None:
            time.sleep(timer)
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        _, status = os.waitpid(pid, 0)
        killed = os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL
        if os.WIFEXITED(status) and os.WEXITSTATUS(status) != 0:
            self.counts["writer_errors"] += 1
            self.fail(f"writer exited with {os.WEXITSTATUS(status)} (hook {hook})")
        return killed, log.read_text().splitlines()

    def hook_cycle(self, cycle: int, gc: bool, bg: bool, budget: int | None) -> None:
        """Kill two saves (and a gc, when *gc*) before and after each operation in turn,
        through the background writer when *bg*, until one survives (or *budget* kills)."""
        target = 1
        while budget is None or self.counts["hook_kills"] < budget:
            survived = True
            for phase in ("before", "after"):
                # Fresh seeds with the same residues mod 3, 4 and 5: the same cells and
                # kinds of value as the rest of this cycle but new content, so every
                # attempt makes the same sequence of operations (nothing is deduplicated
                # against what the previous, killed attempt left behind).
                self.attempt += 1
                first = 60 * self.attempt + 2 * cycle % 60
                seeds = [first, first + 1]
                killed, lines = self.run_child(seeds, (target, phase), gc, None, bg)
                if killed:
                    survived = False
                    self.counts["hook_kills"] += 1
                    self.counts["kills"] += 1
                    self.counts["background_kills"] += bg
                self.check(lines, full=self.counts["kills"] % 10 == 0, bg=bg)
                if self.attempt % 30 == 0:
                    self.retain()
            if survived:
                break  # past the last operation of this cycle
            target += 1

    def missing_background_points(self) -> list[str]:
        """The writer's steps not yet killed before and after (see :data:`BACKGROUND_STEPS`)."""
        points = self.counts["background_kill_points"]
        return [
            f"{op} {phase}"
            for op in BACKGROUND_STEPS
            for phase in ("before", "after")
            if not points.get(f"{op} {phase}")
        ]

    def check(self, lines: list[str], full: bool, bg: bool = False) -> None:
        store = Store(self.root, key=KEY)  # fresh: nothing cached from before the kill
        committed = {}
        for line in lines:
            parts = line.split()
            if parts[0] == "KILL":
                point = f"{parts[1].lstrip('_')} {parts[2]}"
                self.counts["kill_points"][point] = self.counts["kill_points"].get(point, 0) + 1
                if bg:
                    points = self.counts["background_kill_points"]
                    points[point] = points.get(point, 0) + 1
            elif parts[0] == "QUEUED":
                self.counts["background_queued"] += 1
            elif parts[0] == "ERROR":
                self.counts["writer_errors"] += 1
                self.fail(f"background save failed: {line}")
            elif len(parts) == 2 and parts[0] != "GC":
                committed[parts[0]] = int(parts[1])
        self.counts["saves_committed"] += len(committed)
        if bg:
            self.counts["background_durable"] += len(committed)
        manifests = {m.id: m for m in store.manifests()}
        for ident, seed in committed.items():
            m = manifests.get(ident)
            if m is None:
                self.counts["lost"] += 1
                self.fail(f"committed checkpoint {ident} (seed {seed}) is gone")
                continue
            self.counts["committed_checked"] += 1
            if store.find(*cell_of(seed)) is None:
                self.counts["lost"] += 1
                self.fail(f"committed checkpoint {ident} is not found by its key")
        for ident, m in manifests.items():
            if ident in self.checked:
                continue
            self.checked.add(ident)
            self.counts["manifests_checked"] += 1
            seed = m.info.get("fuzz_seed")
            try:
                values = store.load_values(m)
            except Exception as exc:
                self.counts["half_written_restored"] += 1
                self.fail(f"manifest {ident} does not load: {exc}")
                continue
            if not isinstance(seed, int) or not equal(values, values_for(seed)):
                bad = "lost" if ident in committed else "half_written_restored"
                self.counts[bad] += 1
                self.fail(f"manifest {ident} restores wrong values")
        if full:
            self.counts["verify_runs"] += 1
            problems = store.verify()
            if problems:
                self.counts["verify_problems"] += len(problems)
                self.fail("verify: " + problems[0])

    def leftovers(self) -> tuple[int, int]:
        store = Store(self.root, key=KEY)
        referenced = {r.blob for m in store.manifests() for r in m.blob_refs()}
        temp = sum(1 for p in self.root.rglob(fsio.TEMP_PREFIX + "*"))
        objects = self.root / "objects"
        orphans = sum(
            1
            for p in objects.glob("*/*")
            if not fsio.is_temp_name(p.name) and p.parent.name + p.name not in referenced
        )
        return temp, orphans

    def run(self, kills: int, timer_share: float) -> dict[str, Any]:
        hook_budget = kills - int(kills * timer_share)
        cycle = 0
        # 1. every operation of two saves (and of a gc every third cycle), before and after
        while self.counts["hook_kills"] < hook_budget:
            self.hook_cycle(cycle, gc=cycle % 3 == 1, bg=cycle % 2 == 0, budget=hook_budget)
            cycle += 1
        # The writer thread's steps interleave with the saving thread's, so which of them a
        # numbered kill lands on depends on scheduling: on a loaded machine the budget can
        # run out before a step was hit.  More background cycles, until each step was killed
        # before and after (a few at most).
        for _ in range(BACKGROUND_TOP_UPS):
            if not self.missing_background_points():
                break
            self.hook_cycle(cycle, gc=False, bg=True, budget=None)
            cycle += 1
        # 2. random instants: their whole share, also when top-ups took the total past *kills*
        timer_budget = kills - hook_budget
        while self.counts["kills"] < kills or self.counts["timer_kills"] < timer_budget:
            bg = self.counts["timer_kills"] % 2 == 1
            killed, lines = self.run_child(
                self.seeds(200), None, False, self.rng.uniform(0.0, 0.08), bg
            )
            if killed:
                self.counts["timer_kills"] += 1
                self.counts["kills"] += 1
                self.counts["background_kills"] += bg
            self.check(lines, full=self.counts["kills"] % 10 == 0, bg=bg)
            if self.counts["timer_kills"] % 25 == 0:
                self.retain()
        self.check([], full=True)
        temp, orphans = self.leftovers()
        report = Store(self.root, key=KEY).gc(grace=0)
        self.counts["leftover_temp_found"] = temp
        self.counts["leftover_blobs_found"] = orphans
        self.counts["leftover_temp_removed"] = report.removed_temp
        self.counts["leftover_blobs_removed"] = report.removed_blobs
        after_temp, after_orphans = self.leftovers()
        self.counts["leftovers_after_gc"] = after_temp + after_orphans
        self.checked.clear()
        self.check([], full=True)  # every remaining checkpoint again, after gc
        self.counts["positions"] = sum(self.counts["kill_points"].values())
        return self.counts

    def retain(self) -> None:
        """Keep the store small so each check stays cheap (gc is under test here too)."""
        before = {m.id for m in self.store.manifests()}
        Store(self.root, key=KEY).gc(keep_last=2, grace=0)
        after = {m.id for m in self.store.manifests()}
        self.removed_by_retention |= before - after


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", type=Path, required=True)
    parser.add_argument(
        "--kills", type=int, default=int(os.environ.get("IPY_RESUME_FUZZ_KILLS", "300"))
    )
    parser.add_argument("--timer-share", type=float, default=0.3)
    parser.add_argument(
        "--seed", type=int, default=int(os.environ.get("IPY_RESUME_FUZZ_SEED", "1"))
    )
    args = parser.parse_args(argv)
    started = time.monotonic()
    counts = Fuzzer(args.store, args.seed).run(args.kills, args.timer_share)
    counts["seconds"] = round(time.monotonic() - started, 1)
    print(json.dumps(counts, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
