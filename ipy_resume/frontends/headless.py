"""Whole notebooks run headless with every code cell checkpointed: batch runs that resume.

``ipy-resume run`` and the papermill engine share this module. A notebook is
executed through nbclient in a kernel that loads ipy_resume at start-up; each code
cell is sent as ``%%checkpoint CELL_ID --quiet`` plus its own source, and put back
as it was once it has run, so the output notebook holds the user's code and the
cell's own outputs only. After a run that died (a killed kernel, a timeout, a lost
machine), the same command restores every completed cell from the store and
executes from the first unfinished one.

CELL_IDs are the notebook's own cell ids (nbformat 4.5) when the file has them,
otherwise a digest of the cell's source (``src-<digest>``, with ``-2``, ``-3`` for
repeats), which survives cells inserted above it.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import nbformat
import xxhash
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError, CellTimeoutError, DeadKernelError
from nbclient.util import run_sync

from ..runtime.analysis import first_line
from ..store import StoreError, location, open_store
from ..store.journal import OUTCOME_PAYLOAD, Journal

LOAD_EXTENSION = "--ext=ipy_resume"
_ID_OK = re.compile(r"^[A-Za-z0-9_.:-]{1,120}$")


@dataclass
class CellReport:
    """What happened to one code cell of a headless run."""

    index: int  # position among all cells of the notebook
    number: int  # 1-based position among code cells
    label: str  # first line of the source
    outcome: str  # executed | restored | uncached | incomplete | failed | error | timeout | dead
    seconds: float = 0.0
    saved: float = 0.0  # run time a restore saved


@dataclass
class RunReport:
    """The cells of one run, and the first that stopped it (None when all ran)."""

    cells: list[CellReport] = field(default_factory=list)
    stopped: CellReport | None = None
    reason: str = ""

    @property
    def ok(self) -> bool:
        return self.stopped is None


# ---- cell ids, labels and parameters --------------------------------------------------------


def cell_ids(nb: Any, trust_ids: bool = True) -> dict[int, str]:
    """The CELL_ID of each code cell, by its index in ``nb.cells``.

    >>> nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x = 1")])
    >>> list(cell_ids(nb, trust_ids=False).values())[0].startswith("src-")
    True
    """
    out: dict[int, str] = {}
    seen: dict[str, int] = {}
    for index, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        own = cell.get("id")
        if trust_ids and isinstance(own, str) and _ID_OK.match(own):
            out[index] = own
            continue
        digest = xxhash.xxh3_64(cell.source.strip().encode("utf-8")).hexdigest()[:12]
        seen[digest] = seen.get(digest, 0) + 1
        out[index] = f"src-{digest}" + (f"-{seen[digest]}" if seen[digest] > 1 else "")
    return out


def file_has_cell_ids(path: str | os.PathLike[str]) -> bool:
    """Whether the notebook file on disk carries its own cell ids (nbformat 4.5).

    Without them nbformat makes up random ones on every read, which would never hit.

    >>> file_has_cell_ids("/nonexistent.ipynb")
    False
    """
    try:
        raw = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    cells = raw.get("cells", []) if isinstance(raw, dict) else []
    return bool(cells) and all(isinstance(c, dict) and "id" in c for c in cells)


def parse_value(text: str) -> Any:
    """A ``-p NAME VALUE`` value as papermill reads it: bool, None, int, float, else text.

    >>> [parse_value(v) for v in ("True", "None", "3", "0.5", "abc")]
    [True, None, 3, 0.5, 'abc']
    """
    if text in ("True", "False"):
        return text == "True"
    if text == "None":
        return None
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            continue
    return text


def _literal(value: Any) -> str:
    if isinstance(value, str):
        return json.dumps(value)  # papermill's Python translator: double quotes, escapes
    if isinstance(value, dict):
        items = ", ".join(f"{_literal(k)}: {_literal(v)}" for k, v in value.items())
        return "{" + items + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_literal(v) for v in value) + "]"
    return repr(value)


def inject_parameters(nb: Any, parameters: dict[str, Any]) -> None:
    """Add papermill's ``injected-parameters`` cell after the cell tagged ``parameters``.

    An injected cell from an earlier run is replaced; without a ``parameters`` cell the
    new one goes first, as papermill does.

    >>> nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("a = 1")])
    >>> inject_parameters(nb, {"a": 2}); nb.cells[0].source
    '# Parameters\\na = 2\\n'
    """
    if not parameters:
        return
    for name in parameters:
        if not name.isidentifier():
            raise ValueError(f"parameter name {name!r} is not a Python identifier")
    source = "# Parameters\n" + "".join(f"{k} = {_literal(v)}\n" for k, v in parameters.items())
    cell = nbformat.v4.new_code_cell(source)
    cell.metadata["tags"] = ["injected-parameters"]
    tags = [c.get("metadata", {}).get("tags", []) for c in nb.cells]
    injected = next((i for i, t in enumerate(tags) if "injected-parameters" in t), None)
    marked = next((i for i, t in enumerate(tags) if "parameters" in t), None)
    if injected is not None:
        nb.cells[injected] = cell
    elif marked is not None:
        nb.cells.insert(marked + 1, cell)
    else:
        nb.cells.insert(0, cell)


def wrapped(source: str, cell_id: str) -> str:
    """The source sent to the kernel: the cell under ``%%checkpoint`` (its own kept).

    >>> wrapped("x = 1", "abc")
    '%%checkpoint abc --quiet\\nx = 1'
    """
    if source.lstrip().startswith("%%checkpoint"):
        return source
    return f"%%checkpoint {cell_id} --quiet\n{source}"


# ---- execution ------------------------------------------------------------------------------


def kernel_env(store: location.Location) -> dict[str, str]:
    """The environment of a headless run's kernel (see :func:`location.kernel_env`).

    >>> kernel_env(Path("/srv/store"))["IPY_RESUME_DIR"]
    '/srv/store'
    """
    return location.kernel_env(store)


class CheckpointingCells:
    """nbclient mix-in: every code cell runs under ``%%checkpoint`` and its outcome is
    read back from the store's journal."""

    ids: dict[int, str]
    journal: Journal
    on_outcome: Callable[[int, str, float, float], None] | None

    def setup_checkpoints(
        self,
        ids: dict[int, str],
        store: Path | str,
        on_outcome: Callable[[int, str, float, float], None] | None = None,
    ) -> None:
        self.ids = ids
        # a bucket's timeline is read through its store (events merged from every kernel)
        self.journal = Journal(store) if isinstance(store, Path) else open_store(store).journal()
        self.on_outcome = on_outcome
        self.reported: dict[str, Any] | None = None  # the last reply's outcome payload
        previous = getattr(self, "on_cell_executed", None)

        def capture(**kwargs: Any) -> Any:
            content = (kwargs.get("execute_reply") or {}).get("content", {})
            self.reported = next(
                (
                    p
                    for p in content.get("payload", None) or ()
                    if isinstance(p, dict) and p.get("source") == OUTCOME_PAYLOAD
                ),
                None,
            )
            return previous(**kwargs) if previous is not None else None

        self.on_cell_executed = capture

    async def async_execute_cell(  # type: ignore[no-untyped-def]
        self, cell, cell_index, execution_count=None, store_history=True
    ):
        original = cell.source
        cell_id = self.ids.get(cell_index)
        if cell.cell_type != "code" or cell_id is None or not original.strip():
            return await super().async_execute_cell(  # type: ignore[misc]
                cell, cell_index, execution_count, store_history
            )
        before = self.journal.last()
        self.reported = None
        started = time.perf_counter()
        cell.source = wrapped(original, cell_id)
        try:
            return await super().async_execute_cell(  # type: ignore[misc]
                cell, cell_index, execution_count, store_history
            )
        finally:
            cell.source = original
            if self.on_outcome is not None:
                outcome, saved = self._outcome(cell_id, before.seq if before else None)
                self.on_outcome(cell_index, outcome, time.perf_counter() - started, saved)

    # nbclient binds its synchronous wrapper to its own coroutine: bind it to this one.
    execute_cell = run_sync(async_execute_cell)

    def _outcome(self, cell_id: str, after: int | None) -> tuple[str, float]:
        said = self.reported
        if said is not None and said.get("cell_id") == cell_id:
            # what the kernel said in its reply: a background save's timeline event is
            # only written once the checkpoint is durable, after the reply
            return str(said.get("outcome")), float(said.get("saved") or 0.0)
        try:
            events = self.journal.events(cell_id=cell_id, after=after)
        except Exception:  # the journal is a report; a broken one must not stop the run
            events = []
        if not events:
            return "uncached", 0.0
        return events[-1].outcome, events[-1].saved


class ResumingClient(CheckpointingCells, NotebookClient):
    """A NotebookClient whose code cells are checkpointed."""


def default_kernel(nb: Any) -> str:
    """The kernel the notebook names, else ``python3``.

    >>> default_kernel(nbformat.v4.new_notebook())
    'python3'
    """
    spec = nb.get("metadata", {}).get("kernelspec", {})
    name = spec.get("name") if isinstance(spec, dict) else None
    return name if isinstance(name, str) and name else "python3"


def run_notebook(
    nb: Any,
    *,
    store: Path | str,
    cwd: Path,
    kernel: str,
    cell_timeout: float | None,
    ids: dict[int, str],
    progress: Callable[[CellReport, bool], None] | None = None,
    startup_timeout: float = 120,
) -> RunReport:
    """Execute *nb* in place, every code cell checkpointed in *store*; stop at a failure.

    *progress* is called with ``(report, done)``: once when a cell starts, once when
    it has finished.

    >>> run_notebook(nb, store=Path(".ipy_resume"), cwd=Path("."), kernel="python3",
    ...              cell_timeout=None, ids=cell_ids(nb))  # doctest: +SKIP
    """
    report = RunReport()
    numbers = {i: n for n, i in enumerate(sorted(ids), start=1)}
    current: dict[int, CellReport] = {}

    def outcome(index: int, what: str, seconds: float, saved: float) -> None:
        cell = current.get(index)
        if cell is not None:
            cell.outcome, cell.seconds, cell.saved = what, seconds, saved

    client = ResumingClient(
        nb,
        timeout=int(cell_timeout) if cell_timeout else None,
        startup_timeout=int(startup_timeout),
        kernel_name=kernel,
        extra_arguments=[LOAD_EXTENSION],
        resources={"metadata": {"path": str(cwd)}},
    )
    client.setup_checkpoints(ids, store, outcome)
    with client.setup_kernel(env=kernel_env(store), cwd=str(cwd)):
        for index, cell in enumerate(nb.cells):
            if cell.cell_type != "code":
                continue
            entry = CellReport(index, numbers.get(index, 0), first_line(cell.source), "running")
            current[index] = entry
            report.cells.append(entry)
            if progress is not None:
                progress(entry, False)
            started = time.perf_counter()
            try:
                client.execute_cell(cell, index)
            except CellTimeoutError:
                entry.outcome, report.reason = "timeout", f"no result within {cell_timeout:g} s"
            except DeadKernelError:
                entry.outcome, report.reason = "dead", "the kernel died"
            except CellExecutionError as exc:
                entry.outcome, report.reason = "error", _error_line(exc)
            entry.seconds = entry.seconds or time.perf_counter() - started
            if entry.outcome == "running":  # not sent under %%checkpoint: nothing to run
                entry.outcome = "empty"
            if progress is not None:
                progress(entry, True)
            if entry.outcome in ("timeout", "dead", "error"):
                report.stopped = entry
                break
        # (not after a timeout: the cell may still be running, and must not finish now)
        if report.stopped is None or report.stopped.outcome == "error":
            wait_for_saves(client)
    return report


def wait_for_saves(client: Any) -> None:
    """Make the kernel's background saves durable before it is shut down.

    A shutdown gives the kernel a few seconds to exit; a large save still being
    written then would be lost (whole, never half) and its cell executed next time.
    *client* is an nbclient ``NotebookClient`` whose kernel is running.

    >>> with client.setup_kernel():  # doctest: +SKIP
    ...     client.execute_cell(cell, 0)
    ...     wait_for_saves(client)
    """
    code = "get_ipython().run_line_magic('checkpoint', 'wait')"
    with contextlib.suppress(Exception):  # the kernel went away: nothing to wait for
        run_sync(client.kc.execute_interactive)(
            code, silent=True, store_history=False, timeout=None, output_hook=lambda msg: None
        )


def _error_line(exc: CellExecutionError) -> str:
    name = getattr(exc, "ename", "") or "error"
    value = getattr(exc, "evalue", "") or ""
    return f"{name}: {value}".strip(": ")[:300]


# ---- the command ----------------------------------------------------------------------------


class Progress:
    """One line per finished cell; on a terminal also a live bar for the running one."""

    def __init__(self, total: int, stream: Any = None) -> None:
        self.total = total
        self.stream = stream or sys.stdout
        self.live = bool(getattr(self.stream, "isatty", lambda: False)())
        self._running: CellReport | None = None
        self._started = 0.0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __call__(self, cell: CellReport, done: bool) -> None:
        if not done:
            self._running, self._started = cell, time.perf_counter()
            if self.live and self._thread is None:
                self._thread = threading.Thread(target=self._tick, daemon=True)
                self._thread.start()
            self._draw()
            return
        self._running = None
        saved = f" (saved {_seconds(cell.saved)})" if cell.outcome == "restored" else ""
        line = (
            f"[{cell.number}/{self.total}] {cell.outcome:<10} {_seconds(cell.seconds):>8}"
            f"{saved}  {cell.label}"
        )
        self._write(("\r\033[K" if self.live else "") + line + "\n")

    def close(self) -> None:
        self._stop.set()

    def _tick(self) -> None:
        while not self._stop.wait(0.5):
            self._draw()

    def _draw(self) -> None:
        cell = self._running
        if not self.live or cell is None:
            return
        width = 20
        filled = int(width * (cell.number - 1) / max(self.total, 1))
        bar = "#" * filled + "-" * (width - filled)
        elapsed = _seconds(time.perf_counter() - self._started)
        self._write(f"\r\033[K[{bar}] {cell.number}/{self.total} running {elapsed}  {cell.label}")

    def _write(self, text: str) -> None:
        self.stream.write(text)
        self.stream.flush()


def _seconds(value: float) -> str:
    return f"{value * 1000:.0f} ms" if value < 1 else f"{value:.1f} s"


def run_command(
    source: Path,
    output: Path | None,
    parameters: list[tuple[str, str]],
    store: Path | str | None,
    cell_timeout: float | None,
    kernel: str | None,
) -> int:
    """``ipy-resume run``: execute, report per cell, write the output notebook; exit code.

    >>> run_command(Path("analysis.ipynb"), None, [("alpha", "0.5")], None, 600, None)  # doctest: +SKIP
    """
    try:
        nb = nbformat.read(source, as_version=4)
    except (OSError, ValueError) as exc:
        print(f"ipy-resume run: cannot read {source} ({exc})", file=sys.stderr)
        return 2
    try:
        inject_parameters(nb, {name: parse_value(value) for name, value in parameters})
    except ValueError as exc:
        print(f"ipy-resume run: {exc}", file=sys.stderr)
        return 2
    cwd = source.resolve().parent
    try:
        store_dir = location.store_location(store, folder=cwd)
    except StoreError as exc:
        print(f"ipy-resume run: {exc}", file=sys.stderr)
        return 2
    output = output or source.with_name(f"{source.stem}.out.ipynb")
    ids = cell_ids(nb, trust_ids=file_has_cell_ids(source))
    kernel_name = kernel or default_kernel(nb)
    progress = Progress(len(ids))
    print(f"running {source} in kernel '{kernel_name}', checkpoints in {store_dir}")
    started = time.perf_counter()
    try:
        report = run_notebook(
            nb,
            store=store_dir,
            cwd=cwd,
            kernel=kernel_name,
            cell_timeout=cell_timeout,
            ids=ids,
            progress=progress,
        )
    except Exception as exc:  # kernel start-up and the like: one line, not a traceback
        progress.close()
        print(
            f"ipy-resume run: could not run {source} ({type(exc).__name__}: {exc})", file=sys.stderr
        )
        return 1
    finally:
        progress.close()
    nbformat.write(nb, output)
    restored = sum(1 for c in report.cells if c.outcome == "restored")
    empty = sum(1 for c in report.cells if c.outcome == "empty")
    saved = sum(c.saved for c in report.cells)
    summary = (
        f"{len(report.cells)} of {len(ids)} cells run: {restored} restored (saved "
        f"{_seconds(saved)}), {len(report.cells) - restored - empty} executed"
        + (f", {empty} empty" if empty else "")
        + ", in "
        f"{_seconds(time.perf_counter() - started)}; output written to {output}"
    )
    if report.stopped is not None:
        cell = report.stopped
        print(summary, file=sys.stderr)
        print(
            f"ipy-resume run: cell {cell.number} ({cell.label}) stopped the run: {report.reason}. "
            "Run the same command again to resume from it.",
            file=sys.stderr,
        )
        return 1
    print(summary)
    return 0


def validate_parameters(pairs: list[list[str]] | None) -> list[tuple[str, str]]:
    """``-p NAME VALUE`` pairs as tuples.

    >>> validate_parameters([["a", "1"]])
    [('a', '1')]
    """
    return [(name, value) for name, value in (pairs or [])]
