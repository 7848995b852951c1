"""``docs/performance.md``: the latest result of every workload, one table each, and the method.

Every run of ``python -m benchmarks`` (``make bench``) writes ``benchmarks/results/wN.json``
for each workload it ran and then renders the page from every ``wN.json`` there, so a run
of some workloads updates their tables and keeps the others as they were measured. Each
table says the command, scale, repetitions and machine load of the run it comes from.

>>> from pathlib import Path
>>> from benchmarks import performance
>>> page = performance.render(performance.load(Path("benchmarks/results")), ["1", "5"])
>>> page.startswith(performance.MARKER)
True
"""

from __future__ import annotations

import json
import math
import re
import shlex
from pathlib import Path
from typing import Any

from benchmarks import (
    batch,
    big_output,
    corpus,
    crash,
    graphs,
    report,
    s3,
    sklearn_bench,
    torch_bench,
)

MARKER = (
    "<!-- Written by `make bench` (benchmarks/performance.py) from benchmarks/results/wN.json: "
    "edit the generator, not this page. -->"
)

# What each workload is, at scale 1 (a run at scale S divides the sizes by 1/S).
WORKLOADS: dict[str, str] = {
    "1": "one cell producing a 1 GiB float64 array: first run, restore, bytes written, "
    "`--force` re-save of the same data",
    "2": "the cell re-run after a one-element change of its 1 GiB input",
    "3": "a 1 GiB input and a tiny output: the cost of the key",
    "4": "a 10-million-row DataFrame (int, float, float32, bool, datetime, category, string)",
    "5": "200 small `%%checkpoint` cells: overhead per miss and per hit over the plain cell "
    "(the hits timed once the misses are durable: `%checkpoint wait`, untimed, reported per "
    "miss)",
    "6": '"Run all" after a restart of a 10-cell notebook holding 3.2 GB: a fresh process per run',
    "7": "20 checkpoints of a 500 MB state (50 arrays) of which 2 arrays change per step",
    "8": "the ten corpus notebooks of `tests/corpus/` (24-28 cells each), each run plain, with "
    "every cell under `%%checkpoint`, and restored, in fresh kernels",
    "9": "keys of values that used to stall: `plt.hist`'s result, figures of 10,000 "
    "rectangles and of 10,000 lines, shared graphs of 1 and 2 million lists; baseline "
    "`pickle.dumps` of the same value",
    "10": "a 30-cell notebook (each cell smooths an 8 MB array) through `ipy-resume run`: the "
    "first run against plain nbclient, and a run killed in cell 25 then resumed against a "
    "full plain re-run",
    "11": "a 1 GiB array through `s3://` on a local S3-compatible server (moto on 127.0.0.1): "
    "save against an s3fs put, first restore against an s3fs get, the second restore from "
    "the local cache against `np.load`",
    "12": "a restore of a 1 GiB array as after a crash: each restore in a fresh process, "
    "alternating with `np.load` of the same array in a fresh process",
    "13": "PyTorch state against `torch.save`/`torch.load` and safetensors: a model of four "
    "`Linear(4096, 4096)` with one Adam step (805 MB), 2,000 small tensors, and a resumable "
    "training loop; each restore in a fresh process",
    "1b": "one cell returning 512 MB (`np.random.RandomState(3).rand(64_000_000)`), every "
    "run in a fresh process: the first run against the plain cell and against "
    "joblib.Memory's first run of the same draws (alternating)",
    "13b": "scikit-learn models, each fitted by one cell on generated data: "
    "`RandomForestClassifier(n_estimators=300, n_jobs=1)` and `GradientBoostingClassifier` "
    "on 6,000 rows of `make_classification`, and a `TfidfVectorizer` + `LogisticRegression` "
    "pipeline on 60,000 generated sentences; every run in a fresh process: the first run "
    "against the plain cell (alternating), the restore against `joblib.load` of the same "
    "model (alternating)",
}

TITLES: dict[str, str] = {
    "1": "a 1 GiB array",
    "2": "a one-element change of a 1 GiB input",
    "3": "the key of a 1 GiB input",
    "4": "a 10-million-row DataFrame",
    "5": "small cells",
    "6": "Run all after a restart",
    "7": "a slowly changing state",
    "8": "realistic notebooks",
    "9": "keys of large object graphs",
    "10": "batch runs that resume",
    "11": "a checkpoint in a bucket",
    "12": "a restore as after a crash",
    "13": "PyTorch models and optimizers",
    "13b": "scikit-learn ensembles and pipelines",
    "1b": "a cell returning 512 MB",
}

# Workloads whose module renders its own table (with its targets).
OWN_TABLES: dict[str, Any] = {
    "8": lambda s: corpus.table(s["corpus"]) if s.get("corpus") else "",
    "9": lambda s: graphs.table(s["graphs"]) if s.get("graphs") else "",
    "10": lambda s: batch.table(s["batch"]) if s.get("batch") else "",
    "11": lambda s: s3.table(s["s3"]) if s.get("s3") else "",
    "12": lambda s: crash.table(s["crash"]) if s.get("crash") else "",
    "13": lambda s: torch_bench.table(s["torch"]) if s.get("torch") else "",
    "13b": lambda s: sklearn_bench.table(s["sklearn"]) if s.get("sklearn") else "",
    "1b": lambda s: big_output.table(s["big_output"]) if s.get("big_output") else "",
}

INTRO = """\
# Performance

How fast ipy_resume is, workload by workload, against the machine's own floors (raw
hashing, raw write+fsync, `np.load`) and against the tools people use for the same job
(joblib.Memory, ipycache, dill sessions, Kishu). Every figure is a median of the
repetitions of one run, and every ratio divides by a baseline measured in the same run,
interleaved with ipy_resume repetition by repetition, so that the machine's noise hits
both alike. Ratios are **ipy_resume ÷ the other**: below 1, ipy_resume takes less time or
writes fewer bytes. The method is at the end of this page.

This page is written by the benchmarks themselves: `make bench` runs them and rewrites it
(and `benchmarks/results/wN.json`, every sample of workload N); `make bench
BENCH_ARGS="--only 5"` reruns one workload and leaves the other tables as they were.
Each table names the command, scale, repetitions and machine load it was measured with.
"""

METHOD = """\
## Method

**What runs.** `make bench` installs the `bench` extra (joblib, ipycache, dill, Kishu,
matplotlib, s3fs, moto) into `.venv` and runs `python -m benchmarks $(BENCH_ARGS)`. Each
workload runs in worker processes of its own (`benchmarks/worker.py`): ipy_resume in a
real IPython `InteractiveShell` with `%load_ext ipy_resume` and `%%checkpoint` cells, the
floors (`benchmarks/baselines.py`) and the peers (`benchmarks/peers.py`) in the same
process, interleaved repetition by repetition. Kishu instruments the whole shell, so it
gets a process of its own and runs once (`--kishu-repeat N`). Workload 6 runs every
"Run all" in a fresh process (`benchmarks/notebook.py`); workload 12 every restore and
every `np.load`; workloads 13 and 13b every restore and every load of the peers, and 13b
every first run and plain run as well.

**Options.** `--scale S` (1 = the sizes each workload names), `--repeat N` (medians of N),
`--only 1,3`, `--no-kishu`, `--kishu-notebook` (Kishu in workload 6 as well: its first
run of the 3.2 GB notebook commits after every cell and writes about 20 GB, so it is left
out by default), `--results DIR` (a run written elsewhere writes its page there too, not
here), `--replot` (no run: summaries, this page and the chart again from the saved
results). `IPY_RESUME_BENCH_PEERS=joblib,dill` limits the peers (peers not installed are
skipped), `IPY_RESUME_BENCH_CORPUS=DIR` measures the notebooks of DIR in workload 8, and
`IPY_RESUME_BENCH_CRASH_REPEAT=N` sets the floor of fresh-process restores in workload 12
(5), `IPY_RESUME_BENCH_SKLEARN_REPEAT=N` that of the repetitions of workload 13b (3).

**What is measured.** Times are wall-clock (`time.perf_counter`) around the cell or the
call; a "miss" is the first run (execute and save), a "hit" the run that restores. The
overhead of a small cell is its time minus the plain cell's, run just before it. Bytes
written are the process's `/proc/self/io` `write_bytes` minus cancelled writes; disk use
is the size of the files each tool left. The peers are driven as their own documentation
and tests do: joblib.Memory wraps the same functions the cells call; dill uses
`dump_session`/`load_session`; ipycache 0.1.4 (Python 2 code) runs with its old imports
mapped onto `pickle`, `traitlets` and `IPython.utils.capture`, its logic untouched; Kishu
commits every cell through its own hooks and restores with `checkout`. A peer's figure
that answers another question is shown as *not comparable*: ipycache never looks at a
cell's inputs, so after a changed input it returns the old, wrong result fast, and its
"hit" with a 1 GiB input costs nothing because there is no key.

**Why the peers can be faster.** joblib leaves its file in the page cache without an
fsync and checksums nothing; ipy_resume's save is durable before it says "saved" and
verified on every load, which is what the first run of a large value (W1, W4) pays for.
A small cell's miss (W5) keys the inputs, seeds and snapshots the random generators,
tees the output, records the settings and files the cell touched, signs a manifest and
stages a commit record that survives a kernel killed right after the cell; joblib and
ipycache do none of that.

**Noise.** The machine is shared and virtual; every table says its load average at the
start, the range during and at the end of the run. A ratio near its limit is within
noise when a rerun of the same command lands on the other side: rerun it before
concluding anything. `tests/test_benchmarks_smoke.py` runs the harness at tiny sizes in
`make test`, so it cannot rot between real runs.
"""


def result_path(folder: Path, workload: str) -> Path:
    """Where the latest result of *workload* lives: ``wN.json``."""
    return folder / f"w{workload}.json"


def order(workload: str) -> tuple[int, str]:
    """Sort key of a workload's name: by number, then suffix (13 before 13b before 14).

    >>> sorted(["13b", "2", "13"], key=order)
    ['2', '13', '13b']
    """
    number = re.match(r"\d+", workload)
    assert number is not None, workload
    return int(number.group()), workload[number.end() :]


def load(folder: Path) -> dict[str, dict[str, Any]]:
    """The latest result of every workload that has one in *folder*, by workload."""
    found = {}
    for path in folder.glob("w*.json"):
        workload = path.stem[1:]
        if re.fullmatch(r"\d+[a-z]?", workload):
            found[workload] = json.loads(path.read_text())
    return dict(sorted(found.items(), key=lambda item: order(item[0])))


def command(argv: list[str]) -> str:
    """The ``make bench`` line that runs ``python -m benchmarks ARGV``."""
    if not argv:
        return "make bench"
    return f'make bench BENCH_ARGS="{shlex.join(argv)}"'


def _load(machine: dict[str, Any]) -> str:
    during = [sample[0] for sample in machine.get("loadavg_during", [])]
    spread = ""
    if during:
        low, high = f"{min(during):.1f}", f"{max(during):.1f}"
        spread = f", {low} during" if low == high else f", {low}-{high} during"
    return (
        f"load average {machine['loadavg_start'][0]:.1f} at the start{spread}, "
        f"{machine['loadavg_end'][0]:.1f} at the end"
    )


def provenance(result: dict[str, Any]) -> str:
    """One line: how, when and on what this workload's figures were measured."""
    machine = result.get("machine", {})
    repeat = result["repeat"]
    return (
        f"Measured with `{command(result.get('argv', []))}` on {result['created']}: scale "
        f"{result['scale']:g} (the sizes above times {result['scale']:g}), "
        f"{repeat} repetition{'s' if repeat != 1 else ''}, "
        f"{machine.get('cpus')} CPUs, {machine.get('mem_total_gb')} GB, "
        f"Python {machine.get('python')}, {machine.get('filesystem', 'unknown')} disk, "
        f"{_load(machine)}."
    )


def _cell(value: float, unit: str) -> str:
    return "-" if math.isnan(value) else report.fmt(value, unit)


def _ratio_cell(ratio: float, unit: str) -> str:
    if math.isnan(ratio):
        return "n/a"
    return f"{ratio * 100:.2f} %" if unit == "bytes" else report.fmt_ratio(ratio)


def _limit(limit: float, unit: str) -> str:
    if unit == "bytes":
        return f"≤ {limit * 100:g} %"
    return f"≤ {limit:g} ms" if unit == "ms" else f"≤ {limit:g}x"


def comparison_table(workload: str, summary: dict[str, Any]) -> str:
    """Workloads 1-7: the targets and every peer's median in one table."""
    prefix = f"W{workload} "
    lines = [
        "| measure | ipy_resume | compared with | its median | ratio | target | met |",
        "|---|---|---|---|---|---|---|",
    ]
    for t in summary["targets"]:
        if not t["name"].startswith(prefix):
            continue
        measure, _, base = t["name"][len(prefix) :].partition(" / ")
        met = {True: "yes", False: "**no**", None: "n/a"}[t["met"]]
        if t["unit"] == "ms":
            lines.append(
                f"| {measure} | {_cell(t['ours'], 'ms')} | - | - | - "
                f"| {_limit(t['limit'], 'ms')} | {met} |"
            )
            continue
        lines.append(
            f"| {measure} | {_cell(t['ours'], t['unit'])} | {base} "
            f"| {_cell(t['base'], t['unit'])} | {_ratio_cell(t['ratio'], t['unit'])} "
            f"| {_limit(t['limit'], t['unit'])} | {met} |"
        )
    for row in summary["peers"]:
        if row["workload"] != f"W{workload}":
            continue
        for peer, value in row["peers"].items():
            if peer in row.get("not_comparable", {}):
                shown, ratio = "not comparable", "-"
            elif math.isnan(value):
                continue  # the peer was skipped or cannot do this
            else:
                shown = report.fmt(value, row["unit"])
                ratio = report.fmt_ratio(report._ratio(row["ours"], value))
            lines.append(
                f"| {row['metric'].strip()} | {_cell(row['ours'], row['unit'])} | {peer} "
                f"| {shown} | {ratio} | | |"
            )
    return "\n".join(lines) if len(lines) > 2 else ""


def workload_table(workload: str, summary: dict[str, Any]) -> str:
    """The one table of *workload*: its module's own, or the targets and peers of W1-W7."""
    if workload in OWN_TABLES:
        text = OWN_TABLES[workload](summary)
        # the module's heading becomes a caption under this page's own heading
        heading, _, rest = text.partition("\n")
        if heading.startswith("## "):
            caption = heading[3:].split(" ", 1)[-1]
            text = f"{caption[:1].upper()}{caption[1:]}.\n{rest}"
        return text
    return comparison_table(workload, summary)


def section(workload: str, result: dict[str, Any] | None) -> str:
    """``## Wn``: what the workload is, how it was measured, its table and the run's notes."""
    lines = [f"## W{workload}: {TITLES.get(workload, f'workload {workload}')}", ""]
    if workload in WORKLOADS:
        lines += [f"At scale 1: {WORKLOADS[workload]}.", ""]
    if result is None:
        lines.append(f'No result yet: `make bench BENCH_ARGS="--only {workload}"` measures it.')
        return "\n".join(lines)
    summary = report.summarize(result["samples"], result.get("notes"))
    lines += [provenance(result), ""]
    lines.append(workload_table(workload, summary) or "No figure was measured.")
    notes = [
        f"{system}: {text.splitlines()[0][:300]}"
        for system, texts in result.get("notes", {}).get(workload, {}).items()
        for text in texts
        if text.strip()
    ]
    if notes:
        lines += ["", "Notes of the run:", ""] + [f"- {note}" for note in notes]
    return "\n".join(lines)


def render(
    results: dict[str, dict[str, Any]], workloads: list[str], chart: str | None = None
) -> str:
    """The whole page: a section per workload, from its latest result (missing ones say so)."""
    parts = [MARKER, "", INTRO]
    if chart:
        parts += [
            f"![ratios of the latest results, against the targets and the peers]({chart})",
            "",
            "The chart draws each target as its ratio divided by its limit (left of the dashed "
            "line: met), and each peer the other way round from the tables: peer ÷ ipy_resume, "
            "on a log scale (right of the dashed line: ipy_resume takes less).",
            "",
        ]
    for workload in workloads:
        parts += [section(workload, results.get(workload)), ""]
    parts.append(METHOD)
    return "\n".join(parts)


def merged_summary(results: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The summary of every workload's latest samples together (for the chart)."""
    samples: dict[str, Any] = {}
    notes: dict[str, Any] = {}
    for workload, result in results.items():
        samples[workload] = result["samples"].get(workload, {})
        notes[workload] = result.get("notes", {}).get(workload, {})
    return report.summarize(samples, notes)


def write(folder: Path, page: Path, workloads: list[str], chart: bool = True) -> Path:
    """Render *page* (and its chart beside it, in ``img/``) from the results in *folder*."""
    results = load(folder)
    link = None
    if chart and results:
        png = page.parent / "img" / f"{page.stem}.png"
        try:
            png.parent.mkdir(parents=True, exist_ok=True)
            report.chart(merged_summary(results), png, "ipy_resume benchmarks: latest results")
            link = png.relative_to(page.parent).as_posix()
        except ImportError:
            print("matplotlib is not installed: no chart (pip install -e '.[bench]')")
    page.parent.mkdir(parents=True, exist_ok=True)
    page.write_text(render(results, workloads, link))
    return page
