"""Medians, ratios to the in-run baselines, the targets of issue 6, the table and the chart."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from benchmarks import batch, big_output, corpus, crash, graphs, s3, sklearn_bench, torch_bench
from benchmarks.harness import median

PEERS = ["joblib", "ipycache", "dill", "kishu"]
Samples = dict[str, dict[str, dict[str, list[float]]]]  # workload -> system -> metric -> values
Notes = dict[str, dict[str, list[str]]]  # workload -> system -> notes


@dataclass
class Target:
    name: str
    ours: float  # median of ipy_resume's metric
    base: float  # median of the baseline it is divided by
    ratio: float
    limit: float
    unit: str  # "s", "bytes", "ms"
    met: bool | None  # None: could not be measured


@dataclass
class PeerRow:
    workload: str
    metric: str
    unit: str
    ours: float
    peers: dict[str, float]  # peer -> its median (nan when it cannot do this)
    # peer -> why its figure is not a like-for-like result (a stale answer, no key at all)
    not_comparable: dict[str, str] = field(default_factory=dict)

    def ratio(self, peer: str) -> float:
        """How many times ipy_resume is better (peer / ours; > 1 means ipy_resume wins)."""
        value = self.peers.get(peer, math.nan)
        if math.isnan(value) or math.isnan(self.ours) or self.ours <= 0:
            return math.nan
        return value / self.ours


def med(samples: Samples, workload: str, system: str, metric: str) -> float:
    return median(samples.get(workload, {}).get(system, {}).get(metric, []))


def _ratio(a: float, b: float) -> float:
    """a / b; nan when either is missing or not positive (an overhead lost in the noise)."""
    if math.isnan(a) or math.isnan(b) or a <= 0 or b <= 0:
        return math.nan
    return a / b


def targets(samples: Samples) -> list[Target]:
    def t(name: str, ours: float, base: float, limit: float, unit: str) -> Target:
        ratio = _ratio(ours, base)
        met = None if math.isnan(ratio) else ratio <= limit
        return Target(name, ours, base, ratio, limit, unit, met)

    def t_abs(name: str, value: float, limit: float) -> Target:
        met = None if math.isnan(value) else value <= limit
        return Target(name, value, math.nan, value, limit, "ms", met)

    m = lambda w, s, k: med(samples, w, s, k)  # noqa: E731

    def width(w: str, s: str, k: str) -> float:
        values = samples.get(w, {}).get(s, {}).get(k, [])
        return max(values) - min(values) if len(values) >= 2 else math.nan

    out = [
        t(
            "W3 key of a 1 GB input / raw xxh3_128",
            m("3", "ipy_resume", "key_s"),
            m("3", "baseline", "xxh3_s"),
            1.5,
            "s",
        ),
        t(
            "W1 save of a 1 GB array (Store.save) / raw write+fsync",
            m("1", "ipy_resume", "store_save_s"),
            m("1", "baseline", "write_fsync_s"),
            1.3,
            "s",
        ),
        t(
            "W1 restore of a 1 GB array / np.load (page cache)",
            m("1", "ipy_resume", "hit_s"),
            m("1", "baseline", "np_load_s"),
            0.6,  # issue 18: a mapped restore copies nothing (1.5 while it was a read)
            "s",
        ),
        t(
            "W12 restore as after a crash / np.load (fresh processes)",
            m("12", "ipy_resume", "restore_s"),
            m("12", "baseline", "np_load_s"),
            crash.TARGET,
            "s",
        ),
        t(
            "W12 spread (max-min) of those restores / of np.load",
            width("12", "ipy_resume", "restore_s"),
            width("12", "baseline", "np_load_s"),
            1.0,
            "s",
        ),
        t(
            "W1 re-checkpoint unchanged: bytes written / array size",
            m("1", "ipy_resume", "recheckpoint_written_bytes"),
            m("1", "baseline", "array_bytes"),
            0.01,
            "bytes",
        ),
        t(
            "W2 bytes written after a 1-element change / Kishu's",
            m("2", "ipy_resume", "written_bytes"),
            m("2", "kishu", "written_bytes"),
            0.05,
            "bytes",
        ),
        t_abs(
            "W5 small-cell overhead per miss, excl. fsync (ms)",
            1000 * m("5", "ipy_resume", "miss_overhead_excl_fsync_s"),
            10.0,
        ),
        t_abs(
            "W5 wait after the last miss until every miss is durable, per miss (ms)",
            1000 * m("5", "ipy_resume", "durable_wait_per_miss_s"),
            10.0,  # (a writer that commits at least 100 small saves a second)
        ),
        t_abs(
            "W5 small-cell overhead per hit (ms)",
            1000 * m("5", "ipy_resume", "hit_overhead_s"),
            3.0,
        ),
        t_abs(
            "W5 recording the files a cell reads, per miss (ms)",
            1000
            * (
                m("5", "ipy_resume", "miss_overhead_s")
                - m("5", "ipy_resume", "miss_overhead_no_file_deps_s")
            ),
            1.0,
        ),
        t_abs(
            "W5 check of 100 unchanged files before a hit (ms)",
            1000 * m("5", "ipy_resume", "check_100_files_s"),
            5.0,
        ),
    ]
    return out


# (workload, metric, unit, label): the rows compared with the peers
PEER_METRICS = [
    ("1", "miss_s", "s", "1 GB array: first run (execute + save)"),
    ("1", "hit_s", "s", "1 GB array: restore"),
    ("2", "rerun_s", "s", "1-element change of 1 GB input, re-run"),
    ("2", "written_bytes", "bytes", "  bytes written by that re-run"),
    ("3", "hit_s", "s", "1 GB input, tiny output: hit (key)"),
    ("4", "miss_s", "s", "10M-row DataFrame: first run"),
    ("4", "hit_s", "s", "10M-row DataFrame: restore"),
    ("5", "miss_overhead_s", "s", "small cell: overhead per miss"),
    ("5", "hit_overhead_s", "s", "small cell: overhead per hit"),
    ("5", "miss_cpu_overhead_s", "s", "  kernel-thread CPU per miss"),
    ("5", "hit_cpu_overhead_s", "s", "  kernel-thread CPU per hit"),
    ("6", "again_s", "s", "Run all after restart (3 GB state)"),
    ("7", "disk_bytes", "bytes", "20 checkpoints of 500 MB state: disk"),
    ("7", "step_s", "s", "  time per checkpoint step"),
]


# A harness note with one of these words says the peer's figure answers another question.
_NOT_COMPARABLE = ("stale", "not comparable")


def peer_rows(samples: Samples, notes: Notes | None = None) -> list[PeerRow]:
    rows = []
    for workload, metric, unit, label in PEER_METRICS:
        if workload not in samples:
            continue
        ours = med(samples, workload, "ipy_resume", metric)
        theirs = {p: med(samples, workload, p, metric) for p in PEERS}
        if workload == "6":
            theirs["re-execute"] = med(samples, workload, "plain", metric)
        flagged = {
            peer: text
            for peer, texts in (notes or {}).get(workload, {}).items()
            for text in texts
            if any(word in text for word in _NOT_COMPARABLE)
        }
        rows.append(PeerRow(f"W{workload}", label, unit, ours, theirs, flagged))
    return rows


def fmt(value: float, unit: str) -> str:
    if math.isnan(value):
        return "n/a"
    if unit == "bytes":
        for suffix, size in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
            if abs(value) >= size:
                return f"{value / size:.2f} {suffix}"
        return f"{value:.0f} B"
    if unit == "ms":
        return f"{value:.2f} ms"
    if abs(value) < 1:
        return f"{value * 1000:.1f} ms"
    return f"{value:.2f} s"


def fmt_ratio(value: float) -> str:
    if math.isnan(value):
        return "n/a"
    if value >= 100:
        return f"{value:.0f}x"
    return f"{value:.2f}x" if value < 10 else f"{value:.1f}x"


def table(summary: dict[str, Any]) -> str:
    lines = ["## Targets (ratios to baselines measured in the same run; medians)", ""]
    lines.append("| target | ipy_resume | baseline | ratio | limit | met |")
    lines.append("|---|---|---|---|---|---|")
    for t in summary["targets"]:
        unit = t["unit"]
        ratio = t["ratio"]
        if unit == "ms":
            shown_ratio, base = "-", "-"
        else:
            base = fmt(t["base"], unit)
            shown_ratio = (
                f"{ratio * 100:.2f}%"
                if unit == "bytes" and not math.isnan(ratio)
                else fmt_ratio(ratio)
            )
        limit = (
            f"≤ {t['limit'] * 100:g}%"
            if unit == "bytes"
            else (f"≤ {t['limit']:g} ms" if unit == "ms" else f"≤ {t['limit']:g}x")
        )
        met = {True: "yes", False: "**no**", None: "n/a"}[t["met"]]
        lines.append(
            f"| {t['name']} | {fmt(t['ours'], unit)} | {base} | {shown_ratio} | {limit} | {met} |"
        )
    lines += [
        "",
        "## Against the peers (medians; in brackets: peer / ipy_resume, > 1 = ipy_resume better)",
        "",
    ]
    columns = [*PEERS, "re-execute"]
    lines.append("| workload | ipy_resume | " + " | ".join(columns) + " |")
    lines.append("|---|---|" + "---|" * len(columns))
    for row in summary["peers"]:
        cells = []
        for peer in columns:
            value = row["peers"].get(peer, math.nan)
            if peer in row.get("not_comparable", {}):
                cells.append("not comparable")
                continue
            if math.isnan(value):
                cells.append("n/a")
                continue
            ratio = _ratio(value, row["ours"])
            cells.append(f"{fmt(value, row['unit'])} ({fmt_ratio(ratio)})")
        label = f"{row['workload']} {row['metric']}"
        lines.append(f"| {label} | {fmt(row['ours'], row['unit'])} | " + " | ".join(cells) + " |")
    if summary.get("corpus"):
        lines += ["", corpus.table(summary["corpus"])]
    if summary.get("graphs"):
        lines += ["", graphs.table(summary["graphs"])]
    if summary.get("batch"):
        lines += ["", batch.table(summary["batch"])]
    if summary.get("s3"):
        lines += ["", s3.table(summary["s3"])]
    if summary.get("crash"):
        lines += ["", crash.table(summary["crash"])]
    if summary.get("torch"):
        lines += ["", torch_bench.table(summary["torch"])]
    if summary.get("sklearn"):
        lines += ["", sklearn_bench.table(summary["sklearn"])]
    if summary.get("big_output"):
        lines += ["", big_output.table(summary["big_output"])]
    return "\n".join(lines)


def summarize(samples: Samples, notes: Notes | None = None) -> dict[str, Any]:
    """Targets and peer rows of a run; *notes* mark peer figures that are not comparable."""
    return {
        "targets": [asdict(t) for t in targets(samples)],
        "peers": [asdict(r) for r in peer_rows(samples, notes)],
        "corpus": corpus.summary(samples),
        "graphs": graphs.summary(samples),
        "batch": batch.summary(samples),
        "s3": s3.summary(samples),
        "crash": crash.summary(samples),
        "torch": torch_bench.summary(samples),
        "sklearn": sklearn_bench.summary(samples),
        "big_output": big_output.summary(samples),
    }


def chart(summary: dict[str, Any], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (top, bottom) = plt.subplots(
        2, 1, figsize=(11, 10), gridspec_kw={"height_ratios": [1, 1.4]}
    )
    tg = summary["targets"]
    names = [t["name"].split(" / ")[0] if t["unit"] == "s" else t["name"] for t in tg]
    ratios = [0.0 if math.isnan(t["ratio"]) else t["ratio"] / t["limit"] for t in tg]
    colors = ["tab:green" if t["met"] else "tab:red" for t in tg]
    top.barh(names, ratios, color=colors)
    top.tick_params(axis="y", labelsize=8)
    top.axvline(1.0, color="black", linestyle="--", linewidth=1)
    top.set_xlabel("measured / allowed  (left of the dashed line = target met)")
    top.set_title("Targets: ratio to the in-run floor, divided by the target's limit")
    top.invert_yaxis()

    rows = summary["peers"]
    columns = [*PEERS, "re-execute"]
    width = 0.8 / len(columns)
    for j, peer in enumerate(columns):
        values = []
        for row in rows:
            value = row["peers"].get(peer, math.nan)
            if peer in row.get("not_comparable", {}):
                value = math.nan
            values.append(_ratio(value, row["ours"]))
        ys = [i + j * width for i in range(len(rows))]
        bottom.barh(ys, [0 if math.isnan(v) else v for v in values], height=width, label=peer)
    bottom.set_yticks([i + 0.4 - width / 2 for i in range(len(rows))])
    bottom.set_yticklabels([f"{r['workload']} {r['metric'].strip()}" for r in rows], fontsize=8)
    bottom.set_xscale("log")
    bottom.axvline(1.0, color="black", linestyle="--", linewidth=1)
    bottom.set_xlabel("peer / ipy_resume (log; right of the dashed line = ipy_resume better)")
    bottom.set_title(
        "Against the peers (missing bar: the peer cannot do it, or gave no comparable result)"
    )
    bottom.invert_yaxis()
    bottom.legend(fontsize=8, loc="lower right")
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
