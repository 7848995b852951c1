"""Workload 13b: scikit-learn ensembles and a text pipeline, against the plain cell and joblib.

Three cases, each one cell that fits a model on data an earlier cell generated (no
downloads; sizes at ``--scale 1``):

* ``forest``: ``RandomForestClassifier(n_estimators=300, n_jobs=1)`` on
  ``make_classification`` (6,000 rows, 20 features);
* ``boosting``: ``GradientBoostingClassifier`` (100 stages) on the same set;
* ``text``: ``Pipeline([("tfidf", TfidfVectorizer()), ("clf", LogisticRegression())])`` on
  60,000 sentences of 30 words drawn from a 50,000-word Zipf vocabulary by a seeded RNG,
  labelled by the presence of one of 60 words.

Every measured run is a fresh process (a new IPython shell with ``%load_ext ipy_resume``,
the imports and the data, then the measured cell), so none inherits another's warm
caches.  Per repetition and case:

* the first run: the cell plain (``cell_s``) and under ``%%checkpoint`` against a new
  store (``miss_s``), in alternating order; both shells have the extension loaded and a
  store already made by a tiny checkpoint, so they differ only by the wrapping.  After the
  miss: ``Engine.last_phases`` (seconds per phase, ``phase_<name>_s``), ``%checkpoint
  wait`` (``background_s``: the save made durable) and ``joblib.dump`` of the fitted model;
* the restore: the same cell against that store in a fresh process (``restore_s``, a hit),
  and ``joblib.load`` of the dumped model in another, a shell without the extension but with
  the same imports and data (``load_s``: the call alone), in alternating order;
  ``*_wall_s`` are the whole processes, start-up included.

Every process runs with one BLAS/OpenMP thread (``THREADS``), as the fits use one core.

Every restored model's predictions are checked against the first run's.  Targets: first
run at most 1.10x the plain cell; restore no slower than ``joblib.load``.  Repetitions:
``--repeat``, at least 3 (``IPY_RESUME_BENCH_SKLEARN_REPEAT=N`` sets that floor to N).

``python -m benchmarks.sklearn_bench plain|miss|restore|joblib ...`` is one process.
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import json
import math
import os
import random
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from benchmarks.harness import child_json, log, median, rmtree

if TYPE_CHECKING:
    from benchmarks.workloads import Ctx

WORKLOAD = "13b"
CASES = ("forest", "boosting", "text")
KINDS = ("plain", "miss", "restore", "joblib")
FIRST_TARGET = 1.10
RESTORE_TARGET = 1.0
MIN_REPEAT = 3
# One BLAS/OpenMP thread, as n_jobs=1: on a 2-core machine a second thread makes the same
# plain fit take 0.8-1.4 s from one process to the next, drowning the wrapper's overhead.
THREADS = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
# The phases in the order a miss takes them (names the engine adds later go at the end).
PHASES = (
    "drain",
    "plan",
    "lookup",
    "restore",
    "prepare",
    "cell",
    "capture",
    "outputs",
    "sharing",
    "snapshot",
    "stage",
    "save",
    "report",
)


def repeats(requested: int) -> int:
    """Repetitions of this workload: *requested*, at least 3 (or the env floor)."""
    floor = int(os.environ.get("IPY_RESUME_BENCH_SKLEARN_REPEAT", str(MIN_REPEAT)))
    return max(requested, floor, 1)


def rows(scale: float) -> int:
    """Rows of the classification set: 6,000 at scale 1 (a ~3 s forest on one core)."""
    return max(200, int(6000 * scale))


def sentences(scale: float) -> int:
    """Sentences of the text case: 60,000 at scale 1 (a ~1.3 s pipeline fit)."""
    return max(500, int(60_000 * scale))


def estimators(scale: float, full: int) -> int:
    """*full* trees or stages, except at the smoke test's tiny scales (seconds, not minutes)."""
    return full if scale >= 0.1 else 10


def classification(n: int) -> tuple[Any, Any]:
    """A fixed binary classification set of *n* rows and 20 features."""
    from sklearn.datasets import make_classification

    return make_classification(n_samples=n, n_features=20, n_informative=10, random_state=0)


def text(n: int, words: int = 30, vocabulary: int = 50_000) -> tuple[list[str], list[int]]:
    """*n* sentences of *words* pseudo-words, Zipf-distributed, and labels from word presence.

    >>> docs, labels = text(3, words=4, vocabulary=50)
    >>> len(docs), len(docs[0].split()), set(labels) <= {0, 1}
    (3, 4, True)
    """
    rng = random.Random(0)
    letters = "abcdefghijklmnopqrstuvwxyz"
    made = {"".join(rng.choices(letters, k=rng.randint(3, 10))) for _ in range(vocabulary)}
    vocab = sorted(made)
    rng.shuffle(vocab)
    # Zipf weights give real text's long tail (TF-IDF sees rare and common words)
    weights = list(itertools.accumulate(1.0 / (rank + 1) for rank in range(len(vocab))))
    docs = [" ".join(rng.choices(vocab, cum_weights=weights, k=words)) for _ in range(n)]
    # mid-frequency words: about half of the sentences hold one
    signal = set(vocab[200:260])
    labels = [int(any(w in signal for w in doc.split())) for doc in docs]
    return docs, labels


def preamble(case: str, scale: float) -> str:
    """The notebook's cells before the measured one: imports and the data."""
    if case == "text":
        return (
            "from sklearn.pipeline import Pipeline\n"
            "from sklearn.feature_extraction.text import TfidfVectorizer\n"
            "from sklearn.linear_model import LogisticRegression\n"
            "from benchmarks import sklearn_bench as sb\n"
            f"docs, labels = sb.text({sentences(scale)})"
        )
    return (
        "from sklearn.ensemble import GradientBoostingClassifier, RandomForestClassifier\n"
        "from benchmarks import sklearn_bench as sb\n"
        f"X, y = sb.classification({rows(scale)})"
    )


def body(case: str, scale: float) -> str:
    """The measured cell of *case*: one fit, bound to ``model``."""
    if case == "forest":
        trees = estimators(scale, 300)
        return (
            f"model = RandomForestClassifier(n_estimators={trees}, n_jobs=1, "
            "random_state=0).fit(X, y)"
        )
    if case == "boosting":
        stages = estimators(scale, 100)
        return (
            f"model = GradientBoostingClassifier(n_estimators={stages}, random_state=0).fit(X, y)"
        )
    return (
        'model = Pipeline([("tfidf", TfidfVectorizer()), '
        '("clf", LogisticRegression(max_iter=1000))]).fit(docs, labels)'
    )


def cell(case: str, scale: float) -> str:
    return f"%%checkpoint sklearn_{case} --quiet\n{body(case, scale)}"


def check(ns: dict[str, Any]) -> str:
    """A digest of the model's predicted probabilities on the first 500 samples."""
    sample = ns["docs"][:500] if "docs" in ns else ns["X"][:500]
    proba = ns["model"].predict_proba(sample)
    return hashlib.blake2b(proba.tobytes(), digest_size=16).hexdigest()


def _child(args: list[str], env: dict[str, str]) -> tuple[dict[str, Any], float]:
    """One process of this workload: what it printed, and its whole wall time."""
    started = time.perf_counter()
    result: dict[str, Any] = child_json("benchmarks.sklearn_bench", args, env, timeout=1800)
    return result, time.perf_counter() - started


def workload(ctx: Ctx) -> None:
    """The three cases: first runs against plain ones, restores against ``joblib.load``."""
    from benchmarks.workloads import has

    if not (has("sklearn") and has("joblib")):
        ctx.rec.note(
            "ipy_resume", "scikit-learn or joblib is not installed: W13b skipped (pip install it)"
        )
        return
    rec = ctx.rec
    scale = ctx.sizes.scale
    for case in CASES:
        for r in range(repeats(ctx.repeat)):
            folder = ctx.folder("sklearn", case, f"r{r}")
            common = ["--case", case, "--scale", str(scale), "--dir", str(folder)]

            stores = {
                kind: dict(os.environ, **THREADS, IPY_RESUME_DIR=str(folder / name))
                for kind, name in (("plain", "plain-store"), ("store", "store"))
            }

            first: dict[str, Any] = {}
            # alternate which runs first, so drift hits plain and wrapped alike
            for kind in ("plain", "miss") if r % 2 == 0 else ("miss", "plain"):
                os.sync()  # (another run's write-back would land in this one)
                got, wall = _child([kind, *common], stores["plain" if kind == "plain" else "store"])
                if kind == "plain":
                    rec.add("plain", f"{case}_cell_s", got["seconds"])
                    rec.add("plain", f"{case}_wall_s", wall)
                    continue
                first = got
                rec.add("ipy_resume", f"{case}_miss_s", got["seconds"])
                rec.add("ipy_resume", f"{case}_miss_wall_s", wall)
                rec.add("ipy_resume", f"{case}_background_s", got["background_s"])
                rec.add("ipy_resume", f"{case}_store_bytes", got["store_bytes"])
                rec.add("joblib", f"{case}_dump_s", got["dump_s"])
                rec.add("joblib", f"{case}_file_bytes", got["file_bytes"])
                for name, seconds in got["phases"].items():
                    rec.add("ipy_resume", f"{case}_phase_{name}_s", seconds)
                if got["outcome"] != "executed":
                    rec.note("ipy_resume", f"{case}: the first run was a {got['outcome']!r}")
            for kind in ("restore", "joblib") if r % 2 == 0 else ("joblib", "restore"):
                os.sync()
                got, wall = _child([kind, *common], stores["store"])
                if got["check"] != first["check"]:
                    raise RuntimeError(f"{case} {kind}: the restored model predicts otherwise")
                if kind == "joblib":
                    rec.add("joblib", f"{case}_load_s", got["seconds"])
                    rec.add("joblib", f"{case}_load_wall_s", wall)
                    continue
                rec.add("ipy_resume", f"{case}_restore_s", got["seconds"])
                rec.add("ipy_resume", f"{case}_restore_wall_s", wall)
                for name, seconds in got["phases"].items():
                    rec.add("ipy_resume", f"{case}_hit_phase_{name}_s", seconds)
                if got["outcome"] != "restored":
                    rec.note("ipy_resume", f"{case}: the restore was a {got['outcome']!r}")
            rmtree(folder)
            log(f"  workload 13b [{case}: repetition {r + 1}] done")


# ---- the processes ---------------------------------------------------------------------------


def _shell(case: str, scale: float, extension: bool = True) -> Any:
    from benchmarks.harness import new_shell, run

    shell = new_shell()
    if extension:
        shell.run_line_magic("load_ext", "ipy_resume")
        # load_ext reports a failed import and carries on: say so here, not in a later cell
        if "checkpoint" not in shell.magics_manager.magics["cell"]:
            raise RuntimeError("%load_ext ipy_resume did not register %%checkpoint")
    run(shell, preamble(case, scale), "preamble")
    return shell


def _outcome() -> str | None:
    from ipy_resume.store import open_store

    events = open_store(os.environ["IPY_RESUME_DIR"]).journal().events()
    return events[-1].outcome if events else None


def _first(kind: str, case: str, scale: float, folder: Path) -> dict[str, Any]:
    """A first run, plain or wrapped, in a shell whose store exists already."""
    from benchmarks.harness import run, tree_bytes

    shell = _shell(case, scale)
    # a notebook's store is made long before its big cell: not this cell's cost
    run(shell, "%%checkpoint sklearn_init --quiet\n_init = 0", "store init")
    run(shell, "%checkpoint wait", "wait")
    if kind == "plain":
        return {"seconds": run(shell, body(case, scale), "plain cell")}
    seconds = run(shell, cell(case, scale), "first run")
    phases = dict(shell._ipy_resume_magics.engine().last_phases)  # before anything else runs
    outcome = _outcome()
    background = run(shell, "%checkpoint wait", "wait")
    import joblib

    path = folder / "model.joblib"
    started = time.perf_counter()
    joblib.dump(shell.user_ns["model"], path)
    dump_s = time.perf_counter() - started
    return {
        "seconds": seconds,
        "phases": phases,
        "outcome": outcome,
        "background_s": background,
        "store_bytes": float(tree_bytes(os.environ["IPY_RESUME_DIR"])),
        "dump_s": dump_s,
        "file_bytes": float(path.stat().st_size),
        "check": check(shell.user_ns),
    }


def _restore(case: str, scale: float) -> dict[str, Any]:
    from benchmarks.harness import run

    shell = _shell(case, scale)
    seconds = run(shell, cell(case, scale), "restore")
    phases = dict(shell._ipy_resume_magics.engine().last_phases)
    return {
        "seconds": seconds,
        "phases": phases,
        "outcome": _outcome(),
        "check": check(shell.user_ns),
    }


def _joblib(case: str, scale: float, folder: Path) -> dict[str, Any]:
    """``joblib.load`` in a notebook without ipy_resume: the same imports and data first."""
    import joblib

    shell = _shell(case, scale, extension=False)
    started = time.perf_counter()
    model = joblib.load(folder / "model.joblib")
    seconds = time.perf_counter() - started
    shell.user_ns["model"] = model
    return {"seconds": seconds, "check": check(shell.user_ns)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="one process of workload 13b")
    parser.add_argument("kind", choices=KINDS)
    parser.add_argument("--case", choices=CASES, required=True)
    parser.add_argument("--scale", type=float, default=1.0)
    parser.add_argument("--dir", type=Path, required=True)
    args = parser.parse_args(argv)
    if args.kind in ("plain", "miss"):
        out = _first(args.kind, args.case, args.scale, args.dir)
    elif args.kind == "restore":
        out = _restore(args.case, args.scale)
    else:
        out = _joblib(args.case, args.scale, args.dir)
    print(json.dumps(out))
    return 0


# ---- summary and table -----------------------------------------------------------------------


def summary(samples: dict[str, Any]) -> dict[str, Any]:
    """Medians per case, the two target ratios, and the phases of first runs and restores."""
    by = samples.get(WORKLOAD, {})
    if not by.get("ipy_resume"):
        return {}

    def med(system: str, metric: str) -> float:
        values = by.get(system, {}).get(metric, [])
        return median(values) if values else math.nan

    def phases(case: str, kind: str) -> dict[str, float]:
        prefix, suffix = f"{case}_{kind}_", "_s"
        found = [m[len(prefix) : -len(suffix)] for m in ours if m.startswith(prefix)]
        ordered = [p for p in PHASES if p in found] + [p for p in found if p not in PHASES]
        return {p: med("ipy_resume", f"{prefix}{p}{suffix}") for p in ordered}

    out: dict[str, Any] = {}
    ours = by["ipy_resume"]
    for case in CASES:
        if f"{case}_miss_s" not in ours:
            continue
        plain = by.get("plain", {}).get(f"{case}_cell_s", [])
        row: dict[str, Any] = {
            "runs": len(ours[f"{case}_miss_s"]),
            "cell_s": med("plain", f"{case}_cell_s"),
            # how far apart plain runs of the same fit land: an overhead below it is noise
            "cell_spread_s": max(plain) - min(plain) if len(plain) >= 2 else math.nan,
            "miss_s": med("ipy_resume", f"{case}_miss_s"),
            "background_s": med("ipy_resume", f"{case}_background_s"),
            "restore_s": med("ipy_resume", f"{case}_restore_s"),
            "restore_wall_s": med("ipy_resume", f"{case}_restore_wall_s"),
            "store_bytes": med("ipy_resume", f"{case}_store_bytes"),
            "dump_s": med("joblib", f"{case}_dump_s"),
            "file_bytes": med("joblib", f"{case}_file_bytes"),
            "load_s": med("joblib", f"{case}_load_s"),
            "load_wall_s": med("joblib", f"{case}_load_wall_s"),
            "phases": phases(case, "phase"),
            "hit_phases": phases(case, "hit_phase"),
        }
        row["first_ratio"] = _ratio(row["miss_s"], row["cell_s"])
        row["restore_ratio"] = _ratio(row["restore_s"], row["load_s"])
        row["wall_ratio"] = _ratio(row["restore_wall_s"], row["load_wall_s"])
        row["overhead_s"] = row["miss_s"] - row["cell_s"]
        # the wrapper's own time in the same run: free of the fit's run-to-run noise
        row["wrapper_s"] = row["miss_s"] - row["phases"].get("cell", math.nan)
        out[case] = row
    return out


def _met(value: float, limit: float) -> str:
    return "n/a" if math.isnan(value) else ("yes" if value <= limit else "**no**")


def _share(seconds: float, row: dict[str, Any]) -> str:
    """*seconds* as a share of the first run's overhead over the plain cell.

    "noise" when that overhead is smaller than the spread of the plain runs themselves:
    a share of it would say nothing.
    """
    overhead, spread = row["overhead_s"], row["cell_spread_s"]
    if math.isnan(seconds) or math.isnan(overhead):
        return "n/a"
    if overhead <= 0 or (not math.isnan(spread) and overhead < spread):
        return "noise"
    return f"{100 * seconds / overhead:.0f} %"


def _ms(seconds: float) -> str:
    return "-" if math.isnan(seconds) else f"{seconds * 1000:.1f}"


def table(data: dict[str, Any]) -> str:
    from benchmarks.report import fmt, fmt_ratio

    cases = [c for c in CASES if c in data]
    lines = [
        "## W13b scikit-learn models (fresh processes; medians; ratio = ipy_resume ÷ the other)",
        "",
        "| model | runs | plain cell | first run | first ÷ plain | ≤ 1.10x | joblib.load | "
        "restore | restore ÷ joblib.load | ≤ 1.0x | whole processes: restore ÷ joblib | "
        "checkpoint | joblib file |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for case in cases:
        row = data[case]
        lines.append(
            f"| {case} | {row['runs']} | {fmt(row['cell_s'], 's')} | {fmt(row['miss_s'], 's')} | "
            f"{fmt_ratio(row['first_ratio'])} | {_met(row['first_ratio'], FIRST_TARGET)} | "
            f"{fmt(row['load_s'], 's')} | {fmt(row['restore_s'], 's')} | "
            f"{fmt_ratio(row['restore_ratio'])} | {_met(row['restore_ratio'], RESTORE_TARGET)} | "
            f"{fmt_ratio(row['wall_ratio'])} ({fmt(row['restore_wall_s'], 's')} vs "
            f"{fmt(row['load_wall_s'], 's')}) | {fmt(row['store_bytes'], 'bytes')} | "
            f"{fmt(row['file_bytes'], 'bytes')} |"
        )
    if not cases:
        return "\n".join(lines)
    lines += [
        "",
        "Where the first run's time goes (`Engine.last_phases`; medians in ms, and their share "
        "of the overhead, first run - plain cell: *noise* where that overhead is smaller than "
        "the spread of the plain runs; medians need not add up):",
        "",
        "| phase | " + " | ".join(f"{c} ms | {c} share" for c in cases) + " |",
        "|---|" + "---|---|" * len(cases),
    ]
    names: list[str] = []
    for case in cases:
        names += [p for p in data[case]["phases"] if p not in names]

    def line(label: str, values: dict[str, float], share: bool = True) -> str:
        cells = [f"{_ms(values[c])} | {_share(values[c], data[c]) if share else ''}" for c in cases]
        return f"| {label} | " + " | ".join(cells) + " |"

    for name in names:
        values = {c: data[c]["phases"].get(name, math.nan) for c in cases}
        if name == "cell":
            lines.append(line("cell (the fit itself)", values, share=False))
            # only what the fit took beyond the plain cell is overhead
            excess = {c: values[c] - data[c]["cell_s"] for c in cases}
            lines.append(line("the fit beyond the plain cell", excess))
        else:
            lines.append(line(name, values))
    rest = {c: data[c]["miss_s"] - sum(data[c]["phases"].values()) for c in cases}
    lines.append(line("outside the engine (magic, IPython)", rest))
    lines.append(
        line(
            "the wrapper's own time (first run - its cell)",
            {c: data[c]["wrapper_s"] for c in cases},
        )
    )
    lines.append(
        line(
            "**overhead: first run - plain cell**",
            {c: data[c]["overhead_s"] for c in cases},
            share=False,
        )
    )
    lines.append(
        line(
            "spread of the plain runs (max - min)",
            {c: data[c]["cell_spread_s"] for c in cases},
            share=False,
        )
    )
    lines.append(
        line(
            "after the cell: `%checkpoint wait`",
            {c: data[c]["background_s"] for c in cases},
            share=False,
        )
    )
    restores = [
        f"{c}: " + ", ".join(f"{name} {_ms(sec)}" for name, sec in data[c]["hit_phases"].items())
        for c in cases
        if data[c]["hit_phases"]
    ]
    if restores:
        lines += ["", "Restore phases (medians, ms): " + "; ".join(restores) + "."]
    return "\n".join(lines)


def _ratio(a: float, b: float) -> float:
    return a / b if b > 0 and not (math.isnan(a) or math.isnan(b)) else math.nan


if __name__ == "__main__":
    raise SystemExit(main())
