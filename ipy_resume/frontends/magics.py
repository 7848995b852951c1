"""The IPython adapter: parse ``%%checkpoint``, hand the cell to the engine, print.

Everything that decides *what* happens lives in :mod:`ipy_resume.engine.core`; this
module only knows how IPython runs code and shows output.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from IPython.core.error import UsageError
from IPython.core.inputtransformer2 import TransformerManager
from IPython.core.interactiveshell import InteractiveShell
from IPython.core.magic import Magics, line_cell_magic, line_magic, magics_class, no_var_expand
from IPython.core.magic_arguments import argument, magic_arguments, parse_argstring

from ..engine import reports
from ..engine.core import CheckpointOptions, Engine, Engines, RunResult
from ..engine.execution import compile_cell, run_compiled
from ..engine.planning import NotebookCell, RunAllPlan, plan_run_all
from ..engine.queries import Timeline, stats_text
from ..fingerprint.code import prepare as prepare_keys
from ..runtime import file_deps, torch_support
from ..runtime.analysis import first_line
from ..runtime.capture import OutputRecord, replay, tee_streams
from ..store import Store, StoreError, background, location
from ..store.journal import OUTCOME_PAYLOAD
from ..store.retention import parse_gc_words
from . import comm
from .auto import AutoMode

_MEMO_MAX = 512  # option lines and cell texts remembered (each memo is cleared when full)
_MEMO_CHARS = 1 << 16  # longer cells are transformed afresh each time
# IPython's static transforms, by name: a cell none of them can change is left as it is
_KNOWN_STEPS = (
    "leading_empty_lines",
    "leading_indent",
    "PromptStripper",
    "PromptStripper",
    "cell_magic",
    "MagicAssign",
    "SystemAssign",
    "EscapedCommand",
    "HelpEnd",
)
# what any of them acts on: a magic, a shell escape, help, a prompt, an autocall escape at
# the start of a line, or a line of blanks (dedent empties it)
_TRANSFORMED = re.compile(
    r"[%!?\r\x0b\x0c\x1c-\x1e\x85\u2028\u2029]|>>>|\.\.\.|In \[|^[ \t]*[,;/]|^[ \t]+$", re.MULTILINE
)
# a word the magic's argument splitting keeps as it is: no quote, escape or comment
_PLAIN_WORD = re.compile(r"[^\s'\"\\#]+")

LINE_USAGE = (
    "usage: %checkpoint list | show TARGET | restore TARGET | verify | stats | "
    "gc [--keep-last N] [--max-size SIZE] | auto [on [--min-seconds S]|off] | wait | "
    "plan [NOTEBOOK.ipynb]   "
    "(TARGET = checkpoint id, unique id prefix, or CELL_ID)"
)


class IPythonHost:
    """Runs a cell body in the user's namespace with output teed; replays output."""

    def __init__(self, shell: InteractiveShell, source: str) -> None:
        self.shell = shell
        self.source = source

    def run(self) -> RunResult:
        __tracebackhide__ = True
        record = OutputRecord()
        filename = self.shell.compile.cache(self.source)
        cell = compile_cell(self.source, filename, flags=self.shell.compile.flags)
        with tee_streams(record), _tee_display(self.shell, record):
            value, has_value = run_compiled(cell, self.shell.user_ns)
            _flush_inline_figures()
        shown = None
        formatter = self.shell.display_formatter
        if has_value and value is not None and formatter is not None:
            try:
                shown = formatter.format(value)
            except Exception:  # a broken repr: IPython shows its own error when it displays
                shown = None
        return RunResult(value, has_value, record, shown)

    def show_result(self, value: Any, shown: tuple[dict[str, Any], dict[str, Any]]) -> None:
        """Show a restored result as it was shown when recorded; ``_`` and ``Out`` get *value*."""
        hook = self.shell.displayhook
        data, metadata = shown
        hook.check_for_underscore()
        hook.start_displayhook()
        hook.write_output_prompt()
        hook.write_format_data(data, metadata)
        hook.update_user_ns(value)
        hook.fill_exec_result(value)
        hook.log_output(data)
        hook.finish_displayhook()

    def replay(self, record: OutputRecord) -> None:
        publisher = self.shell.display_pub

        def publish(payload: dict[str, Any]) -> None:
            kwargs: dict[str, Any] = {}
            if payload.get("transient"):
                kwargs["transient"] = payload["transient"]
            if payload.get("update"):
                kwargs["update"] = True
            publisher.publish(data=payload["data"], metadata=payload.get("metadata"), **kwargs)

        replay(record, publish, lambda wait: publisher.clear_output(wait))

    def message(self, text: str) -> None:
        print(text, file=sys.stderr, flush=True)

    def status(self, text: str) -> None:
        """A routine status line: left out when a front end shows it as a cell badge."""
        if not comm.shows_badges(self.shell):
            # A kernel flushes the cell's streams before its next output and its reply;
            # a flush of its own would wait for the kernel's I/O thread.
            print(text, file=sys.stderr, flush=not _in_kernel(self.shell))

    @property
    def prints_status(self) -> bool:
        """Whether :meth:`status` prints (no badges): a small save is confirmed in the line."""
        return not comm.shows_badges(self.shell)

    @property
    def waits_for_save(self) -> bool:
        """Whether a small save is waited for, so its cell says "saved" in one line.

        In a Jupyter kernel the cell returns at once ("saving") and the writer says "saved"
        under the same cell when the checkpoint is durable: a wait there would be added to
        every cell's time.  A terminal prints a late line into the next prompt, so it waits.
        """
        return not _in_kernel(self.shell)

    @property
    def wants_reason(self) -> bool:
        """A badge shows why a cell executed, so every execution is explained."""
        return comm.shows_badges(self.shell)


def _in_kernel(shell: InteractiveShell) -> bool:
    """Whether *shell* is a Jupyter kernel's (its output goes out through the kernel)."""
    return getattr(shell, "kernel", None) is not None


def engine_events(store: Store) -> list[Any]:
    """The timeline of *store* (empty when it has none yet; rebuilt when it was lost)."""
    return store.journal().events()


@contextmanager
def _tee_display(shell: InteractiveShell, record: OutputRecord) -> Iterator[None]:
    """Record every rich display while still sending it to the frontend."""
    publisher = shell.display_pub
    own = vars(publisher)
    saved = {name: own[name] for name in ("publish", "clear_output") if name in own}
    original_publish = publisher.publish
    original_clear = publisher.clear_output

    def publish(data: dict[str, Any], metadata: Any = None, *args: Any, **kwargs: Any) -> Any:
        record.add_display(
            {
                "data": dict(data),
                "metadata": dict(metadata or {}),
                "transient": kwargs.get("transient"),
                "update": bool(kwargs.get("update", False)),
            }
        )
        return original_publish(data, metadata, *args, **kwargs)

    def clear_output(wait: bool = False) -> Any:
        record.add_clear(wait)
        return original_clear(wait)

    publisher.publish = publish  # type: ignore[method-assign]
    publisher.clear_output = clear_output  # type: ignore[method-assign]
    try:
        yield
    finally:
        for name in ("publish", "clear_output"):
            if name in saved:
                setattr(publisher, name, saved[name])
            else:
                vars(publisher).pop(name, None)


def _flush_inline_figures() -> None:
    # The inline backend shows figures after the whole cell, outside our recording;
    # showing them here records them so a hit replays the plots too.
    backend = sys.modules.get("matplotlib_inline.backend_inline")
    matplotlib = sys.modules.get("matplotlib")
    if backend is None or matplotlib is None:
        return
    try:
        if "inline" in str(matplotlib.get_backend()):
            backend.flush_figures()
    except Exception:  # plotting trouble must not fail a finished cell
        pass


def _ipython_own(step: Any) -> bool:
    return str(getattr(step, "__module__", "")).startswith("IPython.")


def _untouched(cell: str, steps: tuple[Any, ...]) -> str | None:
    """*cell* as IPython's own static transforms give it back when none of them applies
    (plain Python: most cells), found without tokenizing it; None when one may apply.

    >>> m = TransformerManager()
    >>> steps = (*m.cleanup_transforms, *m.line_transforms, *m.token_transformers)
    >>> _untouched("y = x + 1", steps), _untouched("files = !ls", steps)
    ('y = x + 1\\n', None)
    """
    names = tuple(getattr(step, "__name__", type(step).__name__) for step in steps)
    if names != _KNOWN_STEPS or not cell or cell[0].isspace() or _TRANSFORMED.search(cell):
        return None
    return cell if cell.endswith("\n") else cell + "\n"


def _names(value: str | None, option: str) -> list[str]:
    if not value:
        return []
    names = [part.strip() for part in value.split(",") if part.strip()]
    bad = [name for name in names if not name.isidentifier()]
    if bad:
        raise UsageError(
            f"%%checkpoint {option}: {', '.join(repr(b) for b in bad)} is not a variable name; "
            f"give a comma-separated list such as {option} a,b"
        )
    return names


def _reply_outcome(shell: Any, cell_id: str, outcome: Any) -> None:
    """Put the cell's outcome in the execute reply, where a headless runner reads it.

    (Its timeline event may be appended later: a background save's is written once the
    checkpoint is durable.)  Front ends ignore payloads of a source they do not know.
    """
    payloads = getattr(shell, "payload_manager", None)
    if payloads is None:
        return
    with contextlib.suppress(Exception):
        payloads.write_payload(
            {
                "source": OUTCOME_PAYLOAD,
                "cell_id": cell_id,
                "outcome": outcome.status,
                "saved": outcome.saved,
            }
        )


@magics_class
class CheckpointMagics(Magics):
    """``%%checkpoint`` (cell) and ``%checkpoint`` (line) bound to one shell."""

    def __init__(self, shell: InteractiveShell) -> None:
        super().__init__(shell)
        self.engines = Engines()
        self.auto = AutoMode(shell)
        self.last_engine: Engine | None = None  # the engine of the latest %%checkpoint cell
        # (store named, $IPY_RESUME_DIR, working directory) -> the engine's name: resolving
        # a path walks every folder of it, once per store and working directory is enough
        self._resolved: dict[tuple[str | None, str | None, str], Engine] = {}
        # %%checkpoint line -> its options, and the names of those that are lists
        self._parsed: dict[str, tuple[dict[str, Any], list[str]]] = {}
        self._static: dict[tuple[str, tuple[int, ...]], str] = {}  # see _transform
        self._own_steps: tuple[tuple[int, ...], tuple[Any, ...]] = ((), ())  # see _all_own
        self._switches: tuple[dict[str, Any], dict[str, str]] | None = None  # see _quick_parse
        self._warming: threading.Thread | None = None  # see warm_up

    def warm_up(self) -> None:
        """On a helper thread, do the work of a kernel's first checkpoint cell that depends
        on nothing it does, while the kernel waits for cells: find the folders a cell's
        reads are never data in and where installed packages live and, if the default
        store exists, open it, its info and its journal (together ~20 ms of a first cell).

        Nothing is made: a new store (and the signing key) is still created by its first
        checkpoint, and an object store is not reached before a cell asks.  The first use
        of an engine waits for the thread, so no cell ever works beside it.

        >>> get_ipython()._ipy_resume_magics.warm_up()  # doctest: +SKIP
        """
        given = os.environ.get(location.STORE_ENV)
        local = not (given and location.is_url(given))

        def warm() -> None:
            # (whatever fails here, the first cell meets again, and says)
            with contextlib.suppress(Exception):
                file_deps.prepare()
                prepare_keys()
                self._warm_parsing()
                if not local or not Path(str(location.store_location())).is_dir():
                    return
                engine = self.engine()
                engine.store.seed_base  # noqa: B018 - (read once per store object, and healed)
                engine.store.settle_pending()  # (a first read's scan of staged saves)
                engine.journal.warm()

        self._warming = threading.Thread(target=warm, name="ipy-resume-warm-up", daemon=True)
        self._warming.start()

    def _warm_parsing(self) -> None:
        """What the first ``%%checkpoint`` cell parses for the first time in a process:
        IPython's transforms of a cell magic (their patterns compiled) and the defaults of
        the options (an argparse run).  Pure functions of text, safe on the helper thread."""
        manager = getattr(self.shell, "input_transformer_manager", None)
        if type(manager) is TransformerManager and all(
            map(
                _ipython_own,
                (
                    *manager.cleanup_transforms,
                    *manager.line_transforms,
                    *manager.token_transformers,
                ),
            )
        ):
            manager.transform_cell("%%checkpoint warm-up\npass\n")  # (no extension's code)
        self._quick_parse("warm-up")

    def engine(self, store_dir: Path | str | None = None) -> Engine:
        """The engine of *store_dir* (default store when None), created on first use.

        *store_dir* may be an object-store URL (``s3://bucket/prefix``).
        """
        warming = self._warming
        if warming is not None and warming is not threading.current_thread():
            warming.join()
            self._warming = None
        # The resolution is remembered per (given, $IPY_RESUME_DIR, working directory when
        # relative): resolving a path on every hit costs more than the rest of the hit.
        named = None if not store_dir else os.fspath(store_dir)
        env = os.environ.get(location.STORE_ENV)
        given = named or env
        absolute = given is not None and (
            location.is_url(given) or (os.path.isabs(given) and "~" not in given)
        )
        where = (named, env, "" if absolute else os.getcwd())
        found = self._resolved.get(where)
        if found is None:
            found = self.engines.get(location.store_location(named))
            if len(self._resolved) >= _MEMO_MAX:
                self._resolved.clear()
            self._resolved[where] = found
        return found

    def _transform(self, cell: str) -> str:
        """``shell.transform_cell(cell)``, with the part that depends on the text alone
        remembered per text.

        IPython's static transforms (prompts, ``%magic``, ``!cmd``, ``?``) are functions
        of the text; the dynamic ones (automagic and autocall of a one-line cell, which
        depend on the namespace, and ``input_transformers_post``) run every time, as
        ``InteractiveShell.transform_cell`` runs them.  Anything not IPython's own (a
        subclass's ``transform_cell``, a transform an extension added) is not remembered.
        """
        shell = self.shell
        assert shell is not None
        manager = shell.input_transformer_manager
        steps = (*manager.cleanup_transforms, *manager.line_transforms, *manager.token_transformers)
        ids = tuple(map(id, steps))
        if (
            type(shell).transform_cell is not InteractiveShell.transform_cell
            or type(manager) is not TransformerManager
            or len(cell) > _MEMO_CHARS
            or not (ids == self._own_steps[0] or self._all_own(steps, ids))
        ):
            return shell.transform_cell(cell)
        key = (cell, ids)
        static = self._static.get(key)
        if static is None:
            static = _untouched(cell, steps) or manager.transform_cell(cell)
            if len(self._static) >= _MEMO_MAX:
                self._static.clear()
            self._static[key] = static
        # the rest of InteractiveShell.transform_cell, as it does it
        if len(static.splitlines()) == 1:
            prefilter = shell.prefilter_manager
            assert prefilter is not None
            with shell.builtin_trap:
                static = prefilter.prefilter_lines(static) + "\n"
        lines = static.splitlines(keepends=True)
        for transform in shell.input_transformers_post:
            lines = transform(lines)
        return "".join(lines)

    def _all_own(self, steps: tuple[Any, ...], ids: tuple[int, ...]) -> bool:
        """True when every step is IPython's own; remembered for these steps, which are
        held meanwhile (so no other object takes one of their ids)."""
        if not all(_ipython_own(step) for step in steps):
            return False
        self._own_steps = (ids, steps)
        return True

    @magic_arguments()
    @argument("cell_id", metavar="CELL_ID", help="a stable name for this cell, e.g. train")
    @argument("--force", action="store_true", help="execute and re-record even on a hit")
    @argument("--inputs", metavar="a,b", help="extra inputs the analysis cannot see")
    @argument("--ignore", metavar="a,b", help="inputs to leave out of the key")
    @argument("--outputs", metavar="x,y", help="store only these names")
    @argument(
        "--deps", nargs="+", metavar="PATH", default=[], help="files whose contents join the key"
    )
    @argument(
        "--files",
        nargs="+",
        metavar="PATH",
        default=[],
        help="files the cell writes: stored and restored",
    )
    @argument(
        "--no-file-deps",
        action="store_true",
        help="do not record the files the cell reads (e.g. a log that changes every run)",
    )
    @argument(
        "--seed", type=int, metavar="N", help="seed random/numpy/torch with N before executing"
    )
    @argument("--no-seed", action="store_true", help="do not seed the random generators")
    @argument(
        "--salt", default="", metavar="TEXT", help="any text; changing it forces a new checkpoint"
    )
    @argument("--explain", action="store_true", help="on a miss, say which part of the key changed")
    @argument("--quiet", action="store_true", help="no status line on a hit or a save")
    @argument(
        "--map-location",
        metavar="DEVICE",
        help="restore torch tensors on DEVICE (e.g. cpu) instead of the device they were saved on",
    )
    @argument(
        "--min-seconds",
        type=float,
        default=None,
        metavar="S",
        help="store a checkpoint only when the run took at least S seconds",
    )
    @line_cell_magic
    @no_var_expand
    def checkpoint(self, line: str, cell: str | None = None) -> Any:
        """Skip a cell whose code and inputs are unchanged; restore what it produced.

        As a cell magic, ``%%checkpoint CELL_ID [options]`` runs the cell once and
        stores the names it binds, its output and the RNG state; later runs with
        the same code and input values restore them instead of executing.

        As a line magic: ``%checkpoint list`` (every checkpoint of the store),
        ``%checkpoint show TARGET`` (one checkpoint's names and key parts),
        ``%checkpoint restore TARGET`` (the kernel state as of that checkpoint),
        ``%checkpoint verify`` (check every signature and checksum),
        ``%checkpoint stats`` (hit rate, latencies, time saved) and
        ``%checkpoint gc [--keep-last N] [--max-size SIZE]`` (retention) and
        ``%checkpoint auto on [--min-seconds S]`` / ``off`` (checkpoint every cell that
        runs at least S seconds, without editing it) and ``%checkpoint wait`` (block until
        every checkpoint saved in the background is durable). TARGET is a
        checkpoint id, a unique prefix of one, or a CELL_ID (its latest checkpoint).
        After a crash, ``%resume`` restores the latest state of the store.

        The store is ``$IPY_RESUME_DIR`` or ``.ipy_resume/`` in the working directory.

        Example::

            %%checkpoint train --deps data.csv
            model = fit(data, lr=lr)
        """
        __tracebackhide__ = True
        line = self._expanded(line)
        if cell is None:
            return self._line(line)
        opts = self._options(line)
        assert self.shell is not None
        source = self._transform(cell)
        host = IPythonHost(self.shell, source)
        try:
            engine = self.engine()
        except (StoreError, OSError) as exc:
            host.message(
                f"ipy_resume: cannot open the checkpoint store ({exc}); "
                f"'{opts.cell_id}' runs without a checkpoint."
            )
            result = host.run()
            return result.value if result.has_value else None
        self.last_engine = engine
        engine.last_outcome = None
        cell = comm.current_cell_id(self.shell)
        try:
            with torch_support.mapped_to(opts.map_location):
                return engine.run(self.shell.user_ns, source, opts, host)
        finally:
            # damage the store found on its way and repaired (store.json, journal, key)
            for text in engine.store.take_repairs():
                host.message(f"ipy_resume: {text}")
            if engine.last_outcome is not None:
                comm.push_outcome(self.shell, engine, opts, engine.last_outcome, cell)
                _reply_outcome(self.shell, opts.cell_id, engine.last_outcome)

    def _expanded(self, line: str) -> str:
        """*line* with ``$name`` and ``{expr}`` expanded as IPython expands a magic's line.

        IPython's own expansion copies the whole user namespace at every call (with its
        ``_i1``, ``_i2``... one entry per cell run), a tenth of a small cell's hit in a
        long session; a line without ``$``, ``{`` or ``}`` cannot change, so only a line
        with one is expanded, the same way (the user's frame is three above this one).
        """
        if "$" not in line and "{" not in line and "}" not in line:
            return line
        assert self.shell is not None
        return str(self.shell.var_expand(line, 3))

    def _options(self, line: str) -> CheckpointOptions:
        """The ``%%checkpoint`` line as options (UsageError when it is malformed).

        A line parsed before is not parsed again (a malformed one raises each time).
        """
        known = self._parsed.get(line)
        if known is None:
            parsed = self._quick_parse(line) or self._parse(line)
            if len(self._parsed) >= _MEMO_MAX:
                self._parsed.clear()
            listed = [k for k, v in parsed.items() if type(v) is tuple]
            known = self._parsed[line] = (parsed, listed)
        parsed, listed = known
        opts = CheckpointOptions(**parsed, label=self.auto.labels.get(parsed["cell_id"]))
        for name in listed:  # (each run's own lists: the remembered options stay as parsed)
            setattr(opts, name, list(parsed[name]))
        return opts

    def _quick_parse(self, line: str) -> dict[str, Any] | None:
        """The options of a line made of a CELL_ID and on/off switches (``train --quiet``),
        without argparse; None for any other line, which :meth:`_parse` reads.

        Only exact switch names and words the argument splitting leaves alone are taken,
        so the result is the one argparse gives (tests compare the two).
        """
        words = line.split()
        if not words or words[0].startswith("-") or not all(map(_PLAIN_WORD.fullmatch, words)):
            return None
        if self._switches is None:
            parser = self.checkpoint.parser
            switches = {
                option: action.dest
                for option, action in parser._option_string_actions.items()
                if action.nargs == 0 and action.const is True and action.default is False
            }
            self._switches = (self._parse("cell"), switches)
        defaults, switches = self._switches
        if not all(word in switches for word in words[1:]):
            return None
        return {**defaults, "cell_id": words[0], **{switches[w]: True for w in words[1:]}}

    def _parse(self, line: str) -> dict[str, Any]:
        args = parse_argstring(self.checkpoint, line)
        if args.seed is not None and args.no_seed:
            raise UsageError("%%checkpoint: use either --seed N or --no-seed, not both")
        if not args.cell_id.strip():
            raise UsageError("%%checkpoint needs a CELL_ID, e.g. %%checkpoint train")
        outputs = _names(args.outputs, "--outputs") if args.outputs is not None else None
        # lists as tuples: each run gets lists of its own
        return {
            "cell_id": args.cell_id,
            "force": args.force,
            "inputs": tuple(_names(args.inputs, "--inputs")),
            "ignore": tuple(_names(args.ignore, "--ignore")),
            "outputs": None if outputs is None else tuple(outputs),
            "deps": tuple(args.deps),
            "files": tuple(args.files),
            "no_file_deps": args.no_file_deps,
            "seed": args.seed,
            "no_seed": args.no_seed,
            "salt": args.salt,
            "explain": args.explain,
            "quiet": args.quiet,
            "min_seconds": args.min_seconds,
            "map_location": args.map_location,
        }

    def _line(self, line: str) -> None:
        try:
            words = shlex.split(line)
        except ValueError as exc:
            raise UsageError(f"%checkpoint: {exc}. {LINE_USAGE}") from None
        if not words:
            raise UsageError(LINE_USAGE)
        command, rest = words[0], words[1:]
        store = self.engine().store
        try:
            if command == "list":
                print(reports.table(store.manifests(), engine_events(store), store.short_ids()))
            elif command == "show":
                if len(rest) != 1:
                    raise UsageError("usage: %checkpoint show TARGET")
                manifest = reports.resolve(store.manifests(), rest[0])
                short = store.short_id(manifest.id)
                paths = store.restore_paths(manifest)
                print(reports.details_text(reports.describe(manifest, short, paths)))
            elif command == "restore":
                usage = "usage: %checkpoint restore TARGET [--map-location DEVICE]"
                rest, device = _map_location(rest, usage)
                if len(rest) != 1:
                    raise UsageError(usage)
                with torch_support.mapped_to(device):
                    self._restore(rest[0], resumed=False)
            elif command == "verify":
                found = store.audit()
                lines = [*found.lines, *(f"note: {n}" for n in found.notes)]
                if not found.problems:
                    lines.append(f"store {store.location} is sound")
                print("\n".join(lines))
            elif command == "stats":
                print(stats_text(Timeline.of(store).stats()))
            elif command == "auto":
                self._auto(rest)
            elif command == "wait":
                if rest:
                    raise UsageError("usage: %checkpoint wait")
                self._wait()
            elif command == "plan":
                if len(rest) > 1:
                    raise UsageError("usage: %checkpoint plan [NOTEBOOK.ipynb]")
                print(self._plan(rest[0] if rest else None))
            elif command == "gc":
                try:
                    keep_last, max_size = parse_gc_words(rest)
                except ValueError as exc:
                    raise UsageError(str(exc)) from None
                print(store.gc(keep_last=keep_last, max_size=max_size).summary())
            else:
                raise UsageError(f"%checkpoint: unknown command '{command}'. {LINE_USAGE}")
        except reports.TargetError as exc:
            raise UsageError(str(exc)) from None
        except StoreError as exc:
            raise UsageError(f"%checkpoint {command}: {exc}") from None

    def _wait(self) -> None:
        pending = len(background.pending())
        started = time.perf_counter()
        background.flush()
        if pending:
            print(
                f"ipy_resume: {pending} pending save(s) are durable now "
                f"(waited {time.perf_counter() - started:.2f} s)"
            )
        else:
            print("ipy_resume: every checkpoint is durable; nothing was pending")

    def _plan(self, path: str | None) -> str:
        """``%checkpoint plan``: what Run All would restore and execute, nothing run."""
        assert self.shell is not None
        notebook = path or os.environ.get("JPY_SESSION_NAME")
        if not notebook:
            raise UsageError(
                "%checkpoint plan: name the notebook, e.g. %checkpoint plan analysis.ipynb "
                "(this kernel does not know which notebook it serves)"
            )
        if not path and not Path(notebook).exists():
            # the server names it relative to its own root; the kernel runs in its folder
            notebook = str(Path(notebook).name)
        try:
            raw = json.loads(Path(notebook).read_text(encoding="utf-8"))
            sources = [
                "".join(c["source"]) if isinstance(c["source"], list) else c["source"]
                for c in raw["cells"]
                if c.get("cell_type") == "code"
            ]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise UsageError(f"%checkpoint plan: cannot read notebook {notebook} ({exc})") from None
        engine = self.engine()
        return self.plan_cells(sources, engine).text(engine)

    def notebook_cells(self, sources: list[str]) -> list[NotebookCell]:
        """The code cells *sources* (in notebook order) as the plan sees them.

        Used by ``%checkpoint plan`` and by the panel's Plan Run All (the comm).
        """
        assert self.shell is not None
        cells: list[NotebookCell] = []
        for position, source in enumerate(sources, start=1):
            first, _, rest = source.partition("\n")
            options = None
            if first.startswith("%%checkpoint"):
                try:
                    options = self._options(first[len("%%checkpoint") :])
                except UsageError as exc:
                    raise UsageError(f"%checkpoint plan: code cell {position}: {exc}") from None
                source = rest
            body = self._transform(source)
            cells.append(NotebookCell(position, body, options, first_line(source)))
        return cells

    def plan_cells(self, sources: list[str], engine: Engine | None = None) -> RunAllPlan:
        """What Run All of these code cells would restore and execute; nothing is run."""
        assert self.shell is not None
        engine = engine or self.engine()
        return plan_run_all(engine, self.shell.user_ns, self.notebook_cells(sources))

    def _auto(self, words: list[str]) -> None:
        if not words:
            print(f"ipy_resume: {self.auto.status()}")
            return
        if words == ["off"]:
            self.auto.disable()
            print("ipy_resume: auto checkpoints are off; cells run as written")
            return
        if words[0] != "on":
            raise UsageError("usage: %checkpoint auto [on [--min-seconds S] | off]")
        seconds = 1.0
        if len(words) == 3 and words[1] == "--min-seconds":
            try:
                seconds = float(words[2])
            except ValueError:
                seconds = -1.0
            if seconds < 0:
                raise UsageError(
                    f"%checkpoint auto on --min-seconds: expected seconds >= 0, not {words[2]!r}"
                )
        elif len(words) != 1:
            raise UsageError("usage: %checkpoint auto on [--min-seconds S]")
        self.auto.enable(seconds)
        print(f"ipy_resume: {self.auto.status()}")

    def _restore(self, target: str, resumed: bool) -> dict[str, Any]:
        """Restore the kernel to *target* and add the restore to the timeline."""
        assert self.shell is not None
        engine = self.engine()
        engine.store.writer.barrier()  # the state to restore includes the saves still on their way
        how = "%resume" if resumed else "restore"
        try:
            report = engine.restore(self.shell.user_ns, target, how=how)
        except StoreError as exc:
            said = "%resume" if resumed else "%checkpoint restore"
            raise UsageError(f"{said}: {reports.restore_failure(exc)}") from None
        print(f"ipy_resume: {report['message']}")
        return report

    @line_magic
    def resume(self, line: str) -> None:
        """Bring back the state of this store's latest checkpoint after a crash.

        In a fresh kernel: ``%load_ext ipy_resume`` then ``%resume``. Every name
        recorded by the checkpointed cells of the most recent kernel session takes
        its value as of that session's last checkpoint, and the random generators
        are where that cell left them.  ``--map-location cpu`` brings torch tensors
        saved on a device this machine lacks back on the CPU.

        Example::

            %resume
            %resume --map-location cpu
        """
        usage = (
            "usage: %resume [--map-location DEVICE]; "
            "use %checkpoint restore TARGET for other checkpoints"
        )
        try:
            words = shlex.split(line)
        except ValueError as exc:
            raise UsageError(f"%resume: {exc}") from None
        words, device = _map_location(words, usage)
        if words:
            raise UsageError(usage)
        with torch_support.mapped_to(device):
            self._resume()

    def _resume(self) -> None:
        store = self.engine().store
        root = store.location
        history = Timeline.of(store)
        try:
            event = history.latest_session_event()
            if event is None:
                print(f"ipy_resume: nothing to resume: no checkpoints in {root}")
                return
            self._restore(event.event_id, resumed=True)
        except reports.TargetError as exc:
            raise UsageError(str(exc)) from None
        except StoreError as exc:
            raise UsageError(f"%resume: {exc}") from None
        span = history.session_span(event.session)
        if span:
            print(f"ipy_resume: that kernel session ran {span}")


def _map_location(words: list[str], usage: str) -> tuple[list[str], str | None]:
    """*words* without ``--map-location DEVICE`` (or ``--map-location=DEVICE``), and DEVICE.

    >>> _map_location(["t1", "--map-location", "cpu"], "usage")
    (['t1'], 'cpu')
    """
    rest: list[str] = []
    device: str | None = None
    it = iter(words)
    for word in it:
        name, eq, value = word.partition("=")
        if name != "--map-location":
            rest.append(word)
            continue
        if not eq:
            value = next(it, "")
        if not value or value.startswith("-"):
            raise UsageError(f"--map-location needs a device, e.g. cpu ({usage})")
        device = value
    return rest, device
