"""Workloads 1-5 and 7, each in two groups run in separate processes.

* ``main``: ipy_resume (``%load_ext ipy_resume`` + ``%%checkpoint`` cells in a real
  ``InteractiveShell``), the floors (:mod:`benchmarks.baselines`), joblib.Memory,
  ipycache ``%%cache`` and dill sessions, interleaved repetition by repetition so
  that the machine's noise hits them alike;
* ``kishu``: Kishu, which instruments the whole shell (every cell is committed),
  so it gets a shell -- and a process -- of its own.

Workload 6 (a fresh process per run) is in :mod:`benchmarks.notebook`.

Metric names: ``*_s`` seconds, ``*_bytes`` bytes. ``save_s`` is a miss minus the
plain cell run right before it, i.e. what persisting cost on top of the work.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks import (
    baselines,
    batch,
    big_output,
    corpus,
    crash,
    graphs,
    peers,
    s3,
    sklearn_bench,
    torch_bench,
)
from benchmarks.harness import (
    BenchError,
    Probe,
    Recorder,
    Sizes,
    close_shell,
    io_written,
    last_cpu,
    new_shell,
    rmtree,
    run,
    settle,
    timed,
    tree_bytes,
    use_store,
)

IR = "ipy_resume"
BASE = "baseline"
SETUP = "import numpy as np\nfrom benchmarks import cells as bc"


def has(module: str) -> bool:
    """True when a peer is installed (the ``bench`` extra); absent peers are skipped.

    ``IPY_RESUME_BENCH_PEERS=joblib,dill`` limits the peers to those named (empty: none).
    """
    import importlib.util
    import os

    wanted = os.environ.get("IPY_RESUME_BENCH_PEERS")
    if wanted is not None and module not in wanted.split(","):
        return False
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def memory(folder: Path) -> Any:
    import joblib

    return joblib.Memory(str(folder), verbose=0)


@dataclass
class Ctx:
    sizes: Sizes
    repeat: int
    workdir: Path
    rec: Recorder
    probe: Probe

    def folder(self, *parts: str) -> Path:
        path = self.workdir.joinpath(*parts)
        path.mkdir(parents=True, exist_ok=True)
        return path


def main_shell(ctx: Ctx, **values: Any) -> Any:
    """A shell with ipy_resume, ipycache and the cells' helpers loaded."""
    shell = new_shell()
    shell.run_line_magic("load_ext", "ipy_resume")
    if has("ipycache"):
        peers.load_ipycache(shell)
    run(shell, SETUP, "setup")
    shell.push(values)
    ctx.probe.install()
    warm_up(ctx, shell)
    return shell


def open_store(shell: Any, path: Path) -> None:
    """Point ``%%checkpoint`` at a new store and create it (folders, store.json, journal)
    with one tiny checkpoint, untimed: a notebook's store exists long before its big cells."""
    use_store(path)
    run(shell, ck("store_init", "_init = 0"), "store init")
    run(shell, "del _init")


def warm_up(ctx: Ctx, shell: Any) -> None:
    """Pay the once-per-kernel costs (imports of h5py, joblib, dill; first HDF5 layout)
    before anything is timed, as a long-running notebook kernel has long since done."""
    folder = ctx.folder("warm-up")
    use_store(folder / "store")
    run(shell, ck("warm_up", "_w = np.ones(16384)"), "warm-up")
    run(shell, "del _w")
    if has("joblib"):
        shell.push({"_mem": memory(folder / "joblib")})
        run(shell, "_mem.cache(bc.tiny)(np.ones(4096)); del _mem")
    if has("dill"):
        run(shell, "import dill as _dill")
    rmtree(folder)


def measured(shell: Any, code: str, label: str) -> tuple[float, int]:
    """(seconds, bytes written by this process) of one cell, after flushing dirty pages."""
    from ipy_resume.store import background

    settle()
    before = io_written()
    seconds = run(shell, code, label)
    background.flush()  # (untimed) the bytes a background save writes after the cell count too
    return seconds, io_written() - before


def ck(name: str, body: str, *options: str) -> str:
    return "\n".join([" ".join(["%%checkpoint", name, "--quiet", *options]), body])


def cache(path: Path, names: str, body: str) -> str:
    return f"%%cache {path} {names}\n{body}"


def check(ok: bool, what: str) -> None:
    if not ok:
        raise BenchError(what)


# ---- workload 1: one cell producing a 1 GB array ---------------------------------------------


def peer_miss_hit(
    ctx: Ctx,
    shell: Any,
    peer: str,
    save: str,
    restore: str,
    var: str,
    plain: float,
    prefault: int,
    ok: Callable[[Any], bool] | None = None,
    *,
    save_only: bool = False,
) -> None:
    """A peer's first run (*save*) and restore (*restore*) of a cell that makes *var*.

    *plain* is the cell alone; with *save_only* the timed *save* code only saves (dill dumps
    the session after the cell ran untimed), so the first run is *plain* plus it.
    """
    rec = ctx.rec
    seconds, written = measured(shell, save, f"{peer} save")
    rec.add(peer, "miss_s", plain + seconds if save_only else seconds)
    rec.add(peer, "save_s", seconds if save_only else seconds - plain)
    rec.add(peer, "written_bytes", written)
    run(shell, f"del {var}")
    settle(prefault=prefault)
    rec.add(peer, "hit_s", run(shell, restore, f"{peer} restore"))
    if ok is not None:
        check(ok(shell.user_ns[var]), f"{peer} restored the wrong {var}")
    run(shell, f"del {var}")


def w1_main(ctx: Ctx) -> None:
    n = ctx.sizes.elems(1.0)
    rec, probe = ctx.rec, ctx.probe
    shell = main_shell(ctx, n=n)
    body = "a = bc.make_full(n, v)"
    for r in range(ctx.repeat):
        v = 1.0 + r
        shell.push({"v": v})
        tmp = ctx.folder(f"rep{r}")

        def right(a: Any, v: float = v) -> bool:
            return float(a[-1]) == v

        plain = run(shell, body, "plain")
        rec.add(BASE, "plain_cell_s", plain)
        arr = shell.user_ns["a"]
        rec.add(BASE, "xxh3_s", baselines.xxh3(arr))
        settle()
        rec.add(BASE, "write_fsync_s", baselines.write_fsync(tmp / "raw.bin", arr))
        settle()
        rec.add(BASE, "np_save_fsync_s", baselines.np_save_fsync(tmp / "a.npy", arr))
        settle(prefault=arr.nbytes)
        rec.add(BASE, "np_load_s", baselines.np_load(tmp / "a.npy"))
        (tmp / "a.npy").unlink()
        rec.add(BASE, "array_bytes", arr.nbytes)
        del arr
        run(shell, "del a")

        # ipy_resume: miss, hit, then re-checkpoint of unchanged data (--force)
        open_store(shell, tmp / "store")
        probe.reset()
        miss, written = measured(shell, ck("w1", body), "ipy_resume miss")
        rec.add(IR, "miss_s", miss)
        rec.add(IR, "save_s", miss - plain)
        rec.add(IR, "store_save_s", probe.save_s)
        rec.add(IR, "key_s", probe.plan_s)
        rec.add(IR, "written_bytes", written)
        run(shell, "del a")
        probe.reset()
        settle(prefault=n * 8)
        rec.add(IR, "hit_s", run(shell, ck("w1", body), "ipy_resume hit"))
        rec.add(IR, "store_load_s", probe.load_s)
        check(float(shell.user_ns["a"][-1]) == v, "ipy_resume restored the wrong array")
        run(shell, "del a")
        again, written = measured(shell, ck("w1", body, "--force"), "ipy_resume --force")
        rec.add(IR, "recheckpoint_written_bytes", written)
        rec.add(IR, "recheckpoint_s", again)
        # the floors once more, after ipy_resume, so drift of the machine hits both sides
        arr = shell.user_ns["a"]
        settle()
        rec.add(BASE, "write_fsync_s", baselines.write_fsync(tmp / "raw.bin", arr))
        settle()
        rec.add(BASE, "np_save_fsync_s", baselines.np_save_fsync(tmp / "a.npy", arr))
        settle(prefault=arr.nbytes)
        rec.add(BASE, "np_load_s", baselines.np_load(tmp / "a.npy"))
        (tmp / "a.npy").unlink()
        del arr
        run(shell, "del a")
        rec.add(IR, "store_bytes", tree_bytes(tmp / "store"))
        rmtree(tmp / "store")

        if has("joblib"):
            # joblib.Memory around the same function
            shell.push({"mem": memory(tmp / "joblib")})
            run(shell, "make_c = mem.cache(bc.make_full)")
            call = "a = make_c(n, v)"
            peer_miss_hit(ctx, shell, "joblib", call, call, "a", plain, n * 8, right)
            run(shell, "del make_c, mem")
            rmtree(tmp / "joblib")

        if has("ipycache"):
            # ipycache %%cache
            code = cache(tmp / "a.pkl", "a", body)
            peer_miss_hit(ctx, shell, "ipycache", code, code, "a", plain, n * 8)
            (tmp / "a.pkl").unlink()

        if has("dill"):
            # dill: the whole session after the cell, then load it back
            run(shell, body)
            dump, load = peers.dill_dump_code(tmp / "s.pkl"), peers.dill_load_code(tmp / "s.pkl")
            peer_miss_hit(ctx, shell, "dill", dump, load, "a", plain, n * 8, right, save_only=True)
        rmtree(tmp)
    close_shell(shell)


def kishu_shell(ctx: Ctx, folder: Path, **values: Any) -> tuple[Any, Any, float]:
    """A fresh shell with Kishu attached; also returns a plain shell-free baseline hook."""
    peers.kishu_env(folder)
    shell = new_shell()
    kishu = peers.kishu_attach(shell, folder / "bench.ipynb")
    run(shell, SETUP, "setup")
    shell.push(values)
    return shell, kishu, 0.0


def plain_time(ctx: Ctx, body: str, setup: str = "", **values: Any) -> float:
    """One run of *body* in a shell without Kishu (its in-process baseline)."""
    shell = new_shell()
    run(shell, SETUP + "\n" + setup)
    shell.push(values)
    seconds = run(shell, body, "plain")
    close_shell(shell)
    return seconds


def w1_kishu(ctx: Ctx) -> None:
    n = ctx.sizes.elems(1.0)
    body = "a = bc.make_full(n, v)"
    rec = ctx.rec
    for r in range(ctx.repeat):
        v = 1.0 + r
        plain = plain_time(ctx, body, n=n, v=v)
        folder = ctx.folder(f"kishu{r}")
        shell, kishu, _ = kishu_shell(ctx, folder, n=n, v=v)
        db = peers.kishu_db(folder / "bench.ipynb")
        size0 = tree_bytes(folder)
        miss, written = measured(shell, body, "kishu cell")
        rec.add("kishu", "miss_s", miss)
        rec.add("kishu", "save_s", miss - plain)
        rec.add("kishu", "written_bytes", written)
        rec.add("kishu", "store_bytes", tree_bytes(folder) - size0)
        commit = peers.kishu_head(kishu)
        run(shell, "del a")
        settle(prefault=n * 8)
        seconds, _ = timed(partial(kishu.checkout, commit))
        rec.add("kishu", "hit_s", seconds)
        check(float(shell.user_ns["a"][-1]) == v, "kishu restored the wrong array")
        check(db.exists(), "kishu wrote no database")
        close_shell(shell)
        rmtree(folder)


# ---- workload 2: re-run after a one-element change of a 1 GB input ---------------------------

W2_BODY = "summary = bc.summarize(x)"
W2_CHANGE = "x[0] += 1.0"
W2_INPUT = "x = np.arange(n, dtype=np.float64)"


def w2_main(ctx: Ctx) -> None:
    n = ctx.sizes.elems(1.0)
    rec, probe = ctx.rec, ctx.probe
    tmp = ctx.folder("w2")
    use_store(tmp / "store")
    shell = main_shell(ctx, n=n)
    run(shell, W2_INPUT)
    run(shell, ck("w2", W2_BODY))  # first run of each system, not timed
    if has("joblib"):
        shell.push({"mem": memory(tmp / "joblib")})
        run(shell, "summ_c = mem.cache(bc.summarize)")
        run(shell, "summary = summ_c(x)")
    if has("ipycache"):
        run(shell, cache(tmp / "s.pkl", "summary", W2_BODY))
    rec.add(BASE, "input_bytes", shell.user_ns["x"].nbytes)
    for _r in range(ctx.repeat):
        plain = run(shell, W2_CHANGE) + run(shell, W2_BODY, "plain")
        rec.add(BASE, "plain_cell_s", plain)
        rec.add(BASE, "xxh3_s", baselines.xxh3(shell.user_ns["x"]))

        probe.reset()
        change, w_change = measured(shell, W2_CHANGE, "change")
        cell, w_cell = measured(shell, ck("w2", W2_BODY), "ipy_resume re-run")
        rec.add(IR, "rerun_s", change + cell)
        rec.add(IR, "overhead_s", change + cell - plain)
        rec.add(IR, "key_s", probe.plan_s)
        rec.add(IR, "written_bytes", w_change + w_cell)
        rec.add(IR, "saved_bytes", probe.saved_bytes)

        if has("joblib"):
            change, w_change = measured(shell, W2_CHANGE, "change")
            cell, w_cell = measured(shell, "summary = summ_c(x)", "joblib re-run")
            rec.add("joblib", "rerun_s", change + cell)
            rec.add("joblib", "written_bytes", w_change + w_cell)

        if has("ipycache"):
            change, w_change = measured(shell, W2_CHANGE, "change")
            code = cache(tmp / "s.pkl", "summary", W2_BODY)
            cell, w_cell = measured(shell, code, "ipycache re-run")
            fresh = shell.user_ns["bc"].summarize(shell.user_ns["x"])
            stale = not np.array_equal(shell.user_ns["summary"], fresh)
            rec.add("ipycache", "rerun_s", change + cell)
            rec.add("ipycache", "written_bytes", w_change + w_cell)
            rec.add("ipycache", "stale_result", float(stale))
    rec.add(IR, "store_bytes", tree_bytes(tmp / "store"))
    if max(ctx.rec.samples.get("ipycache", {}).get("stale_result", [0.0])) > 0:
        rec.note(
            "ipycache", "returned the stale summary after the input changed (no input hashing)"
        )
    close_shell(shell)
    rmtree(tmp)


def w2_kishu(ctx: Ctx) -> None:
    n = ctx.sizes.elems(1.0)
    rec = ctx.rec
    folder = ctx.folder("w2kishu")
    plains = []
    shell = new_shell()
    run(shell, SETUP)
    shell.push({"n": n})
    run(shell, W2_INPUT)
    for _r in range(ctx.repeat):
        plains.append(run(shell, W2_CHANGE) + run(shell, W2_BODY))
    close_shell(shell)
    shell, _kishu, _ = kishu_shell(ctx, folder, n=n)
    run(shell, W2_INPUT)
    run(shell, W2_BODY)
    for r in range(ctx.repeat):
        size0 = tree_bytes(folder)
        change, w_change = measured(shell, W2_CHANGE, "kishu change")
        cell, w_cell = measured(shell, W2_BODY, "kishu re-run")
        rec.add("kishu", "rerun_s", change + cell)
        rec.add("kishu", "overhead_s", change + cell - plains[r])
        rec.add("kishu", "written_bytes", w_change + w_cell)
        rec.add("kishu", "store_growth_bytes", tree_bytes(folder) - size0)
    close_shell(shell)
    rmtree(folder)


# ---- workload 3: 1 GB input, tiny output: the cost of the key --------------------------------

W3_BODY = "m = bc.tiny(x)"


def w3_main(ctx: Ctx) -> None:
    n = ctx.sizes.elems(1.0)
    rec, probe = ctx.rec, ctx.probe
    tmp = ctx.folder("w3")
    use_store(tmp / "store")
    shell = main_shell(ctx, n=n)
    run(shell, "x = np.random.default_rng(3).random(n)")
    run(shell, ck("w3", W3_BODY))
    if has("joblib"):
        shell.push({"mem": memory(tmp / "joblib")})
        run(shell, "tiny_c = mem.cache(bc.tiny)")
        run(shell, "m = tiny_c(x)")
    if has("ipycache"):
        run(shell, cache(tmp / "m.pkl", "m", W3_BODY))
    for _r in range(ctx.repeat):
        rec.add(BASE, "xxh3_s", baselines.xxh3(shell.user_ns["x"]))
        rec.add(BASE, "plain_cell_s", run(shell, W3_BODY))
        probe.reset()
        settle()
        rec.add(IR, "hit_s", run(shell, ck("w3", W3_BODY), "ipy_resume hit"))
        rec.add(IR, "key_s", probe.plan_s)
        if has("joblib"):
            settle()
            rec.add("joblib", "hit_s", run(shell, "m = tiny_c(x)", "joblib hit"))
        if has("ipycache"):
            settle()
            rec.add("ipycache", "hit_s", run(shell, cache(tmp / "m.pkl", "m", W3_BODY)))
    if has("ipycache"):
        rec.note("ipycache", "hit without any key: it never looks at the input (not comparable)")
    close_shell(shell)
    rmtree(tmp)


# ---- workload 4: a 10-million-row mixed-dtype DataFrame --------------------------------------

W4_BODY = "df = bc.make_frame(rows, seed)"


def w4_main(ctx: Ctx) -> None:
    rows = ctx.sizes.frame_rows
    rec, probe = ctx.rec, ctx.probe
    shell = main_shell(ctx, rows=rows)
    for r in range(ctx.repeat):
        shell.push({"seed": r})
        tmp = ctx.folder(f"w4rep{r}")
        plain = run(shell, W4_BODY, "plain")
        rec.add(BASE, "plain_cell_s", plain)
        df = shell.user_ns["df"]
        rec.add(BASE, "frame_bytes", float(df.memory_usage(deep=True).sum()))
        settle()
        rec.add(BASE, "pickle_save_fsync_s", baselines.pickle_save_fsync(tmp / "df.pkl", df))
        settle(prefault=1 << 30)
        rec.add(BASE, "pickle_load_s", baselines.pickle_load(tmp / "df.pkl"))
        rec.add(BASE, "pickle_bytes", (tmp / "df.pkl").stat().st_size)
        (tmp / "df.pkl").unlink()
        del df
        run(shell, "del df")

        open_store(shell, tmp / "store")
        probe.reset()
        miss, written = measured(shell, ck("w4", W4_BODY), "ipy_resume miss")
        rec.add(IR, "miss_s", miss)
        rec.add(IR, "save_s", miss - plain)
        rec.add(IR, "store_save_s", probe.save_s)
        rec.add(IR, "written_bytes", written)
        run(shell, "del df")
        settle(prefault=1 << 30)
        rec.add(IR, "hit_s", run(shell, ck("w4", W4_BODY), "ipy_resume hit"))
        check(len(shell.user_ns["df"]) == rows, "ipy_resume restored the wrong frame")
        run(shell, "del df")
        rmtree(tmp / "store")

        if has("joblib"):
            shell.push({"mem": memory(tmp / "joblib")})
            run(shell, "frame_c = mem.cache(bc.make_frame)")
            call = "df = frame_c(rows, seed)"
            peer_miss_hit(ctx, shell, "joblib", call, call, "df", plain, 1 << 30)
            run(shell, "del frame_c, mem")
            rmtree(tmp / "joblib")

        if has("ipycache"):
            code = cache(tmp / "df.pkl", "df", W4_BODY)
            peer_miss_hit(ctx, shell, "ipycache", code, code, "df", plain, 1 << 30)

        if has("dill"):
            run(shell, W4_BODY)
            dump, load = peers.dill_dump_code(tmp / "s.pkl"), peers.dill_load_code(tmp / "s.pkl")
            peer_miss_hit(ctx, shell, "dill", dump, load, "df", plain, 1 << 30, save_only=True)
        rmtree(tmp)
    close_shell(shell)


def w4_kishu(ctx: Ctx) -> None:
    rows = ctx.sizes.frame_rows
    rec = ctx.rec
    for r in range(ctx.repeat):
        plain = plain_time(ctx, W4_BODY, rows=rows, seed=r)
        folder = ctx.folder(f"kishu{r}")
        shell, kishu, _ = kishu_shell(ctx, folder, rows=rows, seed=r)
        miss, written = measured(shell, W4_BODY, "kishu cell")
        rec.add("kishu", "miss_s", miss)
        rec.add("kishu", "save_s", miss - plain)
        rec.add("kishu", "written_bytes", written)
        commit = peers.kishu_head(kishu)
        run(shell, "del df")
        settle(prefault=1 << 30)
        seconds, _ = timed(partial(kishu.checkout, commit))
        rec.add("kishu", "hit_s", seconds)
        check(len(shell.user_ns["df"]) == rows, "kishu restored the wrong frame")
        close_shell(shell)
        rmtree(folder)


# ---- workload 5: 200 small cells -------------------------------------------------------------

W5_BASE = "base = [float(i) for i in range(100)]"


def w5_body(i: int) -> str:
    """A small cell: plain Python on a list (what benchmarks.cells.small does, inline)."""
    return f"c{i} = [t * 0.5 + {i} for t in base]"


def w5_main(ctx: Ctx) -> None:
    cells = ctx.sizes.small_cells
    rec, probe = ctx.rec, ctx.probe
    shell = main_shell(ctx)
    run(shell, W5_BASE)
    names = ", ".join(f"c{i}" for i in range(cells))
    for r in range(ctx.repeat):
        tmp = ctx.folder(f"w5rep{r}")
        use_store(tmp / "store")
        for _ in range(5):
            rec.add(BASE, "durable_small_file_s", baselines.durable_small_file(tmp))
        plain: list[float] = []
        plain_cpu: list[float] = []  # the kernel thread's CPU time: what load does not inflate
        for i in range(cells):
            plain.append(run(shell, w5_body(i)))
            plain_cpu.append(last_cpu())
            rec.add(BASE, "plain_cell_s", plain[-1])
            run(shell, f"del c{i}")
            probe.reset()
            miss = run(shell, ck(f"s{i}", w5_body(i)), "ipy_resume miss")
            rec.add(IR, "miss_overhead_s", miss - plain[i])
            rec.add(IR, "miss_cpu_overhead_s", last_cpu() - plain_cpu[i])
            rec.add(IR, "miss_fsync_s", probe.fsync_s)
            rec.add(IR, "miss_fsyncs", probe.fsync_n)
            rec.add(IR, "miss_overhead_excl_fsync_s", miss - plain[i] - probe.fsync_s)
            rec.add(IR, "miss_journal_s", probe.journal_s)
        # The misses came back to back, faster than any notebook makes them; their saves
        # become durable on the background writer meanwhile.  The hits are timed once
        # they all are (``%checkpoint wait``, untimed here but recorded), or the writer's
        # backlog is timed in the hits; a rerun in a notebook comes long after its save.
        rec.add(IR, "durable_wait_per_miss_s", run(shell, "%checkpoint wait") / cells)
        run(shell, f"del {names}")
        for i in range(cells):
            probe.reset()
            hit = run(shell, ck(f"s{i}", w5_body(i)), "ipy_resume hit")
            rec.add(IR, "hit_overhead_s", hit - plain[i])
            rec.add(IR, "hit_cpu_overhead_s", last_cpu() - plain_cpu[i])
            rec.add(IR, "hit_journal_s", probe.journal_s)
            rec.add(IR, "hit_overhead_excl_journal_s", hit - plain[i] - probe.journal_s)
        check(shell.user_ns[f"c{cells - 1}"][0] == cells - 1, "ipy_resume restored a wrong cell")
        for _ in range(5):
            rec.add(BASE, "sqlite_wal_commit_s", baselines.sqlite_commit(tmp))
        run(shell, f"del {names}")

        if has("joblib"):
            shell.push({"mem": memory(tmp / "joblib")})
            run(shell, "small_c = mem.cache(bc.small)")
            for i in range(cells):
                miss = run(shell, f"c{i} = small_c(base, {i})", "joblib miss")
                rec.add("joblib", "miss_overhead_s", miss - plain[i])
                rec.add("joblib", "miss_cpu_overhead_s", last_cpu() - plain_cpu[i])
            run(shell, f"del {names}")
            for i in range(cells):
                hit = run(shell, f"c{i} = small_c(base, {i})", "joblib hit")
                rec.add("joblib", "hit_overhead_s", hit - plain[i])
                rec.add("joblib", "hit_cpu_overhead_s", last_cpu() - plain_cpu[i])
            run(shell, f"del {names}")

        if has("ipycache"):
            for i in range(cells):
                miss = run(shell, cache(tmp / f"c{i}.pkl", f"c{i}", w5_body(i)), "ipycache miss")
                rec.add("ipycache", "miss_overhead_s", miss - plain[i])
                rec.add("ipycache", "miss_cpu_overhead_s", last_cpu() - plain_cpu[i])
            run(shell, f"del {names}")
            for i in range(cells):
                hit = run(shell, cache(tmp / f"c{i}.pkl", f"c{i}", w5_body(i)), "ipycache hit")
                rec.add("ipycache", "hit_overhead_s", hit - plain[i])
                rec.add("ipycache", "hit_cpu_overhead_s", last_cpu() - plain_cpu[i])
            run(shell, f"del {names}")
        # The same misses with the file-read recording off: the recording's own cost.
        for i in range(cells):
            miss = run(shell, ck(f"n{i}", w5_body(i), "--no-file-deps"), "ipy_resume miss")
            rec.add(IR, "miss_overhead_no_file_deps_s", miss - plain[i])
        run(shell, f"del {names}")
        files_check(ctx, tmp)
        rmtree(tmp)
    close_shell(shell)


def files_check(ctx: Ctx, tmp: Path, count: int = 100) -> None:
    """The check before a hit of a cell that read *count* unchanged files, against the
    same number of bare ``os.stat`` calls."""
    from ipy_resume.runtime import file_deps

    folder = tmp / "files"
    folder.mkdir()
    paths = [folder / f"part-{i:03d}.csv" for i in range(count)]
    for i, path in enumerate(paths):
        path.write_text(f"{i},{i * 2}\n" * 200)
    record = {"files": [file_deps.file_identity(str(p), str(tmp), 1 << 30) for p in paths]}
    for _ in range(21):
        started = time.perf_counter()
        check(file_deps.changed(record, str(tmp)) is None, "unchanged files reported changed")
        ctx.rec.add(IR, "check_100_files_s", time.perf_counter() - started)
        started = time.perf_counter()
        for path in paths:
            os.stat(path)
        ctx.rec.add(BASE, "stat_100_files_s", time.perf_counter() - started)


def w5_kishu(ctx: Ctx) -> None:
    cells = ctx.sizes.small_cells
    rec = ctx.rec
    for r in range(ctx.repeat):
        shell = new_shell()
        run(shell, SETUP + "\n" + W5_BASE)
        plain = [run(shell, w5_body(i)) for i in range(cells)]
        close_shell(shell)
        folder = ctx.folder(f"kishu{r}")
        shell, _kishu, _ = kishu_shell(ctx, folder)
        run(shell, W5_BASE)
        for i in range(cells):
            rec.add("kishu", "miss_overhead_s", run(shell, w5_body(i)) - plain[i])
        close_shell(shell)
        rmtree(folder)


# ---- workload 7: storage after 20 checkpoints of a slowly changing 500 MB state --------------

W7_BODY = "state = bc.evolve(state, step)"
W7_STATE = "state = bc.make_state(arrays, elems)"


def w7_main(ctx: Ctx) -> None:
    sizes, rec = ctx.sizes, ctx.rec
    steps = sizes.steps
    tmp = ctx.folder("w7")
    shell = main_shell(ctx, arrays=sizes.state_arrays, elems=sizes.state_array_elems)

    def live() -> float:
        return float(sum(a.nbytes for a in shell.user_ns["state"].values()))

    systems: dict[str, Callable[[int], str]] = {
        IR: lambda s: ck("w7", W7_BODY),
        "joblib": lambda s: "state = evolve_c(state, step)",
        "ipycache": lambda s: cache(tmp / "ipycache" / f"state{s}.pkl", "state", W7_BODY),
        "dill": lambda s: W7_BODY + "\n" + peers.dill_dump_code(tmp / "dill" / f"s{s}.pkl"),
    }
    folders = {
        IR: tmp / "store",
        "joblib": tmp / "joblib",
        "ipycache": tmp / "ipycache",
        "dill": tmp / "dill",
    }
    for system, code in systems.items():
        if system != IR and not has(system):
            continue
        folder = folders[system]
        folder.mkdir(parents=True, exist_ok=True)
        use_store(folder)
        run(shell, W7_STATE)
        if system == "joblib":
            shell.push({"mem": memory(folder)})
            run(shell, "evolve_c = mem.cache(bc.evolve)")
        rec.add(system, "live_bytes", live())
        for s in range(steps):
            shell.push({"step": s})
            seconds, written = measured(shell, code(s), f"{system} step {s}")
            rec.add(system, "step_s", seconds)
            rec.add(system, "written_bytes", written)
        rec.add(system, "disk_bytes", tree_bytes(folder))
        rec.add(system, "disk_over_live", tree_bytes(folder) / live())
        rmtree(folder)
    close_shell(shell)
    rmtree(tmp)


def w7_kishu(ctx: Ctx) -> None:
    sizes, rec = ctx.sizes, ctx.rec
    folder = ctx.folder("w7kishu")
    shell, _kishu, _ = kishu_shell(
        ctx, folder, arrays=sizes.state_arrays, elems=sizes.state_array_elems
    )
    run(shell, W7_STATE)
    live = float(sum(a.nbytes for a in shell.user_ns["state"].values()))
    rec.add("kishu", "live_bytes", live)
    start = tree_bytes(folder)
    for s in range(sizes.steps):
        shell.push({"step": s})
        seconds, written = measured(shell, W7_BODY, f"kishu step {s}")
        rec.add("kishu", "step_s", seconds)
        rec.add("kishu", "written_bytes", written)
    rec.add("kishu", "disk_bytes", tree_bytes(folder) - start)
    rec.add("kishu", "disk_over_live", (tree_bytes(folder) - start) / live)
    close_shell(shell)
    rmtree(folder)


WORKLOADS: dict[str, dict[str, Callable[[Ctx], None]]] = {
    "1": {"main": w1_main, "kishu": w1_kishu},
    "1b": {"main": big_output.workload},
    "2": {"main": w2_main, "kishu": w2_kishu},
    "3": {"main": w3_main},
    "4": {"main": w4_main, "kishu": w4_kishu},
    "5": {"main": w5_main, "kishu": w5_kishu},
    "7": {"main": w7_main, "kishu": w7_kishu},
    "8": {"main": corpus.workload},
    "9": {"main": graphs.workload},
    "10": {"main": batch.workload},
    "11": {"main": s3.workload},
    "12": {"main": crash.workload},
    "13": {"main": torch_bench.workload},
    "13b": {"main": sklearn_bench.workload},
}
