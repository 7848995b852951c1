"""The kernel's side of the wire format and the lab extension's say the same thing.

Both are written by hand: ``ipy_resume/frontends/protocol.py`` (with ``comm.py``, which answers
``badges`` and pushes events) and ``labextension/src/protocol.ts`` / ``types.ts`` (with
``client.ts``, which tells pushes from answers). The Python is read through its AST, the
TypeScript through a few regexes over the declarations that matter, never a general
parser:

* the request names: ``REQUESTS`` against the ``TimelineApi`` methods' ``request: 'NAME'``;
* each request's fields: what the handler reads of the request against what the method
  sends (a field the panel leaves out must be listed in :data:`NOT_SENT`, with why);
* the answers the handlers build as dict literals (``plan``, ``badges``) against the
  declared answer types, nested lists of rows included;
* the pushed events (``{"event": NAME, ...}`` in ``comm.py``) against the names
  ``client.ts`` dispatches on and the interfaces that declare them.

The checker's own tests feed it altered copies of the texts, so each kind of drift is
shown to fail with a message that names what is missing or extra, and on which side.
"""

from __future__ import annotations

import ast
import inspect
import re
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field, replace
from pathlib import Path

import pytest

from ipy_resume.frontends import comm, protocol

SRC = Path(__file__).resolve().parent.parent / "labextension" / "src"

ENVELOPE = {"id", "request"}
"""Every request carries these; the transports own them, not the handlers."""

NOT_SENT = {("snapshot", "limit"): "the panel pages by 'after' alone; 'limit' is for pushes"}
"""Fields the kernel reads that the panel never sends, with the reason each is fine."""


@dataclass(frozen=True)
class Sources:
    """The texts the check reads: the two Python modules and the three TypeScript ones."""

    protocol_py: str
    comm_py: str
    protocol_ts: str
    types_ts: str
    client_ts: str

    @classmethod
    def of_the_project(cls) -> Sources:
        def python(obj: object) -> str:
            path = inspect.getsourcefile(obj)  # type: ignore[arg-type]
            assert path is not None
            return Path(path).read_text(encoding="utf-8")

        def ts(name: str) -> str:
            return (SRC / name).read_text(encoding="utf-8")

        return cls(
            python(protocol.handle),  # where the handlers live, wherever that module moves
            python(comm.outcome_message),
            ts("protocol.ts"),
            ts("types.ts"),
            ts("client.ts"),
        )


# ---- the TypeScript side ----------------------------------------------------------------------


@dataclass
class Shape:
    """An object type: its required and optional fields with their type texts."""

    fields: dict[str, str] = field(default_factory=dict)
    optional: set[str] = field(default_factory=set)
    open: bool = False  # an index signature: any further key is declared too

    @property
    def required(self) -> set[str]:
        return set(self.fields) - self.optional


_INTERFACE = re.compile(r"^export interface (\w+) \{\n(.*?)^\}", re.M | re.S)
_MEMBER = re.compile(r"^  (\w+)(\??):\s*(.+?);\s*$", re.M)
_COMMENT = re.compile(r"/\*.*?\*/", re.S)


def ts_interfaces(*texts: str) -> dict[str, Shape]:
    """The ``export interface`` declarations of *texts*, by name (members at 2 spaces)."""
    found: dict[str, Shape] = {}
    for text in texts:
        for match in _INTERFACE.finditer(text):
            body = _COMMENT.sub("", match.group(2))
            shape = Shape(open=re.search(r"^  \[\w+: string\]:", body, re.M) is not None)
            for name, optional, type_text in _MEMBER.findall(body):
                shape.fields[name] = type_text.strip()
                if optional:
                    shape.optional.add(name)
            found[match.group(1)] = shape
    return found


def inline_shape(type_text: str) -> Shape | None:
    """``{ a: T; b?: U }`` as a shape; None for anything else (a named type)."""
    text = type_text.strip()
    if not (text.startswith("{") and text.endswith("}")):
        return None
    shape = Shape()
    for name, optional, member in re.findall(r"(\w+)(\??):\s*([^;}]+)", text[1:-1]):
        shape.fields[name] = member.strip()
        if optional:
            shape.optional.add(name)
    return shape


@dataclass(frozen=True)
class TsRequest:
    fields: frozenset[str]
    answer: str  # the type text inside Promise<...>


_API_METHOD = re.compile(
    r"\w+\([^)]*\):\s*Promise<(?P<answer>.+?)>\s*\{\s*"
    r"return this\.request\(\{\s*request:\s*'(?P<name>\w+)'(?P<rest>[^}]*)\}\)",
    re.S,
)


def ts_requests(protocol_ts: str) -> tuple[dict[str, TsRequest], set[str]]:
    """The ``TimelineApi`` requests by name, and any ``request: 'NAME'`` sent otherwise
    (a layout this reader does not know, so nothing of it goes unchecked silently)."""
    requests: dict[str, TsRequest] = {}
    for match in _API_METHOD.finditer(protocol_ts):
        keys = re.findall(r",\s*(\w+)\s*(?=[:,]|$)", match.group("rest").strip())
        requests[match.group("name")] = TsRequest(frozenset(keys), match.group("answer"))
    every = set(re.findall(r"request:\s*'(\w+)'", protocol_ts))
    return requests, every - set(requests)


def ts_events(client_ts: str, interfaces: dict[str, Shape]) -> tuple[set[str], dict[str, str]]:
    """The event names ``client.ts`` dispatches on, and the interface declaring each."""
    handled = set(re.findall(r"\.event === '(\w+)'", client_ts))
    declared = {
        shape.fields["event"].strip("'"): name
        for name, shape in interfaces.items()
        if re.fullmatch(r"'\w+'", shape.fields.get("event", ""))
    }
    return handled, declared


# ---- the Python side --------------------------------------------------------------------------


def _functions(tree: ast.Module) -> dict[str, ast.FunctionDef]:
    return {node.name: node for node in tree.body if isinstance(node, ast.FunctionDef)}


def _str(node: ast.AST | None) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _dict_keys(node: ast.Dict) -> list[str]:
    return [key for key in map(_str, node.keys) if key is not None]


def _param(function: ast.FunctionDef, position: int) -> str | None:
    params = function.args.args
    return params[position].arg if position < len(params) else None


def fields_read(function: ast.FunctionDef, functions: dict[str, ast.FunctionDef]) -> set[str]:
    """The request fields *function* reads from its parameter ``data``: ``data.get("k")``,
    ``data["k"]``, ``helper(data, "k")``, and what helpers it hands ``data`` to read."""
    return _reads(function, "data", functions, set())


def _reads(
    function: ast.FunctionDef, name: str, functions: dict[str, ast.FunctionDef], seen: set[str]
) -> set[str]:
    seen = seen | {function.name}
    found: set[str] = set()
    for node in ast.walk(function):
        if (
            isinstance(node, ast.Subscript)
            and isinstance(node.value, ast.Name)
            and node.value.id == name
            and (key := _str(node.slice)) is not None
        ):
            found.add(key)
        if not isinstance(node, ast.Call):
            continue
        callee = node.func
        if (
            isinstance(callee, ast.Attribute)
            and callee.attr == "get"
            and isinstance(callee.value, ast.Name)
            and callee.value.id == name
            and node.args
            and (key := _str(node.args[0])) is not None
        ):
            found.add(key)
        handed = [i for i, a in enumerate(node.args) if isinstance(a, ast.Name) and a.id == name]
        if not handed:
            continue
        found.update(key for arg in node.args if (key := _str(arg)) is not None)
        helper = functions.get(callee.id) if isinstance(callee, ast.Name) else None
        if helper is not None and helper.name not in seen:
            for position in handed:
                if (param := _param(helper, position)) is not None:
                    found |= _reads(helper, param, functions, seen)
    return found - ENVELOPE


@dataclass
class PyShape:
    """The keys of a dict literal the kernel sends; *rows*: the shapes of lists in it that
    are built by ``name.append({...})``."""

    keys: list[str]
    rows: dict[str, PyShape] = field(default_factory=dict)


def _shape_of(node: ast.Dict, function: ast.FunctionDef) -> PyShape:
    shape = PyShape(_dict_keys(node))
    for key, value in zip(node.keys, node.values, strict=True):
        if (name := _str(key)) is not None and isinstance(value, ast.Name):
            for call in ast.walk(function):
                if (
                    isinstance(call, ast.Call)
                    and isinstance(call.func, ast.Attribute)
                    and call.func.attr == "append"
                    and isinstance(call.func.value, ast.Name)
                    and call.func.value.id == value.id
                    and call.args
                    and isinstance(call.args[0], ast.Dict)
                ):
                    shape.rows[name] = _shape_of(call.args[0], function)
    return shape


def answer_shape(function: ast.FunctionDef) -> PyShape | None:
    """What *function* answers when it builds the answer as a dict literal: ``return {...}``
    (a handler) or ``reply["data"] = {...}`` (the comm's own reply); None otherwise."""
    for node in ast.walk(function):
        if (
            isinstance(node, ast.Return)
            and isinstance(node.value, ast.Dict)
            and "request" not in _dict_keys(node.value)  # not a whole reply
        ):
            return _shape_of(node.value, function)
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Dict):
            target = node.targets[0]
            if isinstance(target, ast.Subscript) and _str(target.slice) == "data":
                return _shape_of(node.value, function)
    return None


@dataclass
class PyRequest:
    fields: set[str]
    answer: PyShape | None


def _module_values(tree: ast.Module) -> dict[str, ast.expr]:
    """What the module's top level assigns to each plain name (``X = ...``, ``X: T = ...``)."""
    values: dict[str, ast.expr] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
            values[node.targets[0].id] = node.value
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value:
            values[node.target.id] = node.value
    return values


def py_requests(sources: Sources) -> tuple[list[str], dict[str, PyRequest]]:
    """``REQUESTS`` as written, and each request's handler facts: those of ``HANDLERS``
    from ``protocol.py``, ``badges`` from the ``comm.py`` function that replies to it."""
    tree = ast.parse(sources.protocol_py)
    functions = _functions(tree)
    values = _module_values(tree)
    requests, table = values.get("REQUESTS"), values.get("HANDLERS")
    assert isinstance(requests, ast.Tuple), "protocol.py has no REQUESTS = (...)"
    assert isinstance(table, ast.Dict), "protocol.py has no HANDLERS = {...}"
    names = [name for name in map(_str, requests.elts) if name is not None]
    handlers: dict[str, ast.FunctionDef] = {}
    for key, value in zip(table.keys, table.values, strict=True):
        if (request := _str(key)) is not None and isinstance(value, ast.Name):
            handlers[request] = functions[value.id]
    found = {
        request: PyRequest(fields_read(function, functions), answer_shape(function))
        for request, function in handlers.items()
    }
    comm_functions = _functions(ast.parse(sources.comm_py))
    for function in comm_functions.values():
        replies = [
            request
            for node in ast.walk(function)
            if isinstance(node, ast.Dict)
            for key, value in zip(node.keys, node.values, strict=True)
            if _str(key) == "request" and (request := _str(value)) is not None
        ]
        for request in replies:
            if request not in found:
                reads = fields_read(function, comm_functions)
                found[request] = PyRequest(reads, answer_shape(function))
    return names, found


def py_events(comm_py: str) -> dict[str, PyShape]:
    """The messages ``comm.py`` pushes: dict literals with a constant ``"event"``."""
    events: dict[str, PyShape] = {}
    for function in _functions(ast.parse(comm_py)).values():
        for node in ast.walk(function):
            if isinstance(node, ast.Dict):
                pairs = dict(zip(map(_str, node.keys), node.values, strict=True))
                if (event := _str(pairs.get("event"))) is not None:
                    events[event] = _shape_of(node, function)
    return events


# ---- the comparison ---------------------------------------------------------------------------


def _listed(names: AbstractSet[str]) -> str:
    return ", ".join(repr(n) for n in sorted(names))


def compare_shapes(what: str, py: PyShape, ts: Shape, types: dict[str, Shape]) -> list[str]:
    """What differs between a dict the kernel sends and the TypeScript type declaring it."""
    out = []
    keys = set(py.keys)
    if missing := ts.required - keys:
        out.append(f"{what}: the TypeScript requires {_listed(missing)}; the kernel never sends")
    if not ts.open and (extra := keys - set(ts.fields)):
        out.append(f"{what}: the kernel sends {_listed(extra)}; the TypeScript never declares")
    for key, rows in py.rows.items():
        element = re.fullmatch(r"(\w+)\[\]", ts.fields.get(key, ""))
        if element is None or element.group(1) not in types:
            out.append(f"{what}: '{key}' is a list of rows, but the TypeScript type is not X[]")
            continue
        out += compare_shapes(f"{what}.{key}[]", rows, types[element.group(1)], types)
    return out


def problems(sources: Sources) -> list[str]:
    """Every disagreement between the two sides, one line each; [] when they agree."""
    out: list[str] = []
    types = ts_interfaces(sources.protocol_ts, sources.types_ts)
    ts_sent, unread = ts_requests(sources.protocol_ts)
    names, py_sent = py_requests(sources)
    out += [f"protocol.ts sends request {r!r} outside a TimelineApi method" for r in unread]
    for name in sorted(set(names) - set(ts_sent)):
        out.append(f"request {name!r}: in protocol.py REQUESTS, not in protocol.ts TimelineApi")
    for name in sorted(set(ts_sent) - set(names)):
        out.append(f"request {name!r}: in protocol.ts TimelineApi, not in protocol.py REQUESTS")
    for name in sorted(set(names) - set(py_sent)):
        out.append(f"request {name!r}: in REQUESTS, but no handler in protocol.py or comm.py")
    for name in sorted(set(names) & set(ts_sent) & set(py_sent)):
        ts_request, py_request = ts_sent[name], py_sent[name]
        if extra := ts_request.fields - py_request.fields:
            out.append(
                f"request {name!r}: protocol.ts sends {_listed(extra)}; the kernel never reads"
            )
        unsent = {f for f in py_request.fields - ts_request.fields if (name, f) not in NOT_SENT}
        if unsent:
            out.append(
                f"request {name!r}: the kernel reads {_listed(unsent)}; protocol.ts never sends "
                "(send it, or list it in NOT_SENT with why)"
            )
        if py_request.answer is None:
            continue  # built elsewhere (queries.py), not a literal of the wire module
        ts_answer = inline_shape(ts_request.answer) or types.get(ts_request.answer)
        if ts_answer is None:
            out.append(f"request {name!r}: its answer type {ts_request.answer} is not declared")
        else:
            out += compare_shapes(f"the answer to {name!r}", py_request.answer, ts_answer, types)
    handled, declared = ts_events(sources.client_ts, types)
    pushed = py_events(sources.comm_py)
    for event in sorted(set(pushed) - handled):
        out.append(f"event {event!r}: comm.py pushes it; client.ts never dispatches on it")
    for event in sorted(handled - set(pushed)):
        out.append(f"event {event!r}: client.ts dispatches on it; comm.py never pushes it")
    for event in sorted(set(declared) - set(pushed)):
        out.append(f"event {event!r}: interface {declared[event]} declares it; never pushed")
    for event in sorted(set(pushed) & set(declared)):
        interface = declared[event]
        out += compare_shapes(
            f"event {event!r} ({interface})", pushed[event], types[interface], types
        )
    return out


# ---- the tests --------------------------------------------------------------------------------


def test_protocol_py_and_the_typescript_agree() -> None:
    found = problems(Sources.of_the_project())
    assert found == [], "\n".join(found)


def test_the_checker_reads_every_part_of_both_sides() -> None:
    sources = Sources.of_the_project()
    names, py_sent = py_requests(sources)
    assert tuple(names) == protocol.REQUESTS  # the AST reading is the module's own value
    assert set(py_sent) == set(protocol.REQUESTS)
    assert py_sent["restore"].fields == {"target"} and py_sent["badges"].fields == {"on"}
    assert py_sent["snapshot"].fields == {"after", "limit"}
    plan = py_sent["plan"].answer
    assert plan is not None and "verdict" in plan.rows["cells"].keys
    ts_sent, unread = ts_requests(sources.protocol_ts)
    assert set(ts_sent) == set(protocol.REQUESTS) and unread == set()
    assert ts_sent["plan"].fields == {"cells"} and ts_sent["badges"].fields == {"on"}
    types = ts_interfaces(sources.protocol_ts, sources.types_ts)
    assert {"ChangedMessage", "CellOutcome", "PlannedCell", "RunAllPlan"} <= set(types)
    assert types["Details"].open and not types["PlannedCell"].open
    assert set(py_events(sources.comm_py)) == {"hello", "changed", "outcome"}


# Each: the file, a text in it, what replaces it, and a name the failure must mention.
DRIFTS = [
    ("protocol_ts", "request: 'details'", "request: 'detail'", "'detail'"),
    ("protocol_ts", "request: 'restore', target }", "request: 'restore', targets }", "'targets'"),
    ("protocol_ts", "request: 'plan', cells }", "request: 'plan' }", "'cells'"),
    ("protocol_py", '"snapshot", "details", "restore",', '"snapshot", "details",', "'restore'"),
    ("protocol_py", '"verdict": planned.verdict,', '"verdicts": planned.verdict,', "'verdicts'"),
    ("protocol_py", '"saved": plan.saved, ', "", "'saved'"),
    (
        "types_ts",
        "  short_id: string | null;\n}\n\nexport interface RunAllPlan",
        "}\n\nexport interface RunAllPlan",
        "'short_id'",
    ),
    ("types_ts", "  cells: PlannedCell[];", "  cells: PlannedCell[];\n  total: number;", "'total'"),
    ("types_ts", "  reason: string;\n  detail: string;", "  detail: string;", "'reason'"),
    ("protocol_ts", "  last_seq: number | null;\n  store", "  store", "'last_seq'"),
    ("client_ts", "data.event === 'outcome'", "data.event === 'outcomes'", "'outcomes'"),
    ("comm_py", '"on", True', '"enabled", True', "'enabled'"),
]


@pytest.mark.parametrize(("part", "old", "new", "named"), DRIFTS, ids=[d[3] for d in DRIFTS])
def test_a_drift_on_either_side_fails_naming_it(part: str, old: str, new: str, named: str) -> None:
    sources = Sources.of_the_project()
    text = getattr(sources, part)
    assert text.count(old) == 1, f"{old!r} is no longer in {part}: update this drift"
    found = problems(replace(sources, **{part: text.replace(old, new)}))
    assert found, f"changing {old!r} to {new!r} in {part} went unnoticed"
    assert any(named in line for line in found), found
