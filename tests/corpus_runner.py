"""Run one corpus notebook three ways and say exactly where a restore differs from a run.

1. **plain**: the notebook as written, in a fresh kernel;
2. **wrapped**: ``%load_ext ipy_resume`` first, every code cell under
   ``%%checkpoint cK`` (K = the cell's position in the notebook) plus the options
   in its ``ipy_resume`` metadata, against a new store;
3. **restored**: the wrapped notebook again, in a fresh kernel over the same store
   and a fresh copy of the working folder (files the cells wrote are gone: those
   declared with ``--files`` must come back from the store).

Each kernel gets a working folder holding only the notebook, and
``IPY_RESUME_DIR``/``JUPYTER_DATA_DIR`` of its own (runs 2 and 3 share theirs).
Runs 2 and 3 use the same folder path, emptied in between, as a user re-running
a notebook in place would.

Checks (each failure becomes a :class:`Finding` naming the run, the cell and what
differed): no cell fails in runs 2 or 3 that passed in run 1; every wrapped cell
restores in run 3 (status line on stderr, and the store's journal), with no other
``ipy_resume:`` message; run 3 shows what run 2 showed (streams joined per name
without the product's own lines, rich outputs by MIME type, images by the digest
of their bytes); the namespace after run 3 equals the one after run 2 by a value
fingerprint computed in the kernel (``tests/corpus/namespace_probe.py``), with the
same sharing between names, RNG states and library settings; the working folder
holds the same files; no cell stalls (per-cell timeout).

Used by ``tests/test_corpus.py`` and by ``benchmarks/corpus.py`` (which adds a cell
timing ``Engine.plan``, ``instrument=True``).
"""

from __future__ import annotations

import ast
import base64
import copy
import difflib
import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import nbformat
from nbclient import NotebookClient
from nbclient.exceptions import CellTimeoutError, DeadKernelError
from nbformat.v4 import new_code_cell

from ipy_resume.frontends.headless import wait_for_saves

CORPUS = Path(__file__).resolve().parent / "corpus"
PROBE_SOURCE = CORPUS / "namespace_probe.py"
PREFIX = "ipy_resume: "
CELL_TIMEOUT_S = 120.0
RUNS = ("plain", "wrapped", "restored")
PROBE_MARKER = "corpus-probe: "
BENCH_MARKER = "corpus-bench: "

_STATUS = re.compile(r"^ipy_resume: (executed|restored) '([^']*)'")
_PROGRESS = re.compile(r"^ipy_resume: loop \d+(/\d+)?\s")
# the writer's line once a save is durable (a kernel's cell says "saving" and returns; the
# line reaches the cell's output when it comes before the kernel is idle again)
_DURABLE = re.compile(r"^ipy_resume: saved checkpoint \w+ of '([^']*)' \(")
_EXPLAIN = re.compile(r"^ipy_resume: '([^']*)' executes: (.*)$")
_FIRST_RUN_EXPLAIN = "it has no earlier checkpoint"
_CHANGED_INPUT = re.compile(r"input '([^']+)' (?:changed|is not defined now)")

# Runs in the kernel before the notebook (benchmark only): time every Engine.plan call, i.e.
# the key of each cell, inside the kernel where it happens.
BENCH_SETUP = """\
def _corpus_bench_setup():
    import sys, time, types
    from ipy_resume import engine
    box = types.ModuleType("corpus_bench_timings")
    box.plan = {}
    sys.modules[box.__name__] = box
    original = engine.Engine.plan

    def plan(self, namespace, source, opts):
        started = time.perf_counter()
        try:
            return original(self, namespace, source, opts)
        finally:
            box.plan[opts.cell_id] = box.plan.get(opts.cell_id, 0.0) + time.perf_counter() - started

    engine.Engine.plan = plan

_corpus_bench_setup()
del _corpus_bench_setup
"""
BENCH_REPORT = f"""\
import sys as _corpus_sys, json as _corpus_json
print({BENCH_MARKER!r} + _corpus_json.dumps(_corpus_sys.modules["corpus_bench_timings"].plan))
del _corpus_sys, _corpus_json
"""


def probe_cell_source() -> str:
    """The last cell: run the probe in a scope of its own and print its JSON on one line."""
    text = PROBE_SOURCE.read_text()
    return (
        "_corpus_probe_scope = {'__name__': 'corpus_probe'}\n"
        f"exec(compile({text!r}, 'corpus_probe', 'exec'), _corpus_probe_scope)\n"
        f"print({PROBE_MARKER!r} + _corpus_probe_scope['snapshot_json'](get_ipython().user_ns))\n"
        "del _corpus_probe_scope\n"
    )


def corpus_notebooks() -> list[Path]:
    return sorted(CORPUS.glob("*.ipynb"))


# ---- results --------------------------------------------------------------------------------


@dataclass
class CellResult:
    """One executed cell of one run."""

    label: str  # "cK" for a notebook cell; "load_ext", "probe", "bench-setup", "bench-report"
    index: int | None  # position in the original notebook (None for inserted cells)
    status: str  # ok | error | timeout | dead | skipped | harness-error
    seconds: float = 0.0
    outcome: str | None = None  # wrapped runs: executed | restored | none
    messages: list[str] = field(default_factory=list)  # ipy_resume: lines that are no status
    explain: list[str] = field(default_factory=list)  # --explain lines
    progress: int = 0  # resumable-loop progress lines seen
    durable: bool = False  # the writer's "saved" line reached the cell (it may not: timing)
    error: str | None = None
    streams: dict[str, str] = field(default_factory=dict)  # product lines removed
    rich: list[dict[str, str]] = field(default_factory=list)  # one per display/result


@dataclass
class RunResult:
    kind: str
    kernel_start_s: float = 0.0
    wall_s: float = 0.0
    cells_s: float = 0.0  # notebook cells (and %load_ext), no probe or instrumentation
    cells: list[CellResult] = field(default_factory=list)
    probe: dict[str, Any] | None = None
    plan_s: dict[str, float] = field(default_factory=dict)  # key time per cell (instrument)
    files: dict[str, str] = field(default_factory=dict)  # working folder: path -> sha256
    stopped: str | None = None  # why the run stopped early

    def cell(self, label: str) -> CellResult | None:
        return next((c for c in self.cells if c.label == label), None)

    def notebook_cells(self) -> list[CellResult]:
        return [c for c in self.cells if c.index is not None]


@dataclass
class Finding:
    check: str  # plain-failure, stall, failure, re-execution, message, journal, output,
    #             namespace, sharing, rng, settings, files, probe
    run: str
    cell: str | None
    detail: str


@dataclass
class CorpusResult:
    notebook: str
    runs: dict[str, RunResult]
    findings: list[Finding]
    sources: dict[str, str]  # label -> original cell source

    def report(self, excerpt_lines: int = 3) -> str:
        """Every finding, grouped by check, with the cell's source excerpt."""
        if not self.findings:
            return f"{self.notebook}: no differences"
        lines = [f"{self.notebook}: {len(self.findings)} finding(s)  [{self.timing()}]"]
        for check in dict.fromkeys(f.check for f in self.findings):
            lines.append(f"== {check}")
            for f in (f for f in self.findings if f.check == check):
                where = f" {f.cell}" if f.cell else ""
                lines.append(f"- [{f.run}{where}] {f.detail}")
                if f.cell and f.cell in self.sources:
                    lines.append("    | " + excerpt(self.sources[f.cell], excerpt_lines))
        return "\n".join(lines)

    def timing(self) -> str:
        return ", ".join(f"{k} {r.wall_s:.1f} s" for k, r in self.runs.items())


def excerpt(source: str, lines: int = 3, width: int = 100) -> str:
    picked = [line for line in source.splitlines() if line.strip()][:lines]
    return " / ".join(line.strip()[:width] for line in picked)


# ---- preparing the notebooks ----------------------------------------------------------------


def checkpoint_line(index: int, cell: Any, explain: bool) -> str:
    """``%%checkpoint cK`` with the options the cell's metadata asks for."""
    words = ["%%checkpoint", f"c{index}"]
    if explain:
        words.append("--explain")
    options = cell.metadata.get("ipy_resume", {})
    files = [str(f) for f in options.get("files", [])]
    if files:
        words += ["--files", *(shlex.quote(f) for f in files)]
    return " ".join(words)


def _inserted(source: str, label: str) -> Any:
    cell = new_code_cell(source)
    cell.metadata["corpus"] = {"label": label}
    return cell


def prepare(nb: Any, kind: str, *, explain: bool, instrument: bool) -> Any:
    """The notebook to execute for run *kind*: labelled cells, wrapped when asked, probe last."""
    out = copy.deepcopy(nb)
    cells: list[Any] = []
    if kind != "plain":
        cells.append(_inserted("%load_ext ipy_resume", "load_ext"))
        if instrument:
            cells.append(_inserted(BENCH_SETUP, "bench-setup"))
    for index, cell in enumerate(out.cells):
        if cell.cell_type == "code" and not cell.source.strip():
            continue  # an empty cell does nothing, wrapped or not
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
            cell.metadata["corpus"] = {"label": f"c{index}", "index": index}
            if kind != "plain":
                cell.source = checkpoint_line(index, cell, explain) + "\n" + cell.source
        cells.append(cell)
    if kind != "plain":
        if instrument:
            cells.append(_inserted(BENCH_REPORT, "bench-report"))
        cells.append(_inserted(probe_cell_source(), "probe"))
    out.cells = cells
    return out


# ---- outputs --------------------------------------------------------------------------------


def split_product_lines(text: str) -> tuple[str, list[str]]:
    """*text* without the product's own lines (also ``\\r``-rewritten progress), and those lines.

    When the product wrote anything, lines left empty are dropped too: the product
    starts some messages with a newline of its own.
    """
    kept: list[str] = []
    ours: list[str] = []
    for line in text.splitlines(keepends=True):
        ending = "\n" if line.endswith("\n") else ""
        segments = line[: len(line) - len(ending)].split("\r")
        mine = [s for s in segments if s.startswith(PREFIX)]
        if not mine:
            kept.append(line)
            continue
        ours.extend(s.rstrip() for s in mine)
        others = [s for s in segments if s and not s.startswith(PREFIX)]
        if others:
            kept.append("\r".join(others) + ending)
    if ours:
        kept = [line for line in kept if line.strip()]
    return "".join(kept), ours


def _rich(data: dict[str, Any]) -> dict[str, str]:
    shown: dict[str, str] = {}
    for mime, value in data.items():
        if mime.startswith("image/") and mime != "image/svg+xml":
            raw = base64.b64decode(value if isinstance(value, str) else "".join(value))
            shown[mime] = "sha256:" + hashlib.sha256(raw).hexdigest()
        elif isinstance(value, (dict, list)):
            shown[mime] = json.dumps(value, sort_keys=True)
        else:
            shown[mime] = value if isinstance(value, str) else "".join(value)
    return shown


def read_outputs(cell: Any, result: CellResult) -> None:
    """Fill *result* from the cell's outputs: streams, rich outputs, errors, product lines."""
    streams: dict[str, str] = {}
    for output in cell.get("outputs", []):
        kind = output.get("output_type")
        if kind == "stream":
            name = output.get("name", "stdout")
            text = output.get("text", "")
            streams[name] = streams.get(name, "") + (
                text if isinstance(text, str) else "".join(text)
            )
        elif kind in ("display_data", "execute_result"):
            result.rich.append({"output_type": kind, **_rich(output.get("data", {}))})
        elif kind == "error":
            result.error = f"{output.get('ename')}: {output.get('evalue')}"[:500]
    for name, text in streams.items():
        cleaned, ours = split_product_lines(text)
        result.streams[name] = cleaned
        for line in ours:
            status = _STATUS.match(line)
            explained = _EXPLAIN.match(line)
            if status and status.group(2) == result.label and result.outcome is None:
                result.outcome = status.group(1)
            elif _PROGRESS.match(line):
                result.progress += 1
            elif (durable := _DURABLE.match(line)) and durable.group(1) == result.label:
                result.durable = True
            elif explained and explained.group(1) == result.label:
                result.explain.append(explained.group(2))
            else:
                result.messages.append(line)


def folder_files(folder: Path, skip: set[str]) -> dict[str, str]:
    files: dict[str, str] = {}
    for path in sorted(folder.rglob("*")):
        rel = path.relative_to(folder).as_posix()
        if path.is_file() and rel not in skip and rel.split("/")[0] not in skip:
            files[rel] = hashlib.sha256(path.read_bytes()).hexdigest()
    return files


# ---- running --------------------------------------------------------------------------------


def kernel_env(root: Path, store: Path) -> dict[str, str]:
    """The environment of one kernel: its store and the key directory of this corpus run."""
    env = dict(os.environ)
    env["JUPYTER_DATA_DIR"] = str(root / "jupyter-data")
    env["IPY_RESUME_DIR"] = str(store)
    env.pop("PYTEST_CURRENT_TEST", None)
    return env


def fresh_folder(folder: Path, notebook: Path, data: tuple[Path, ...] = ()) -> None:
    """*folder* holding a copy of *notebook* and of each *data* file or folder (the corpus
    notebooks make their own data; a public notebook may read files that ship with it)."""
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    shutil.copy(notebook, folder / notebook.name)
    for item in data:
        if item.is_dir():
            shutil.copytree(item, folder / item.name)
        else:
            shutil.copy2(item, folder / item.name)


def execute(
    nb: Any, kind: str, folder: Path, env: dict[str, str], cell_timeout: float
) -> RunResult:
    """Run *nb* cell by cell in a fresh kernel; stop at the first stall or dead kernel."""
    run = RunResult(kind)
    client = NotebookClient(
        nb,
        timeout=int(cell_timeout),
        kernel_name="python3",
        allow_errors=True,
        resources={"metadata": {"path": str(folder)}},
    )
    started = time.perf_counter()
    with client.setup_kernel(env=env, cwd=str(folder)):
        run.kernel_start_s = time.perf_counter() - started
        for position, cell in enumerate(nb.cells):
            if cell.cell_type != "code":
                continue
            meta = cell.metadata.get("corpus", {})
            result = CellResult(meta.get("label", f"#{position}"), meta.get("index"), "ok")
            run.cells.append(result)
            if run.stopped:
                result.status = "skipped"
                continue
            cell_started = time.perf_counter()
            try:
                client.execute_cell(cell, position)
            except CellTimeoutError:
                result.status = "timeout"
                run.stopped = f"{result.label} stalled: no reply within {cell_timeout:.0f} s"
            except DeadKernelError:
                result.status = "dead"
                run.stopped = f"the kernel died during {result.label}"
            except Exception as exc:  # the harness itself: report it, do not hide the rest
                result.status = "harness-error"
                result.error = f"{type(exc).__name__}: {exc}"[:500]
                run.stopped = f"the harness could not run {result.label}: {result.error}"
            result.seconds = time.perf_counter() - cell_started
            read_outputs(cell, result)
            if result.status == "ok" and result.error:
                result.status = "error"
            if result.label == "probe":
                run.probe = _marked_json(result, PROBE_MARKER)
            elif result.label == "bench-report":
                run.plan_s = _marked_json(result, BENCH_MARKER) or {}
        if kind != "plain" and not run.stopped:
            # As `ipy-resume run` does: a shutdown gives the kernel seconds to exit, and a
            # loaded machine may still be writing its last saves then (a save cut short is
            # lost whole and finished by the next kernel, whose timeline then shows it).
            wait_for_saves(client)
    run.wall_s = time.perf_counter() - started
    run.cells_s = sum(c.seconds for c in run.cells if c.index is not None or c.label == "load_ext")
    return run


def _marked_json(result: CellResult, marker: str) -> dict[str, Any] | None:
    text = result.streams.get("stdout", "")
    for line in text.splitlines():
        if line.startswith(marker):
            data: dict[str, Any] = json.loads(line[len(marker) :])
            result.streams["stdout"] = ""  # the probe's output is data, not a cell output
            return data
    return None


def journal_events(store: Path) -> list[Any]:
    from ipy_resume.store.journal import Journal

    try:
        return list(Journal(store).events())
    except Exception:  # no journal yet, or unreadable: the check reports missing events
        return []


def listed_checkpoints(store: Path, env: dict[str, str]) -> tuple[list[dict[str, Any]], str]:
    """``ipy-resume list --json --store DIR``: its records, or an error text."""
    proc = subprocess.run(
        [sys.executable, "-m", "ipy_resume.frontends.cli", "list", "--json", "--store", str(store)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    if proc.returncode != 0:
        return [], f"exit {proc.returncode}: {proc.stderr.strip()[-500:]}"
    try:
        return list(json.loads(proc.stdout)), ""
    except json.JSONDecodeError as exc:
        return [], f"not JSON ({exc}): {proc.stdout[:300]}"


def run_three_ways(
    notebook: Path,
    root: Path,
    *,
    cell_timeout: float = CELL_TIMEOUT_S,
    explain: bool = True,
    instrument: bool = False,
    data: tuple[Path, ...] = (),
) -> CorpusResult:
    """Plain, wrapped and restored runs of *notebook* under *root*, compared; *data* are
    copied next to the notebook before each run."""
    root.mkdir(parents=True, exist_ok=True)
    nb = nbformat.read(notebook, as_version=4)
    store = root / "store"
    shutil.rmtree(store, ignore_errors=True)
    runs: dict[str, RunResult] = {}

    plain_dir = root / "plain"
    fresh_folder(plain_dir, notebook, data)
    plain_env = kernel_env(root, root / "plain-store-unused")
    runs["plain"] = execute(
        prepare(nb, "plain", explain=explain, instrument=False),
        "plain",
        plain_dir,
        plain_env,
        cell_timeout,
    )

    env = kernel_env(root, store)
    work = root / "work"
    wrapped_nb = prepare(nb, "wrapped", explain=explain, instrument=instrument)
    fresh_folder(work, notebook, data)
    runs["wrapped"] = execute(copy.deepcopy(wrapped_nb), "wrapped", work, env, cell_timeout)
    skip = {notebook.name, *(item.name for item in data)}
    runs["wrapped"].files = folder_files(work, skip)
    before = {getattr(e, "event_id", id(e)) for e in journal_events(store)}

    fresh_folder(work, notebook, data)
    runs["restored"] = execute(copy.deepcopy(wrapped_nb), "restored", work, env, cell_timeout)
    runs["restored"].files = folder_files(work, skip)
    events = [e for e in journal_events(store) if getattr(e, "event_id", id(e)) not in before]
    listed, list_error = listed_checkpoints(store, env)

    sources = {
        f"c{i}": cell.source
        for i, cell in enumerate(nb.cells)
        if cell.cell_type == "code" and cell.source.strip()
    }
    findings = compare(runs, sources, events, listed, list_error)
    return CorpusResult(notebook.name, runs, findings, sources)


# ---- comparing ------------------------------------------------------------------------------


class Names:
    """Which cells bind, change in place and use each name (where a value came from)."""

    def __init__(self, sources: dict[str, str]) -> None:
        from IPython.core.inputtransformer2 import TransformerManager

        transformer = TransformerManager()
        self.bound: dict[str, list[str]] = {}
        self.changed: dict[str, list[str]] = {}  # df["x"] = ..., obj.attr = ..., a[i] += ...
        self.used: dict[str, list[str]] = {}
        for label, source in sources.items():
            try:
                tree = ast.parse(transformer.transform_cell(source))
            except SyntaxError:
                continue
            for node in ast.walk(tree):
                if isinstance(node, (ast.Subscript, ast.Attribute)) and isinstance(
                    node.ctx, ast.Store
                ):
                    root = node.value
                    while isinstance(root, (ast.Subscript, ast.Attribute)):
                        root = root.value
                    if isinstance(root, ast.Name):
                        self.changed.setdefault(root.id, []).append(label)
                elif isinstance(node, ast.Name):
                    target = self.bound if isinstance(node.ctx, ast.Store) else self.used
                    target.setdefault(node.id, []).append(label)
                elif isinstance(node, (ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef)):
                    self.bound.setdefault(node.name, []).append(label)
                elif isinstance(node, (ast.Import, ast.ImportFrom)):
                    for alias in node.names:
                        name = (alias.asname or alias.name).split(".")[0]
                        self.bound.setdefault(name, []).append(label)

    def where(self, path: str) -> str:
        name = root_name(path)
        bound = self.bound.get(name, [])
        used = [c for c in self.used.get(name, []) if c not in bound]
        changed = [c for c in self.changed.get(name, []) if c not in bound]
        parts = []
        if bound:
            parts.append("bound in " + ", ".join(dict.fromkeys(bound)))
        if changed:
            parts.append("changed in place in " + ", ".join(dict.fromkeys(changed)))
        if used:
            parts.append("last used in " + used[-1])
        return f" ({'; '.join(parts)})" if parts else ""

    def binder_before(self, name: str, label: str) -> str | None:
        """The last cell before *label* that binds *name* or changes it in place."""
        position = int(label[1:])
        cells = self.bound.get(name, []) + self.changed.get(name, [])
        earlier = sorted({int(c[1:]) for c in cells if int(c[1:]) < position})
        return f"c{earlier[-1]}" if earlier else None


def compare(
    runs: dict[str, RunResult],
    sources: dict[str, str],
    events: list[Any],
    listed: list[dict[str, Any]],
    list_error: str,
) -> list[Finding]:
    plain, wrapped, restored = runs["plain"], runs["wrapped"], runs["restored"]
    names = Names(sources)
    found: list[Finding] = []

    for run in runs.values():
        if run.stopped:
            found.append(Finding("stall", run.kind, _stalled_cell(run), run.stopped))

    # Run 1 must pass: otherwise the notebook itself is broken and nothing else means much.
    for cell in plain.notebook_cells():
        if cell.status not in ("ok", "skipped"):  # skipped: after a stall, reported above
            detail = f"the notebook fails without ipy_resume: {cell.error or cell.status}"
            found.append(Finding("plain-failure", "plain", cell.label, detail))

    for run in (wrapped, restored):
        for cell in run.cells:
            if cell.index is None:
                if cell.status not in ("ok", "skipped"):
                    what = cell.error or cell.status
                    found.append(Finding("probe", run.kind, None, f"{cell.label} failed: {what}"))
                continue
            before = plain.cell(cell.label)
            if cell.status in ("error", "timeout", "dead") and before and before.status == "ok":
                said = f"; ipy_resume said: {' | '.join(cell.messages)}" if cell.messages else ""
                found.append(
                    Finding("failure", run.kind, cell.label, f"{cell.error or cell.status}{said}")
                )

    _check_outcomes(wrapped, restored, names, found)
    _check_messages(wrapped, restored, found)
    _check_journal(wrapped, restored, events, listed, list_error, found)
    _check_outputs(wrapped, restored, found)
    _check_namespace(wrapped, restored, names, found)
    _check_files(wrapped, restored, found)
    return found


def _stalled_cell(run: RunResult) -> str | None:
    cell = next((c for c in run.cells if c.status in ("timeout", "dead", "harness-error")), None)
    return cell.label if cell and cell.index is not None else None


def _check_outcomes(
    wrapped: RunResult, restored: RunResult, names: Names, found: list[Finding]
) -> None:
    re_executed: set[str] = set()
    for cell in restored.notebook_cells():
        if cell.status == "skipped" or cell.outcome == "restored":
            continue
        first = wrapped.cell(cell.label)
        why: list[str] = []
        if cell.explain:
            why.append("explain: " + "; ".join(cell.explain))
            for name in _CHANGED_INPUT.findall(" ".join(cell.explain)):
                origin = names.binder_before(name, cell.label)
                if origin in re_executed:
                    why.append(f"'{name}' comes from {origin}, which re-executed too")
                elif origin:
                    why.append(f"'{name}' comes from {origin}, which restored")
        if first is not None and first.messages:
            why.append("wrapped run said: " + " | ".join(first.messages))
        if first is not None and first.outcome != "executed":
            why.append(f"wrapped run outcome: {first.outcome or 'no status line'}")
        if cell.outcome == "executed":
            re_executed.add(cell.label)
            what = "executed again instead of restoring"
        else:
            what = f"no 'restored' status line (status {cell.status}, outcome {cell.outcome})"
        found.append(
            Finding(
                "re-execution",
                "restored",
                cell.label,
                what + (": " if why else "") + "; ".join(why),
            )
        )
    for cell in wrapped.notebook_cells():
        if cell.status == "ok" and cell.outcome != "executed" and not cell.messages:
            found.append(
                Finding(
                    "message", "wrapped", cell.label, "no 'executed' status line and no message"
                )
            )


def _check_messages(wrapped: RunResult, restored: RunResult, found: list[Finding]) -> None:
    for run in (wrapped, restored):
        for cell in run.cells:
            for line in cell.messages:
                found.append(
                    Finding(
                        "message", run.kind, cell.label if cell.index is not None else None, line
                    )
                )
            if run is wrapped:
                odd = [e for e in cell.explain if _FIRST_RUN_EXPLAIN not in e]
                for line in odd:
                    found.append(
                        Finding(
                            "message", run.kind, cell.label, f"first run explains a miss: {line}"
                        )
                    )


def _check_journal(
    wrapped: RunResult,
    restored: RunResult,
    events: list[Any],
    listed: list[dict[str, Any]],
    list_error: str,
    found: list[Finding],
) -> None:
    by_cell: dict[str, list[str]] = {}
    for event in events:
        by_cell.setdefault(str(getattr(event, "cell_id", "?")), []).append(
            str(getattr(event, "outcome", "?"))
        )
    for cell in restored.notebook_cells():
        outcomes = by_cell.pop(cell.label, [])
        if cell.status == "skipped":
            continue
        # The status line is the primary signal (checked above); the journal must agree.
        if cell.outcome is not None:
            agrees = outcomes == [cell.outcome]
        else:
            agrees = not outcomes or (
                len(outcomes) == 1 and outcomes[0] not in ("executed", "restored")
            )
        if not agrees:
            found.append(
                Finding(
                    "journal",
                    "restored",
                    cell.label,
                    f"journal events of the restored run: {outcomes or 'none'}; "
                    f"status line: {cell.outcome or 'none'}",
                )
            )
    for cell_id, outcomes in sorted(by_cell.items()):
        found.append(
            Finding(
                "journal",
                "restored",
                None,
                f"unexpected journal events for '{cell_id}': {outcomes}",
            )
        )
    if list_error:
        found.append(
            Finding("journal", "restored", None, f"ipy-resume list --json failed: {list_error}")
        )
        return
    checkpointed = {str(r.get("cell_id")) for r in listed}
    for cell in wrapped.notebook_cells():
        if cell.status == "ok" and cell.label not in checkpointed:
            found.append(
                Finding(
                    "journal", "wrapped", cell.label, "no checkpoint in `ipy-resume list --json`"
                )
            )


def _text_diff(a: str, b: str, limit: int = 8) -> str:
    diff = difflib.unified_diff(
        a.splitlines(), b.splitlines(), "wrapped", "restored", lineterm="", n=0
    )
    lines = [line for line in diff if not line.startswith(("---", "+++", "@@"))]
    shown = " ⏎ ".join(line[:160] for line in lines[:limit])
    return shown + (f" … (+{len(lines) - limit} lines)" if len(lines) > limit else "")


_ADDRESS = re.compile(r"0x[0-9a-fA-F]+")


def _how_text_differs(a: str, b: str, limit: int = 8) -> str:
    if _ADDRESS.sub("0x…", a) == _ADDRESS.sub("0x…", b):
        return "only memory addresses differ: " + _text_diff(a, b, 2)
    return _text_diff(a, b, limit)


def _check_outputs(wrapped: RunResult, restored: RunResult, found: list[Finding]) -> None:
    for after in restored.notebook_cells():
        before = wrapped.cell(after.label)
        if before is None or before.status != "ok" or after.status != "ok":
            continue
        # A cell that executed again shows fresh output: its differences are consequences.
        note = " (the cell executed again)" if after.outcome == "executed" else ""
        for stream in sorted(set(before.streams) | set(after.streams)):
            a, b = before.streams.get(stream, ""), after.streams.get(stream, "")
            if a != b:
                detail = f"{stream} differs{note}: {_how_text_differs(a, b)}"
                found.append(Finding("output", "restored", after.label, detail))
        if len(before.rich) != len(after.rich):
            kinds = lambda rich: [  # noqa: E731
                f"{r['output_type']}({', '.join(sorted(k for k in r if k != 'output_type'))})"
                for r in rich
            ]
            detail = (
                f"{len(before.rich)} rich output(s) in the wrapped run {kinds(before.rich)}, "
                f"{len(after.rich)} in the restored run {kinds(after.rich)}{note}"
            )
            found.append(Finding("output", "restored", after.label, detail))
            continue
        for number, (a_out, b_out) in enumerate(zip(before.rich, after.rich, strict=True)):
            for key in sorted(set(a_out) | set(b_out)):
                x, y = a_out.get(key), b_out.get(key)
                if x == y:
                    continue
                if x is None or y is None:
                    only = "restored" if x is None else "wrapped"
                    detail = f"output {number}: {key} only in the {only} run{note}"
                elif x.startswith("sha256:") or key == "output_type":
                    detail = f"output {number}: {key} differs{note} ({x[:24]} vs {y[:24]})"
                else:
                    detail = f"output {number}: {key} differs{note}: {_how_text_differs(x, y, 4)}"
                found.append(Finding("output", "restored", after.label, detail))


def _leaf_differences(a: dict[str, str], b: dict[str, str], limit: int = 6) -> list[str]:
    """Differing part paths, deepest first where a parent and a child both differ."""
    differing = sorted(p for p in set(a) | set(b) if a.get(p) != b.get(p))

    def below(q: str, p: str) -> bool:
        return len(q) > len(p) and q.startswith(p) and q[len(p)] in ".[<{"

    leaves = [p for p in differing if not any(below(q, p) for q in differing)]
    described = []
    for path in leaves[:limit]:
        if path not in a:
            described.append(f"{path} (only after restore)")
        elif path not in b:
            described.append(f"{path} (missing after restore)")
        else:
            described.append(path)
    if len(leaves) > limit:
        described.append(f"… {len(leaves) - limit} more")
    return described


def root_name(path: str) -> str:
    return re.split(r"[.\[<{]", path, maxsplit=1)[0]


def _pairs(groups: list[list[str]]) -> set[tuple[str, str]]:
    """Pairs of paths reaching one object, from different names.

    Sharing inside one name's value (two views within ``cv_results_``) is what a pickle
    round trip of that value gives; the contract is about names, so only pairs whose
    paths start at different names count.
    """
    out: set[tuple[str, str]] = set()
    for group in groups:
        for i, a in enumerate(group):
            for b in group[i + 1 :]:
                if root_name(a) != root_name(b):
                    out.add((a, b))
    return out


def _check_namespace(
    wrapped: RunResult, restored: RunResult, names: Names, found: list[Finding]
) -> None:
    a, b = wrapped.probe, restored.probe
    if a is None or b is None:
        missing = [r.kind for r, p in ((wrapped, a), (restored, b)) if p is None]
        found.append(Finding("probe", "/".join(missing), None, "no namespace fingerprint"))
        return
    for run, probe in (("wrapped", a), ("restored", b)):
        for name, error in probe.get("errors", {}).items():
            found.append(Finding("probe", run, None, f"'{name}': {error}"))

    a_names, b_names = a["names"], b["names"]
    a_kinds = {**{n: v["type"] for n, v in a_names.items()}, **a["skipped"]}
    b_kinds = {**{n: v["type"] for n, v in b_names.items()}, **b["skipped"]}
    for name in sorted(set(a_kinds) - set(b_kinds)):
        if a_kinds[name] == "closed file":
            continue  # a `with` block's spent file: ipy_resume leaves it out on purpose
        found.append(
            Finding(
                "namespace",
                "restored",
                None,
                f"'{name}' ({a_kinds[name]}) is missing after the restore{names.where(name)}",
            )
        )
    for name in sorted(set(b_kinds) - set(a_kinds)):
        found.append(
            Finding(
                "namespace",
                "restored",
                None,
                f"'{name}' ({b_kinds[name]}) exists only after the restore{names.where(name)}",
            )
        )
    for name in sorted(set(a_kinds) & set(b_kinds)):
        if a_kinds[name] != b_kinds[name]:
            found.append(
                Finding(
                    "namespace",
                    "restored",
                    None,
                    f"'{name}' is {a_kinds[name]} in the wrapped run, {b_kinds[name]} after the restore{names.where(name)}",
                )
            )
            continue
        x, y = a_names.get(name), b_names.get(name)
        if x is None or y is None or x["digest"] == y["digest"]:
            continue
        where = _leaf_differences(x.get("parts", {}), y.get("parts", {}))
        at = f" at {', '.join(where)}" if where else ""
        found.append(
            Finding(
                "namespace",
                "restored",
                None,
                f"'{name}' ({x['type']}) has another value after the restore{at}{names.where(name)}",
            )
        )

    lost = _pairs(a["aliases"]) - _pairs(b["aliases"])
    gained = _pairs(b["aliases"]) - _pairs(a["aliases"])
    for p, q in sorted(lost)[:12]:
        found.append(
            Finding(
                "sharing",
                "restored",
                None,
                f"{p}{names.where(p)} and {q}{names.where(q)} are one object in the wrapped run, "
                "two after the restore",
            )
        )
    if len(lost) > 12:
        found.append(
            Finding("sharing", "restored", None, f"… {len(lost) - 12} more shared pairs lost")
        )
    for p, q in sorted(gained)[:6]:
        found.append(
            Finding("sharing", "restored", None, f"{p} and {q} became one object after the restore")
        )
    a_mem = _pairs(a["shared_memory"])
    b_mem = _pairs(b["shared_memory"])
    for p, q in sorted(a_mem - b_mem)[:12]:
        found.append(
            Finding(
                "sharing",
                "restored",
                None,
                f"arrays {p}{names.where(p)} and {q}{names.where(q)} share memory in the wrapped "
                "run, not after the restore",
            )
        )
    for p, q in sorted(b_mem - a_mem)[:6]:
        found.append(
            Finding(
                "sharing",
                "restored",
                None,
                f"arrays {p} and {q} share memory only after the restore",
            )
        )
    a_mod, b_mod = a.get("module_objects", {}), b.get("module_objects", {})
    for name in sorted(set(a_mod) | set(b_mod)):
        if a_mod.get(name) != b_mod.get(name):
            before = a_mod.get(name) or "a value of its own"
            after = b_mod.get(name) or "a copy"
            found.append(
                Finding(
                    "sharing",
                    "restored",
                    None,
                    f"'{name}' is {before} in the wrapped run, {after} after the restore{names.where(name)}",
                )
            )

    for generator in sorted(set(a["rng"]) | set(b["rng"])):
        if a["rng"].get(generator) != b["rng"].get(generator):
            label = {"random": "Python's random", "numpy": "numpy's global RNG"}.get(
                generator, generator
            )
            found.append(
                Finding(
                    "rng",
                    "restored",
                    None,
                    f"{label} state after the last cell differs between the wrapped and the restored run",
                )
            )

    for group in sorted(set(a["settings"]) | set(b["settings"])):
        x, y = a["settings"].get(group), b["settings"].get(group)
        if x is None or y is None:
            seen_in = "wrapped" if y is None else "restored"
            found.append(
                Finding("settings", "restored", None, f"{group} only seen in the {seen_in} run")
            )
            continue
        keys = sorted(k for k in set(x) | set(y) if x.get(k) != y.get(k))
        if keys:
            shown = "; ".join(f"{k}: {x.get(k)!s:.60} → {y.get(k)!s:.60}" for k in keys[:8])
            more = f" … (+{len(keys) - 8})" if len(keys) > 8 else ""
            found.append(
                Finding(
                    "settings",
                    "restored",
                    None,
                    f"{group}: {len(keys)} setting(s) differ after the restore: {shown}{more}",
                )
            )


def _check_files(wrapped: RunResult, restored: RunResult, found: list[Finding]) -> None:
    a, b = wrapped.files, restored.files
    for path in sorted(set(a) | set(b)):
        if path not in b:
            found.append(
                Finding(
                    "files",
                    "restored",
                    None,
                    f"{path} written in the wrapped run is missing after the restore",
                )
            )
        elif path not in a:
            found.append(
                Finding("files", "restored", None, f"{path} exists only after the restore")
            )
        elif a[path] != b[path]:
            found.append(
                Finding("files", "restored", None, f"{path} has other contents after the restore")
            )


# ---- command line ---------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    """``python tests/corpus_runner.py [NOTEBOOK ...] [--root DIR]``: run and print the report."""
    import argparse
    import tempfile

    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("notebooks", nargs="*", type=Path)
    parser.add_argument("--root", type=Path, default=None)
    parser.add_argument("--cell-timeout", type=float, default=CELL_TIMEOUT_S)
    parser.add_argument("--json", type=Path, default=None, help="also write every result here")
    parser.add_argument(
        "--data", type=Path, nargs="+", default=[], help="files or folders the notebooks read"
    )
    args = parser.parse_args(argv)
    root = args.root or Path(tempfile.mkdtemp(prefix="corpus-"))
    dumped = []
    failed = 0
    for path in args.notebooks or corpus_notebooks():
        result = run_three_ways(
            path, root / path.stem, cell_timeout=args.cell_timeout, data=tuple(args.data)
        )
        print(result.report(), flush=True)
        print(flush=True)
        failed += bool(result.findings)
        dumped.append(to_json(result))
    if args.json:
        args.json.write_text(json.dumps(dumped, indent=1))
    return 1 if failed else 0


def to_json(result: CorpusResult) -> dict[str, Any]:
    from dataclasses import asdict

    data = asdict(result)
    for run in data["runs"].values():
        run["probe"] = None  # large and only useful for the comparison already made
        for cell in run["cells"]:
            cell.pop("streams", None)
            cell.pop("rich", None)
    return data


if __name__ == "__main__":
    raise SystemExit(main())
