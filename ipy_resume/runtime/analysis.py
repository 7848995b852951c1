"""Static analysis of a notebook cell: which globals it reads, binds and deletes.

The engine keys a checkpoint on the cell's code and on the values of its *inputs*
(globals whose pre-cell value the cell can observe), and restores its *outputs*
(globals it may leave bound) and *deleted* names. Everything here works on the
plain-Python source IPython produces after its input transformations, using only
the stdlib :mod:`ast`.

The analysis is deliberately conservative about inputs: reporting a name the cell
does not really read only costs a cache miss, while missing one would let a stale
checkpoint be restored.
"""

from __future__ import annotations

import ast
import builtins
import re
import warnings
from collections.abc import Container, Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from ipy_resume.runtime.scopes import (
    CLASS_IMPLICIT,
    CODE_CALLS,
    DELETING_MAGICS,
    NAMESPACE_CALLS,
    NAMESPACE_FREE_MAGICS,
    ComprehensionNode,
    Event,
    Flow,
    Frame,
    FunctionNode,
    Snapshot,
    StoreMode,
    annotation_nodes,
    havoc,
    import_binding,
    irrefutable,
    line_magic,
    magic_code,
    merge,
    param_names,
    scope_names,
    timeit_statement,
    type_param_names,
)

__all__ = ["AnalysisError", "CellAnalysis", "analyze", "normalize_source"]


class AnalysisError(ValueError):
    """The cell is not valid Python; the message reads ``"line N: <reason>"``."""


@dataclass(frozen=True)
class CellAnalysis:
    """What a cell reads from and writes to the global namespace.

    ``inputs`` are globals whose pre-cell value the cell may read; ``outputs`` are
    globals the cell may leave bound; ``deleted`` are globals the cell may leave
    deleted (``del`` at module level, or the one that ends ``except E as name``).
    ``normalized`` is a formatting-independent rendering of the code, suitable for
    hashing.
    """

    inputs: frozenset[str]
    outputs: frozenset[str]
    deleted: frozenset[str]
    normalized: str
    # Builtin names the cell reads before binding them (``max``, ``sum``): inputs only
    # when the namespace binds them, which shadows the builtin (``max = [1, 2, 3]``).
    builtins: frozenset[str] = frozenset()
    # ``from m import *``: it binds names no reading of the code can list.
    star_import: bool = False
    # A line magic, ``exec``/``eval`` of code that is not a literal, or ``globals()``: the
    # cell may bind or delete names its code does not list (``%xdel b``,
    # ``globals()["z"] = 1``), so the namespace is compared before and after it runs.
    rebinds: bool = False
    # ... and may read any of them (``exec(code)``, ``%run -i``): every name is an input.
    reads_all: bool = False
    # The top-level modules the cell imports (``import a.b``, ``from a import c``: ``a``):
    # a helper module's source joins the key, since the code it runs is the module's.
    imports: frozenset[str] = frozenset()

    def reads(self, *bound: Container[str]) -> set[str]:
        """The globals the cell reads, given the names *bound* in its namespace (any of them).

        >>> sorted(analyze("y = max(x)").reads({"x"})), sorted(analyze("y = max(x)").reads({"max"}))
        (['x'], ['max', 'x'])
        """
        shadowed = {name for name in self.builtins if any(name in names for names in bound)}
        return set(self.inputs) | shadowed


# IPython puts these in the user namespace or in builtins; their values are either
# session bookkeeping or unknowable statically, so they never make a cell stale.
_IGNORED_NAMES = frozenset(
    {
        "__builtins__",
        "__name__",
        "__file__",
        "__doc__",
        "__class__",
        "__IPYTHON__",
        "_",
        "__",
        "___",
        "_i",
        "_ii",
        "_iii",
        "_oh",
        "_ih",
        "_dh",
        "In",
        "Out",
        "get_ipython",
        "exit",
        "quit",
    }
)
_HISTORY_NAME = re.compile(r"_i?\d+")
# The builtins: a read of one is an input only when the namespace shadows it (see
# CellAnalysis.builtins); the value of the builtin itself never makes a cell stale.
# (IPython adds ``display`` to the builtins: a notebook that binds it, ``from preamble
# import *`` binding IPython.display's, has a name of its own to store and restore)
_BUILTIN_NAMES = (frozenset(dir(builtins)) | {"display"}) - _IGNORED_NAMES


def _ignored(name: str) -> bool:
    return name in _IGNORED_NAMES or _HISTORY_NAME.fullmatch(name) is not None


def is_bookkeeping(name: str) -> bool:
    """Whether *name* is one IPython binds for its own use (``_``, ``_i3``, ``Out``).

    >>> is_bookkeeping("_i3"), is_bookkeeping("Out"), is_bookkeeping("out")
    (True, True, False)
    """
    return _ignored(name)


class _Analyzer(ast.NodeVisitor):
    """Walks a cell in execution order, tracking what each scope has bound so far.

    Module level and class bodies run immediately, so they are analysed flow by
    flow. Function and lambda bodies run later: a global they read is collected
    as *pending* and checked against the module state once the ``def`` (or, for
    methods, the outermost class) has bound its name, so self-references from
    recursive functions and methods do not count as inputs.
    """

    def __init__(self) -> None:
        self._stack: list[Frame] = [Frame("module", flow=Flow())]
        self._function_depth = 0
        self._class_depth = 0
        self._conditional = 0
        self._recorders: list[set[Event]] = []
        self._pending: set[str] = set()
        self.inputs: set[str] = set()
        self.builtins: set[str] = set()
        self.star_import = False
        self.rebinds = False
        self.reads_all = False
        self.imports: set[str] = set()
        self.ever_bound: set[str] = set()
        self.ever_deleted: set[str] = set()
        # Globals that function bodies may bind or delete whenever they are called.
        self.unsettled: set[str] = set()

    # ----------------------------------------------------------------- results

    def result(self) -> tuple[frozenset[str], frozenset[str], frozenset[str]]:
        self._flush()
        end = self._module_flow
        surely_deleted = end.deleted - self.unsettled
        surely_bound = end.bound - self.unsettled
        return (
            frozenset(self.inputs),
            frozenset(self.ever_bound - surely_deleted),
            frozenset(self.ever_deleted - surely_bound),
        )

    @property
    def _module_flow(self) -> Flow:
        flow = self._stack[0].flow
        assert flow is not None
        return flow

    # ------------------------------------------------------------ flow helpers

    def _snapshot(self) -> Snapshot:
        return [f.flow.copy() if f.flow is not None else None for f in self._stack]

    def _restore(self, snap: Snapshot) -> None:
        for frame, flow in zip(self._stack, snap, strict=False):
            frame.flow = flow.copy() if flow is not None else None

    def _record(self, idx: int, name: str) -> None:
        for recorder in self._recorders:
            recorder.add((idx, name))

    def _recorded(self, nodes: Iterable[ast.AST]) -> set[Event]:
        events: set[Event] = set()
        self._recorders.append(events)
        try:
            for node in nodes:
                self.visit(node)
        finally:
            self._recorders.pop()
        return events

    def _visit_all(self, nodes: Iterable[ast.AST]) -> None:
        for node in nodes:
            self.visit(node)

    def _visit_conditional(self, nodes: Iterable[ast.AST]) -> None:
        self._conditional += 1
        try:
            self._visit_all(nodes)
        finally:
            self._conditional -= 1

    # --------------------------------------------------------- name resolution

    def _global_load(self, name: str) -> None:
        if self._function_depth:
            self._pending.add(name)
        elif name not in self._module_flow.touched and not _ignored(name):
            (self.builtins if name in _BUILTIN_NAMES else self.inputs).add(name)

    def _flush(self) -> None:
        if self._function_depth or self._class_depth:
            return
        touched = self._module_flow.touched
        for name in self._pending:
            if name not in touched and not _ignored(name):
                (self.builtins if name in _BUILTIN_NAMES else self.inputs).add(name)
        self._pending.clear()

    def _load(self, name: str) -> None:
        top = len(self._stack) - 1
        frame = self._stack[top]
        if frame.kind == "module" or name in frame.globals:
            self._global_load(name)
            return
        if name in frame.nonlocals:
            return
        if frame.kind == "class":
            # Class bodies look names up in the class namespace first, then fall
            # through to globals, so only a definite earlier binding is local.
            assert frame.flow is not None
            if name in frame.flow.bound:
                return
        elif name in frame.local:
            return
        for outer in reversed(self._stack[:top]):
            if outer.kind == "module" or name in outer.globals:
                break
            if outer.kind == "class":
                continue  # class scopes are invisible to nested scopes
            if name in outer.local or name in outer.nonlocals:
                return
        self._global_load(name)

    def _store(self, name: str, mode: StoreMode = "bind", idx: int | None = None) -> None:
        idx = len(self._stack) - 1 if idx is None else idx
        frame = self._stack[idx]
        if frame.kind == "module":
            self._module_store(name, mode)
        elif name in frame.globals:
            self._global_store(name, mode)
        elif frame.kind == "class" and name not in frame.nonlocals:
            assert frame.flow is not None
            if mode != "maybe":
                frame.flow.bound.add(name)
                frame.flow.deleted.discard(name)
            self._record(idx, name)

    def _global_store(self, name: str, mode: StoreMode) -> None:
        if self._function_depth:
            if mode != "handler":
                self.ever_bound.add(name)
            self.unsettled.add(name)
        else:
            self._module_store(name, mode)

    def _module_store(self, name: str, mode: StoreMode) -> None:
        flow = self._module_flow
        if mode != "handler":
            self.ever_bound.add(name)
        if mode != "maybe":
            flow.touched.add(name)
            flow.bound.add(name)
        flow.deleted.discard(name)
        self._record(0, name)

    def _unbind_handler_name(self, name: str) -> None:
        # ``except E as e`` ends with an implicit ``del e``. The name is no output, and
        # may be left deleted; it just stops being definitely bound.
        if self._unbind_local(name):
            return
        if self._function_depth:
            self.unsettled.add(name)
            return
        self._module_flow.bound.discard(name)
        # The name may be gone after the cell even though it existed before it (``e``
        # from ``from math import *``): a restore must then remove it too.
        self.ever_deleted.add(name)
        self._record(0, name)

    def _unbind_local(self, name: str) -> bool:
        """Unbind *name* where it is local to the innermost scope; False when it is global."""
        idx = len(self._stack) - 1
        frame = self._stack[idx]
        if frame.kind == "module" or name in frame.globals:
            return False
        if frame.kind == "class" and name not in frame.nonlocals:
            assert frame.flow is not None
            frame.flow.bound.discard(name)
            self._record(idx, name)
        return True

    def _delete(self, name: str) -> None:
        if self._unbind_local(name):
            return
        # Deleting a name the cell has not bound yet needs its pre-cell value.
        self._global_load(name)
        if self._function_depth:
            # Spec: ``deleted`` only lists module-level ``del``; a function that
            # deletes a global just makes the name's final state unknown.
            self.unsettled.add(name)
            return
        flow = self._module_flow
        flow.touched.add(name)
        flow.bound.discard(name)
        flow.deleted.add(name)
        self.ever_deleted.add(name)
        self._record(0, name)

    # ----------------------------------------------------------------- scopes

    def _push(self, frame: Frame) -> None:
        self._stack.append(frame)
        if frame.kind == "function":
            self._function_depth += 1
        elif frame.kind == "class":
            self._class_depth += 1

    def _pop(self) -> None:
        frame = self._stack.pop()
        if frame.kind == "function":
            self._function_depth -= 1
        elif frame.kind == "class":
            self._class_depth -= 1

    def _push_type_params(self, node: ast.AST) -> bool:
        names = type_param_names(node)
        if not names:
            return False
        self._push(Frame("comprehension", local=frozenset(names)))
        for tp in getattr(node, "type_params", ()):
            self.generic_visit(tp)
        return True

    def _function_frame(self, params: set[str], body: Sequence[ast.AST]) -> Frame:
        stores, globs, nonlocs = scope_names(body)
        local = (stores | params) - globs - nonlocs
        return Frame(
            "function",
            local=frozenset(local),
            globals=frozenset(globs),
            nonlocals=frozenset(nonlocs),
        )

    def _visit_function(self, node: FunctionNode) -> None:
        args = node.args
        self._visit_all(node.decorator_list)
        self._visit_all(args.defaults)
        self._visit_all(d for d in args.kw_defaults if d is not None)
        scoped = self._push_type_params(node)
        self._visit_all(annotation_nodes(node))
        if scoped:
            self._pop()
        self._store(node.name)
        scoped = self._push_type_params(node)
        self._push(self._function_frame(param_names(args), node.body))
        self._visit_all(node.body)
        self._pop()
        if scoped:
            self._pop()
        self._flush()

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        self._visit_function(node)

    def visit_AsyncFunctionDef(self, node: ast.AsyncFunctionDef) -> None:
        self._visit_function(node)

    def visit_Lambda(self, node: ast.Lambda) -> None:
        args = node.args
        self._visit_all(args.defaults)
        self._visit_all(d for d in args.kw_defaults if d is not None)
        self._push(self._function_frame(param_names(args), [node.body]))
        self.visit(node.body)
        self._pop()
        self._flush()

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        self._visit_all(node.decorator_list)
        scoped = self._push_type_params(node)
        self._visit_all(node.bases)
        self._visit_all(node.keywords)
        _, globs, nonlocs = scope_names(node.body)
        flow = Flow(bound=set(CLASS_IMPLICIT))
        self._push(
            Frame("class", flow=flow, globals=frozenset(globs), nonlocals=frozenset(nonlocs))
        )
        self._visit_all(node.body)
        self._pop()
        if scoped:
            self._pop()
        self._store(node.name)
        self._flush()

    def visit_TypeAlias(self, node: Any) -> None:
        self._store(node.name.id)
        scoped = self._push_type_params(node)
        self.visit(node.value)
        if scoped:
            self._pop()

    def _visit_comprehension(self, node: ComprehensionNode, parts: Sequence[ast.AST]) -> None:
        generators = node.generators
        # The first iterable is evaluated in the enclosing scope, before the
        # comprehension's own scope exists.
        self.visit(generators[0].iter)
        targets: set[str] = set()
        for gen in generators:
            targets.update(
                n.id
                for n in ast.walk(gen.target)
                if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)
            )
        self._push(Frame("comprehension", local=frozenset(targets)))
        for i, gen in enumerate(generators):
            if i:
                self.visit(gen.iter)
            self.visit(gen.target)
            self._visit_all(gen.ifs)
        self._visit_all(parts)
        self._pop()

    def visit_ListComp(self, node: ast.ListComp) -> None:
        self._visit_comprehension(node, [node.elt])

    def visit_SetComp(self, node: ast.SetComp) -> None:
        self._visit_comprehension(node, [node.elt])

    def visit_GeneratorExp(self, node: ast.GeneratorExp) -> None:
        self._visit_comprehension(node, [node.elt])

    def visit_DictComp(self, node: ast.DictComp) -> None:
        self._visit_comprehension(node, [node.key, node.value])

    # ------------------------------------------------------------ expressions

    def visit_Name(self, node: ast.Name) -> None:
        if isinstance(node.ctx, ast.Load):
            self._load(node.id)
        elif isinstance(node.ctx, ast.Store):
            self._store(node.id)
        else:
            self._delete(node.id)

    def visit_Call(self, node: ast.Call) -> None:
        self.generic_visit(node)
        magic = line_magic(node)
        if magic is None:
            self._opaque_call(node)
            return
        name, line = magic
        if name in NAMESPACE_FREE_MAGICS:
            pass
        elif name in DELETING_MAGICS:
            self.rebinds = True
        elif name not in ("time", "timeit"):  # (%run, %store -r, %who: any name at all)
            self.rebinds = self.reads_all = True
        if name == "time":
            # The statement runs here, in this scope's namespace.
            body = magic_code(line.removeprefix("--no-raise-error ").strip())
            if body is not None:
                self._visit_all(body)
        elif name == "timeit":
            parsed = timeit_statement(line)
            body = None if parsed is None else magic_code(parsed[0])
            if parsed is None or body is None:
                return
            # IPython runs it inside a function of its own, at once: what it binds
            # stays local to that function, what it reads is this scope's.
            self._push(self._function_frame(set(), body))
            self._visit_all(body)
            self._pop()
            self._flush()
            if parsed[1]:
                self._store(parsed[1])

    def _opaque_call(self, node: ast.Call) -> None:
        """``exec``/``eval`` and ``globals()``: code and names the syntax tree does not show.

        ``exec("y = x + 1")`` is read as the code it runs, where it stands; any other code
        (a variable, a file's text) and any use of the namespace itself make the cell read
        and bind what it likes (see :attr:`CellAnalysis.rebinds`).
        """
        func = node.func
        if not isinstance(func, ast.Name):
            return
        if func.id in CODE_CALLS:
            code = node.args[0] if len(node.args) == 1 and not node.keywords else None
            if isinstance(code, ast.Constant) and isinstance(code.value, str):
                body = magic_code(code.value)
                if body is not None:
                    self._visit_all(body)
                    return
            self.rebinds = self.reads_all = True
        elif (
            func.id in NAMESPACE_CALLS
            and not node.args
            and not node.keywords
            and (func.id == "globals" or self._function_depth == 0)  # (a function's: local)
        ):
            self.rebinds = self.reads_all = True

    def visit_NamedExpr(self, node: ast.NamedExpr) -> None:
        self.visit(node.value)
        idx = len(self._stack) - 1
        while self._stack[idx].kind == "comprehension" and idx > 0:
            idx -= 1
        # A walrus behind ``and``/``or``/``if-else`` may not run at all.
        mode: StoreMode = "maybe" if self._conditional else "bind"
        self._store(node.target.id, mode, idx)

    def visit_BoolOp(self, node: ast.BoolOp) -> None:
        self.visit(node.values[0])
        self._visit_conditional(node.values[1:])

    def visit_IfExp(self, node: ast.IfExp) -> None:
        self.visit(node.test)
        self._visit_conditional([node.body, node.orelse])

    # ------------------------------------------------------- simple statements

    def visit_Assign(self, node: ast.Assign) -> None:
        self.visit(node.value)
        self._visit_all(node.targets)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        target = node.target
        if isinstance(target, ast.Name):
            self._load(target.id)
            self.visit(node.value)
            self._store(target.id)
        else:
            self.visit(target)
            self.visit(node.value)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        target = node.target
        if node.value is not None:
            self.visit(node.value)
            self.visit(target)
        elif not isinstance(target, ast.Name):
            self.visit(target)  # ``obj.attr: T`` still evaluates ``obj``
        self.visit(node.annotation)

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self.imports.add(alias.name.partition(".")[0])
            self._store(import_binding(alias))

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if not node.level and node.module:
            self.imports.add(node.module.partition(".")[0])
        for alias in node.names:
            # ``from m import *`` binds names we cannot know statically; later
            # reads of them are reported as inputs, which is merely conservative.
            if alias.name != "*":
                self._store(import_binding(alias))
            else:
                self.star_import = True

    def visit_Assert(self, node: ast.Assert) -> None:
        self.visit(node.test)
        if node.msg is not None:
            self._visit_conditional([node.msg])

    # ---------------------------------------------------- compound statements

    def visit_If(self, node: ast.If) -> None:
        self.visit(node.test)
        start = self._snapshot()
        self._visit_all(node.body)
        taken = self._snapshot()
        self._restore(start)
        self._visit_all(node.orelse)
        self._restore(merge([taken, self._snapshot()]))

    def _visit_loop(self, head: Sequence[ast.AST], body: Sequence[ast.AST]) -> None:
        start = self._snapshot()
        events = self._recorded([*head, *body])
        # Zero or more iterations, possibly left by ``break``.
        after = havoc(start, events)
        self._restore(after)

    def _visit_loop_else(self, orelse: Sequence[ast.AST]) -> None:
        if not orelse:
            return
        after = self._snapshot()
        self._visit_all(orelse)
        self._restore(merge([after, self._snapshot()]))

    def visit_For(self, node: ast.For) -> None:
        self.visit(node.iter)
        self._visit_loop([node.target], node.body)
        self._visit_loop_else(node.orelse)

    def visit_AsyncFor(self, node: ast.AsyncFor) -> None:
        self.visit(node.iter)
        self._visit_loop([node.target], node.body)
        self._visit_loop_else(node.orelse)

    def visit_While(self, node: ast.While) -> None:
        self.visit(node.test)
        self._visit_loop([], [*node.body, node.test])
        self._visit_loop_else(node.orelse)

    def _visit_with(self, node: ast.With | ast.AsyncWith) -> None:
        # The body is treated as straight-line code: a context manager that
        # swallows exceptions is rare, and assuming it would make every value
        # computed under ``with open(...)`` look conditionally bound.
        for item in node.items:
            self.visit(item.context_expr)
            if item.optional_vars is not None:
                self.visit(item.optional_vars)
        self._visit_all(node.body)

    def visit_With(self, node: ast.With) -> None:
        self._visit_with(node)

    def visit_AsyncWith(self, node: ast.AsyncWith) -> None:
        self._visit_with(node)

    def _visit_try(self, node: ast.Try | Any) -> None:
        start = self._snapshot()
        events = self._recorded(node.body)
        self._visit_all(node.orelse)
        ends = [self._snapshot()]
        # A handler can start after any prefix of the body has run.
        entry = havoc(start, events)
        for handler in node.handlers:
            self._restore(entry)
            if handler.type is not None:
                self.visit(handler.type)
            if handler.name is not None:
                self._store(handler.name, "handler")
            self._visit_all(handler.body)
            if handler.name is not None:
                self._unbind_handler_name(handler.name)
            ends.append(self._snapshot())
        self._restore(merge(ends))
        self._visit_all(node.finalbody)

    def visit_Try(self, node: ast.Try) -> None:
        self._visit_try(node)

    def visit_TryStar(self, node: Any) -> None:
        self._visit_try(node)

    def visit_Match(self, node: ast.Match) -> None:
        self.visit(node.subject)
        unmatched = self._snapshot()
        ends: list[Snapshot] = []
        exhaustive = False
        for case in node.cases:
            self._restore(unmatched)
            head: list[ast.AST] = [case.pattern]
            if case.guard is not None:
                head.append(case.guard)
            events = self._recorded(head)
            matched = self._snapshot()
            # A failed pattern may still have bound some of its captures.
            unmatched = havoc(unmatched, events)
            self._restore(matched)
            self._visit_all(case.body)
            ends.append(self._snapshot())
            exhaustive = exhaustive or irrefutable(case)
        if not exhaustive:
            ends.append(unmatched)
        self._restore(merge(ends))

    # --------------------------------------------------------------- patterns

    def visit_MatchAs(self, node: ast.MatchAs) -> None:
        if node.pattern is not None:
            self.visit(node.pattern)
        if node.name is not None:
            self._store(node.name)

    def visit_MatchStar(self, node: ast.MatchStar) -> None:
        if node.name is not None:
            self._store(node.name)

    def visit_MatchMapping(self, node: ast.MatchMapping) -> None:
        self._visit_all(node.keys)
        self._visit_all(node.patterns)
        if node.rest is not None:
            self._store(node.rest)


def _parse(source: str) -> ast.Module:
    if "\0" in source:
        # The parser rejects these without a usable line number.
        line = source.count("\n", 0, source.index("\0")) + 1
        raise AnalysisError(f"line {line}: source code cannot contain null bytes")
    try:
        with warnings.catch_warnings():
            # Invalid escapes and the like are the kernel's business to report.
            warnings.simplefilter("ignore")
            tree = ast.parse(source, "<cell>", "exec")
            # The full compile also catches scope errors the parser lets through
            # (``break`` outside a loop, misplaced ``nonlocal``...); IPython allows
            # top-level ``await``, so we do too.
            compile(tree, "<cell>", "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT, dont_inherit=True)
    except SyntaxError as exc:
        raise AnalysisError(f"line {exc.lineno or 1}: {exc.msg}") from exc
    except (RecursionError, MemoryError) as exc:
        raise AnalysisError("line 1: code is too deeply nested to analyse") from exc
    return tree


@lru_cache(maxsize=512)
def _analyze_cached(source: str) -> CellAnalysis:
    tree = _parse(source)
    analyzer = _Analyzer()
    try:
        analyzer.visit(tree)
    except RecursionError as exc:
        raise AnalysisError("line 1: code is too deeply nested to analyse") from exc
    inputs, outputs, deleted = analyzer.result()
    normalized = ast.dump(tree, annotate_fields=True, include_attributes=False)
    return CellAnalysis(
        inputs,
        outputs,
        deleted,
        normalized,
        frozenset(analyzer.builtins),
        analyzer.star_import,
        analyzer.rebinds,
        analyzer.reads_all,
        frozenset(analyzer.imports),
    )


def analyze(source: str) -> CellAnalysis:
    """Find the globals a cell reads before binding them, binds, and deletes.

    Raises :class:`AnalysisError` (a ``ValueError``) when ``source`` does not compile.

    >>> a = analyze("y = x + 1\\nz = y * 2")
    >>> sorted(a.inputs), sorted(a.outputs), sorted(a.deleted)
    (['x'], ['y', 'z'], [])
    >>> analyze("y = x + 1").inputs
    frozenset({'x'})
    >>> analyze("def f():\\n    return scale * 2").inputs
    frozenset({'scale'})
    >>> analyze("tmp = 1\\ndel tmp").deleted
    frozenset({'tmp'})
    """
    return _analyze_cached(source)


def normalize_source(source: str) -> str:
    """Render ``source`` so that comments, blank lines and layout do not matter.

    Equal to ``analyze(source).normalized``.

    >>> normalize_source("x = (1 + 2)  # sum") == normalize_source("x=1+2")
    True
    >>> normalize_source("x = 1") == normalize_source("x = 2")
    False
    """
    return analyze(source).normalized


def first_line(source: str, width: int = 60) -> str:
    """The first non-blank line of a cell, shortened: how people recognise a cell.

    >>> first_line("\\n# load\\ndf = read()")
    '# load'
    """
    for line in source.splitlines():
        if line.strip():
            line = line.strip()
            return line if len(line) <= width else line[: width - 1] + "…"
    return "(empty)"


def only_definitions(source: str) -> bool:
    """Whether a cell only imports and defines functions or classes.

    >>> only_definitions("import os\\ndef f():\\n    return 1")
    True
    """
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return False
    kinds = (
        ast.Import,
        ast.ImportFrom,
        ast.FunctionDef,
        ast.AsyncFunctionDef,
        ast.ClassDef,
        ast.Pass,
    )
    body = [
        n for n in tree.body if not (isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant))
    ]
    return bool(body) and all(isinstance(n, kinds) for n in body)
