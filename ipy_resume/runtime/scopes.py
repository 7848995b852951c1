"""The pieces the cell analyser (:mod:`.analysis`) is built from.

What holds on every path through a scope (:class:`Flow`, merged where paths join and
spoilt where a loop or handler may have run anything), the names a scope binds, its
parameters and annotations, and IPython's line magics whose argument is Python code
(``%time``, ``%timeit``) read as the code they run.
"""

from __future__ import annotations

import ast
import warnings
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Literal

# Line magics whose argument is Python code that IPython runs in the cell's namespace:
# ``%time x = f()`` binds ``x`` as the plain statement would, and ``%timeit
# np.add.at(counts, i, 1)`` reads (and may change) ``counts``. Their code is analysed
# where the magic's call stands; any other magic's argument stays opaque.
TIMEIT_OPTIONS = "n:r:tcp:qov:"  # IPython's own option string for %timeit

# Line magics that read and bind no name of the notebook's; those that delete some.
NAMESPACE_FREE_MAGICS = frozenset(
    {
        "matplotlib", "config", "load_ext", "reload_ext", "unload_ext", "autoreload",
        "aimport", "env", "set_env", "cd", "pwd", "precision", "pip", "conda", "xmode",
        "pdb", "colors", "automagic", "autocall", "doctest_mode", "lsmagic", "quickref",
        "history", "logstart", "logstop", "logon", "logoff", "alias", "unalias",
        "bookmark", "dhist", "pushd", "popd", "dirs", "sx", "system",
    }
)  # fmt: skip
# (``%reset_selective -f ^tmp`` deletes what the namespace holds: it reads every name)
DELETING_MAGICS = frozenset({"xdel"})
# Calls that run code the analysis cannot read, or hand out the namespace itself.
CODE_CALLS = frozenset({"exec", "eval"})
NAMESPACE_CALLS = frozenset({"globals", "vars", "locals"})

# Names a class body binds implicitly before its first statement runs.
CLASS_IMPLICIT = frozenset({"__module__", "__qualname__"})

FrameKind = Literal["module", "class", "function", "comprehension"]
StoreMode = Literal["bind", "maybe", "handler"]


@dataclass
class Flow:
    """Facts that hold on every path reaching the current point of a scope.

    ``touched``: the cell has bound or deleted the name, so its pre-cell value is
    gone (this only grows along a path). ``bound``/``deleted``: the name is
    definitely bound / definitely deleted right now.
    """

    touched: set[str] = field(default_factory=set)
    bound: set[str] = field(default_factory=set)
    deleted: set[str] = field(default_factory=set)

    def copy(self) -> Flow:
        return Flow(set(self.touched), set(self.bound), set(self.deleted))


@dataclass
class Frame:
    """One scope being walked: its kind, what holds on the current path, and its names
    declared local, ``global`` and ``nonlocal``."""

    kind: FrameKind
    flow: Flow | None = None
    local: frozenset[str] = frozenset()
    globals: frozenset[str] = frozenset()
    nonlocals: frozenset[str] = frozenset()


Snapshot = list[Flow | None]
Event = tuple[int, str]
FunctionNode = ast.FunctionDef | ast.AsyncFunctionDef
ComprehensionNode = ast.ListComp | ast.SetComp | ast.GeneratorExp | ast.DictComp


def merge(snaps: Sequence[Snapshot]) -> Snapshot:
    """State after control flow joins: only facts true on every incoming path survive."""
    merged: Snapshot = []
    for flows in zip(*snaps, strict=True):
        first = flows[0]
        if first is None:
            merged.append(None)
            continue
        out = first.copy()
        for other in flows[1:]:
            assert other is not None
            out.touched &= other.touched
            out.bound &= other.bound
            out.deleted &= other.deleted
        merged.append(out)
    return merged


def havoc(snap: Snapshot, events: Iterable[Event]) -> Snapshot:
    """State somewhere inside a region that started at ``snap`` and bound/deleted ``events``.

    Used where a region can be left half-way (break, continue, an exception caught
    by a handler): a name the region touched may be in either state afterwards.
    ``touched`` keeps the start value because it never shrinks along a path.
    """
    out: Snapshot = [f.copy() if f is not None else None for f in snap]
    for idx, name in events:
        if idx < len(out):
            flow = out[idx]
            if flow is not None:
                flow.bound.discard(name)
                flow.deleted.discard(name)
    return out


def param_names(args: ast.arguments) -> set[str]:
    """Every parameter a function binds.

    >>> sorted(param_names(ast.parse("def f(a, /, b, *c, d, **e): pass").body[0].args))
    ['a', 'b', 'c', 'd', 'e']
    """
    params = [*args.posonlyargs, *args.args, *args.kwonlyargs]
    if args.vararg is not None:
        params.append(args.vararg)
    if args.kwarg is not None:
        params.append(args.kwarg)
    return {a.arg for a in params}


def type_param_names(node: ast.AST) -> set[str]:
    """The type parameters a ``def`` or ``class`` binds (``def f[T](x: T)``).

    >>> type_param_names(ast.parse("def f(x): pass").body[0])
    set()
    """
    # PEP 695 (Python 3.12+); absent on older interpreters.
    return {getattr(tp, "name", "") for tp in getattr(node, "type_params", ())} - {""}


def scope_names(nodes: Iterable[ast.AST]) -> tuple[set[str], set[str], set[str]]:
    """Names a function/class body binds, declares ``global`` and declares ``nonlocal``.

    Nested function and class bodies and lambda bodies are separate scopes and are
    skipped, but their decorators, defaults and bases run in this scope. Inside
    comprehensions only walrus targets escape to this scope.
    """
    stores: set[str] = set()
    globs: set[str] = set()
    nonlocs: set[str] = set()

    def in_comprehension(node: ast.AST) -> None:
        if isinstance(node, ast.NamedExpr):
            if isinstance(node.target, ast.Name):
                stores.add(node.target.id)
            in_comprehension(node.value)
        elif isinstance(node, ast.Lambda):
            for default in [*node.args.defaults, *node.args.kw_defaults]:
                if default is not None:
                    in_comprehension(default)
        elif isinstance(node, ast.comprehension):
            in_comprehension(node.iter)
            for cond in node.ifs:
                in_comprehension(cond)
        else:
            for child in ast.iter_child_nodes(node):
                in_comprehension(child)

    def walk(node: ast.AST) -> None:
        if isinstance(node, ast.Global):
            globs.update(node.names)
        elif isinstance(node, ast.Nonlocal):
            nonlocs.update(node.names)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            stores.add(node.name)
            for child in function_header(node):
                walk(child)
        elif isinstance(node, ast.ClassDef):
            stores.add(node.name)
            for child in [*node.decorator_list, *node.bases, *node.keywords]:
                walk(child)
        elif isinstance(node, ast.Lambda):
            for default in [*node.args.defaults, *node.args.kw_defaults]:
                if default is not None:
                    walk(default)
        elif isinstance(node, ComprehensionNode):
            in_comprehension(node)
        else:
            if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
                stores.add(node.id)
            elif isinstance(node, ast.Import | ast.ImportFrom):
                stores.update(import_binding(alias) for alias in node.names if alias.name != "*")
            elif isinstance(node, ast.ExceptHandler | ast.MatchAs | ast.MatchStar):
                if node.name is not None:
                    stores.add(node.name)
            elif isinstance(node, ast.MatchMapping) and node.rest is not None:
                stores.add(node.rest)
            elif type(node).__name__ == "TypeAlias":
                # ``type X = ...`` binds X; its value is evaluated lazily in its own scope.
                walk(node.name)  # type: ignore[attr-defined]
                return
            for child in ast.iter_child_nodes(node):
                walk(child)

    for node in nodes:
        walk(node)
    return stores, globs, nonlocs


def function_header(node: FunctionNode) -> list[ast.AST]:
    """Expressions a ``def`` evaluates in the enclosing scope, in evaluation order."""
    args = node.args
    parts: list[ast.AST] = [*node.decorator_list, *args.defaults]
    parts.extend(d for d in args.kw_defaults if d is not None)
    parts.extend(annotation_nodes(node))
    return parts


def annotation_nodes(node: FunctionNode | ast.Lambda) -> list[ast.expr]:
    """The annotations of a function's parameters and its return, as expressions.

    >>> [ast.unparse(a) for a in annotation_nodes(ast.parse("def f(x: int) -> T: pass").body[0])]
    ['int', 'T']
    """
    # Treated as evaluated even under ``from __future__ import annotations``: a
    # spurious input is harmless, a missing one is not.
    args = node.args
    every = [*args.posonlyargs, *args.args, args.vararg, *args.kwonlyargs, args.kwarg]
    found = [a.annotation for a in every if a is not None and a.annotation is not None]
    returns = getattr(node, "returns", None)
    if returns is not None:
        found.append(returns)
    return found


def import_binding(alias: ast.alias) -> str:
    """The name an ``import`` binds for *alias*.

    >>> import_binding(ast.parse("import a.b.c").body[0].names[0])
    'a'
    """
    # ``import a.b.c`` binds ``a``; ``import a.b as c`` binds ``c``.
    return alias.asname or alias.name.partition(".")[0]


def line_magic(node: ast.Call) -> tuple[str, str] | None:
    """``get_ipython().run_line_magic('NAME', 'LINE')``, as IPython writes ``%NAME LINE``."""
    func = node.func
    if not (
        isinstance(func, ast.Attribute)
        and func.attr == "run_line_magic"
        and isinstance(func.value, ast.Call)
        and isinstance(func.value.func, ast.Name)
        and func.value.func.id == "get_ipython"
        and not func.value.args
        and len(node.args) == 2
        and not node.keywords
    ):
        return None
    name, line = (arg.value if isinstance(arg, ast.Constant) else None for arg in node.args)
    if isinstance(name, str) and isinstance(line, str):
        return name, line
    return None


def timeit_statement(line: str) -> tuple[str, str | None] | None:
    """The statement ``%timeit`` times, and the name ``-v NAME`` saves its result in.

    Options are read as IPython's getopt reads them; None when a token is not one of
    them (IPython then refuses the line itself).

    >>> timeit_statement("-n1 -r 3 f(x)"), timeit_statement("-o -v res g()")
    (('f(x)', None), ('g()', 'res'))
    """
    rest = line.lstrip()
    saved: str | None = None
    while rest.startswith("-"):
        token, _, after = rest.partition(" ")
        flags = token[1:]
        while flags:
            flag, flags = flags[0], flags[1:]
            spec = TIMEIT_OPTIONS.find(flag)
            if flag == ":" or spec < 0:
                return None
            if TIMEIT_OPTIONS[spec + 1 : spec + 2] == ":":
                if not flags:
                    flags, _, after = after.lstrip().partition(" ")
                if flag == "v":
                    saved = flags
                flags = ""
        rest = after.lstrip()
    return rest, saved


def magic_code(code: str) -> list[ast.stmt] | None:
    """The statements of a code-running magic's argument, or None when they do not parse.

    >>> len(magic_code("x = f()")), magic_code("!ls") is None
    (1, True)
    """
    # IPython transforms the argument again before running it; code that still
    # needs that (``%time !ls``) does not parse and stays opaque, as before.
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return ast.parse(code, "<magic>", "exec").body
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None


def irrefutable(case: ast.match_case) -> bool:
    """True for a ``case`` that matches anything (``case _:`` or ``case name:``, unguarded).

    >>> irrefutable(ast.parse("match x:\\n    case _: pass").body[0].cases[0])
    True
    """
    pattern = case.pattern
    return case.guard is None and isinstance(pattern, ast.MatchAs) and pattern.pattern is None
