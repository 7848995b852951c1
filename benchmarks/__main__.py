"""``python -m benchmarks [--scale S] [--repeat N] [--only 1,3]``: run, tabulate, chart.

Workloads (sizes at ``--scale 1``; the issue's):

1. one cell producing a 1 GiB float64 array: miss, hit, bytes written, ``--force`` re-save;
2. the cell re-run after a one-element change of a 1 GiB input;
3. a 1 GiB input with a tiny output: the cost of the key;
4. a 10-million-row mixed-dtype DataFrame;
5. 200 small ``%%checkpoint`` cells: overhead per miss and per hit (the hits once the misses
   are durable);
6. "Run all" after a restart of a 10-cell notebook with ~3 GB of state (fresh processes);
7. 20 checkpoints of a slowly changing 500 MB state: bytes on disk vs live bytes.
8. the corpus of realistic notebooks (``tests/corpus/``): first wrapped run and restored
   run against the plain run, and the slowest key (:mod:`benchmarks.corpus`).
1b. a cell returning 512 MB: its first run against the plain cell and joblib.Memory's, every
    run in a fresh process (:mod:`benchmarks.big_output`).
9. large object graphs: keys of figures with 10,000 artists and of a 1M-object DAG.
10. a 30-cell notebook through ``ipy-resume run``: first run and a run resumed after a
    kill in cell 25, against plain nbclient (:mod:`benchmarks.batch`).
11. a 1 GiB checkpoint through ``s3://`` (moto on 127.0.0.1) against s3fs moving the same
    bytes, and its second restore from the local cache against ``np.load``
    (:mod:`benchmarks.s3`).
12. a restore of a 1 GiB array as after a crash: each restore in a fresh process,
    alternating with ``np.load`` in a fresh process, at least 5 of each
    (:mod:`benchmarks.crash`).
13. PyTorch state (a model with Adam's moments, 805 MB; 2,000 small tensors; a resumable
    training loop) against ``torch.save``/``torch.load`` and safetensors, each restore in a
    fresh process (:mod:`benchmarks.torch_bench`).
13b. scikit-learn: a random forest, gradient boosting and a TF-IDF text pipeline, each fitted
    by one cell; first run against the plain cell and restore against ``joblib.load``, every
    run in a fresh process, with the first run's phases (:mod:`benchmarks.sklearn_bench`).

Everything runs in this process tree: one worker process per workload and group
(``benchmarks.worker``), one process per notebook run for workload 6
(``benchmarks.notebook``). Results: ``benchmarks/results/wN.json`` for each workload run
(the latest of each is kept), and from all of them ``docs/performance.md`` and its chart
(:mod:`benchmarks.performance`).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks import notebook, performance, report
from benchmarks.harness import Recorder, log, median, rmtree

ALL = ["1", "1b", "2", "3", "4", "5", "6", "7", "8", "9", "10", "11", "12", "13", "13b"]
RESULTS = Path(__file__).resolve().parent / "results"
PAGE = Path(__file__).resolve().parent.parent / "docs" / "performance.md"
SLOW_S = 20.0
"""A peer whose run after restart takes longer than this is measured once (time budget)."""


def _env(workdir: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["JUPYTER_DATA_DIR"] = str(workdir / "jupyter-data")
    env["KISHU_PATH_ROOT"] = str(workdir)
    env.setdefault("OMP_NUM_THREADS", "2")
    root = str(Path(__file__).resolve().parent.parent)
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def run_worker(
    workload: str, group: str, args: argparse.Namespace, workdir: Path
) -> dict[str, Any]:
    out = workdir / f"w{workload}-{group}.json"
    folder = workdir / f"w{workload}-{group}"
    cmd = [
        sys.executable,
        "-m",
        "benchmarks.worker",
        "--workload",
        workload,
        "--group",
        group,
        "--scale",
        str(args.scale),
        "--repeat",
        str(args.kishu_repeat if group == "kishu" else args.repeat),
        "--workdir",
        str(folder),
        "--out",
        str(out),
    ]
    started = time.perf_counter()
    proc = subprocess.run(cmd, env=_env(workdir), capture_output=True, text=True, timeout=3600)
    log(
        f"  workload {workload} [{group}] {time.perf_counter() - started:.0f} s"
        + ("" if proc.returncode == 0 else f" (exit {proc.returncode})")
    )
    rmtree(folder)
    if out.exists():
        data: dict[str, Any] = json.loads(out.read_text())
    else:
        data = {"samples": {}, "notes": {"error": [proc.stderr[-3000:]]}}
    if proc.returncode != 0 and proc.stderr.strip():
        data.setdefault("notes", {}).setdefault("stderr", []).append(proc.stderr[-2000:])
    return data


def run_notebook(
    system: str, phase: str, args: argparse.Namespace, workdir: Path
) -> dict[str, Any]:
    folder = workdir / "w6" / system
    cmd = [
        sys.executable,
        "-m",
        "benchmarks.notebook",
        "--system",
        system,
        "--phase",
        phase,
        "--dir",
        str(folder),
        "--scale",
        str(args.scale),
    ]
    started = time.perf_counter()
    proc = subprocess.run(cmd, env=_env(workdir), capture_output=True, text=True, timeout=3600)
    wall = time.perf_counter() - started
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    result: dict[str, Any] = json.loads(lines[-1]) if lines else {}
    if proc.returncode != 0 or "seconds" not in result:
        result["error"] = result.get("error") or proc.stderr[-3000:] or "no result"
    result["wall_s"] = wall
    return result


def workload6(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    """First run once per system, then "Run all" after a restart, each in a fresh process.

    The systems other than Kishu are interleaved repetition by repetition; Kishu, whose
    store is ~6x the state, runs last in a block of its own so the disk never holds
    every store at once.
    """
    rec = Recorder("6")
    blocks = [[s for s in notebook.SYSTEMS if s != "kishu" and installed(s)]]
    if args.kishu_notebook and not args.no_kishu and installed("kishu"):
        blocks.append(["kishu"])
    reference: dict[str, Any] = {}
    for block in blocks:
        repeat = args.kishu_repeat if block == ["kishu"] else args.repeat
        failed: set[str] = set()
        slow: set[str] = set()
        for system in block:
            if system == "plain":
                continue
            os.sync()
            started = time.perf_counter()
            first = run_notebook(system, "first", args, workdir)
            log(f"  workload 6 [{system} first run] {time.perf_counter() - started:.0f} s")
            if "error" in first:
                rec.note(system, f"first run failed: {first['error'][-1500:]}")
                failed.add(system)
                continue
            rec.add(system, "first_s", first["seconds"])
            rec.add(system, "first_written_bytes", first["written_bytes"])
            rec.add(system, "store_bytes", first["store_bytes"])
            if "dump_s" in first:
                rec.add(system, "dump_s", first["dump_s"])
        for r in range(repeat):
            for system in block[r % len(block) :] + block[: r % len(block)]:  # rotate the order
                if system in failed or (r > 0 and system in slow):
                    continue
                os.sync()
                again = run_notebook(system, "again", args, workdir)
                if "error" in again:
                    rec.note(system, f"run after restart failed: {again['error'][-1500:]}")
                    failed.add(system)
                    continue
                slow_peer = system not in ("plain", "ipy_resume") and again["seconds"] > SLOW_S
                if r == 0 and repeat > 1 and slow_peer:
                    slow.add(system)
                    rec.note(
                        system, f"took {again['seconds']:.0f} s: measured once, not {repeat} times"
                    )
                misses = [o for o in again.get("outcomes", []) if o != "restored"]
                if misses:
                    rec.note(system, f"run after restart did not restore every cell: {misses}")
                rec.add(system, "again_s", again["seconds"])
                rec.add(system, "again_wall_s", again["wall_s"])
                rec.add(system, "state_bytes", again["state_bytes"])
                if system == "plain" and not reference:
                    reference.update(again["check"])
                elif reference and again["check"] != reference:
                    rec.note(
                        system, f"state after restart differs from re-execution: {again['check']}"
                    )
            log(f"  workload 6 [{', '.join(block)}: repetition {r + 1}] done")
        for system in block:
            rmtree(workdir / "w6" / system)
    return rec.to_json()


def installed(system: str) -> bool:
    """False for a peer whose package is missing (installed by the ``bench`` extra)."""

    if system in ("plain", "ipy_resume"):
        return True
    from benchmarks.workloads import has

    return has(system)


def machine(workdir: Path) -> dict[str, Any]:
    info: dict[str, Any] = {
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "loadavg_start": list(os.getloadavg()),
    }
    try:
        meminfo = Path("/proc/meminfo").read_text().splitlines()
        info["mem_total_gb"] = round(int(meminfo[0].split()[1]) / 1e6, 1)
    except (OSError, IndexError, ValueError):
        pass
    with contextlib.suppress(Exception):
        info["filesystem"] = (
            subprocess.run(["df", "-T", str(workdir)], capture_output=True, text=True)
            .stdout.splitlines()[-1]
            .split()[1]
        )
    versions = {}
    for name in (
        "ipy_resume",
        "numpy",
        "h5py",
        "pandas",
        "joblib",
        "dill",
        "kishu",
        "ipython",
        "ipycache",
        "xxhash",
        "cloudpickle",
        "scikit-learn",
    ):
        try:
            from importlib.metadata import version

            versions[name] = version(name)
        except Exception:
            versions[name] = "not installed"
    info["versions"] = versions
    return info


def noise(samples: dict[str, Any]) -> dict[str, float]:
    """Spread of the floors across repetitions: (max - min) / median, per floor.

    >>> noise({"3": {"baseline": {"xxh3_s": [1.0, 1.5, 1.0]}}})
    {'W3 xxh3_s': 0.5}
    """
    out = {}
    for workload, metric in (
        ("1", "write_fsync_s"),
        ("1", "np_load_s"),
        ("1", "xxh3_s"),
        ("3", "xxh3_s"),
        ("5", "durable_small_file_s"),
    ):
        values = samples.get(workload, {}).get("baseline", {}).get(metric, [])
        if len(values) >= 2:
            out[f"W{workload} {metric}"] = (max(values) - min(values)) / median(values)
    return out


def replot(results: Path, page: Path, chart: bool) -> int:
    """No run: the summaries of the saved results again, then the page and its chart."""
    for workload in ALL:
        path = performance.result_path(results, workload)
        if not path.is_file():
            continue
        result = json.loads(path.read_text())
        result["summary"] = report.summarize(result["samples"], result.get("notes"))
        path.write_text(json.dumps(result, indent=1, default=str) + "\n")
    print(f"page in {performance.write(results, page, ALL, chart)}")
    return 0


def save(
    results: Path,
    workload: str,
    common: dict[str, Any],
    samples: Any,
    notes: Any,
    load: list[list[float]],
) -> Path:
    """Write ``wN.json``: this run's samples, notes and summary of one workload."""
    one = {workload: samples}
    one_notes = {workload: notes}
    result = {
        **common,
        "machine": {**common["machine"], "loadavg_during": load},
        "workload": workload,
        "noise": noise(one),
        "summary": report.summarize(one, one_notes),
        "samples": one,
        "notes": one_notes,
    }
    path = performance.result_path(results, workload)
    path.write_text(json.dumps(result, indent=1, default=str) + "\n")
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks", description=__doc__.splitlines()[0]
    )
    parser.add_argument(
        "--scale",
        type=float,
        default=float(os.environ.get("IPY_RESUME_BENCH_SCALE", "1.0")),
        help="size factor (1.0 = 1 GiB arrays, 10M rows; env IPY_RESUME_BENCH_SCALE)",
    )
    parser.add_argument("--repeat", type=int, default=3, help="repetitions (medians are quoted)")
    parser.add_argument("--only", default="", help="comma-separated workloads, e.g. 1,3")
    parser.add_argument("--no-kishu", action="store_true", help="leave Kishu out")
    parser.add_argument(
        "--kishu-repeat",
        type=int,
        default=None,
        help="repetitions for Kishu, 10-100x slower than the others (default: 1)",
    )
    parser.add_argument(
        "--kishu-notebook",
        action="store_true",
        help="also run Kishu in workload 6 (its first run of the 3 GB notebook takes ~5 min "
        "and writes ~20 GB, so it is left out of the default run)",
    )
    parser.add_argument(
        "--results", type=Path, default=RESULTS, help="folder for the wN.json results"
    )
    parser.add_argument(
        "--page",
        type=Path,
        default=None,
        help="the page rendered from the results (default: docs/performance.md for the "
        "default results folder, else performance.md in the results folder)",
    )
    parser.add_argument(
        "--workdir",
        type=Path,
        default=None,
        help="scratch folder (default: a new one in $TMPDIR, removed afterwards)",
    )
    parser.add_argument("--no-chart", action="store_true")
    parser.add_argument(
        "--replot",
        action="store_true",
        help="no run: recompute the summaries of the saved results, the page and its chart",
    )
    args = parser.parse_args(argv)
    argv = sys.argv[1:] if argv is None else argv
    if args.page is None:
        same = args.results.resolve() == RESULTS
        args.page = PAGE if same else args.results / "performance.md"
    if args.replot:
        return replot(args.results, args.page, not args.no_chart)
    if args.kishu_repeat is None:
        args.kishu_repeat = 1
    wanted = [w.strip() for w in args.only.split(",") if w.strip()] or ALL
    unknown = sorted(set(wanted) - set(ALL))
    if unknown:
        parser.error(f"unknown workload(s) {', '.join(unknown)}; choose from {', '.join(ALL)}")
    # Kernels and processes the workloads start import ipy_resume as an installed copy
    # would: from bytecode (an editable install has none, and PYTHONDONTWRITEBYTECODE
    # would make every kernel compile the package again).
    import compileall

    import ipy_resume

    compileall.compile_dir(Path(ipy_resume.__file__).parent, quiet=1)
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="ipy_resume-bench-"))
    workdir.mkdir(parents=True, exist_ok=True)
    info = machine(workdir)
    log(
        f"ipy_resume benchmarks: scale {args.scale:g}, {args.repeat} repetitions, "
        f"workloads {','.join(wanted)}, scratch {workdir}"
    )
    started = time.perf_counter()
    samples: dict[str, Any] = {}
    notes: dict[str, Any] = {}
    load: dict[str, list[list[float]]] = {}  # workload -> load averages after each of its parts
    try:
        for workload in wanted:
            if workload == "6":
                data = workload6(args, workdir)
                samples["6"], notes["6"] = data["samples"], data["notes"]
                load.setdefault(workload, []).append(list(os.getloadavg()))
                continue
            from benchmarks.workloads import WORKLOADS

            merged: dict[str, Any] = {}
            merged_notes: dict[str, Any] = {}
            for group in WORKLOADS[workload]:
                if group == "kishu" and (args.no_kishu or not installed("kishu")):
                    continue
                data = run_worker(workload, group, args, workdir)
                merged.update(data.get("samples", {}))
                for key, value in data.get("notes", {}).items():
                    merged_notes.setdefault(key, []).extend(value)
                load.setdefault(workload, []).append(list(os.getloadavg()))
            samples[workload], notes[workload] = merged, merged_notes
    finally:
        if args.workdir is None:
            rmtree(workdir)
    info["loadavg_during"] = [sample for w in wanted for sample in load.get(w, [])]
    info["loadavg_end"] = list(os.getloadavg())
    info["elapsed_s"] = time.perf_counter() - started
    summary = report.summarize(samples, notes)
    common = {
        "argv": argv,
        "scale": args.scale,
        "repeat": args.repeat,
        "workloads": wanted,
        "created": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "machine": info,
    }
    args.results.mkdir(parents=True, exist_ok=True)
    paths = [
        save(args.results, w, common, samples[w], notes.get(w, {}), load.get(w, []))
        for w in wanted
        if w in samples
    ]
    print(report.table(summary))
    print()
    for workload, by_system in notes.items():
        for system, items in by_system.items():
            for item in items:
                print(f"note W{workload} {system}: {item.splitlines()[0][:300]}")
    spread = ", ".join(f"{k} {v * 100:.0f}%" for k, v in noise(samples).items())
    print(
        f"\nmachine: {info.get('cpus')} CPUs, {info.get('mem_total_gb')} GB, load average "
        f"{info['loadavg_start'][0]:.1f} at start, {info['loadavg_end'][0]:.1f} at end; "
        f"spread of the floors (max-min)/median: {spread or 'n/a'}"
    )
    print(f"elapsed {info['elapsed_s'] / 60:.1f} min; results in {', '.join(map(str, paths))}")
    print(f"page in {performance.write(args.results, args.page, ALL, not args.no_chart)}")
    failed = any("error" in by_system or "stderr" in by_system for by_system in notes.values())
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
