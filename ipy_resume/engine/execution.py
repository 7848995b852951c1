"""Compile and run a cell body the way a notebook does, outside of IPython.

A notebook shows the value of a cell's last expression; a cell magic has to do
that itself, so the body is split into "everything but the last expression"
and "the last expression". :class:`PlainHost` runs cells in a plain dict and is
what the engine's tests and the headless demo use.
"""

from __future__ import annotations

import ast
import io
import sys
import tokenize
from collections.abc import MutableMapping
from dataclasses import dataclass
from types import CodeType
from typing import Any

from ..runtime.capture import OutputRecord, replay, tee_streams
from .core import RunResult


@dataclass
class CompiledCell:
    """A cell body compiled into its statements and, when it ends in one, its last expression."""

    body: CodeType
    last: CodeType | None


def compile_cell(source: str, filename: str = "<cell>", flags: int = 0) -> CompiledCell:
    """Compile *source*; the trailing expression (unless it ends with ';') becomes ``last``.

    >>> cell = compile_cell("x = 1\\nx + 1"); cell.last is not None
    True
    >>> compile_cell("x = 1\\nx + 1;").last is None
    True
    """
    tree = ast.parse(source, filename=filename, mode="exec")
    last: ast.Expression | None = None
    final = tree.body[-1] if tree.body else None
    if isinstance(final, ast.Expr) and not _ends_with_semicolon(source, final):
        tree.body.pop()
        last = ast.Expression(final.value)
    body = compile(tree, filename, "exec", flags=flags, dont_inherit=True)
    tail = None
    if last is not None:
        tail = compile(last, filename, "eval", flags=flags, dont_inherit=True)
    return CompiledCell(body, tail)


def run_compiled(cell: CompiledCell, namespace: MutableMapping[str, Any]) -> tuple[Any, bool]:
    """Execute a compiled cell in *namespace*; return (value, has_value)."""
    __tracebackhide__ = True  # IPython hides this frame in the user's traceback
    globals_ = namespace if isinstance(namespace, dict) else dict(namespace)
    exec(cell.body, globals_)
    if cell.last is None:
        return None, False
    return eval(cell.last, globals_), True


_SKIPPED = frozenset(
    {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.ENDMARKER, tokenize.INDENT}
    | {tokenize.DEDENT}
)


def _ends_with_semicolon(source: str, final: ast.stmt | None = None) -> bool:
    """Whether the last token of *source* (not a comment) is ``;``.

    Tokens, not text: a '#' or ';' inside a string literal must not count.  With *final*,
    the cell's last statement, only what follows it is tokenized (the tokenizer is pure
    Python, milliseconds for a long cell): the statement's own last token is never ';',
    so the last token of the whole is the remainder's when it has one, and the remainder
    starts outside any string.  Anything unusual takes the whole text.
    """
    rest = None
    end_line = getattr(final, "end_lineno", None)
    end_col = getattr(final, "end_col_offset", None)
    if end_line is not None and end_col is not None and "\r" not in source:
        lines = source.split("\n")
        if end_line <= len(lines):
            # (column offsets count the line's UTF-8 bytes)
            tail = lines[end_line - 1].encode("utf-8")[end_col:].decode("utf-8", "replace")
            rest = "\n".join([tail, *lines[end_line:]])
    if rest is not None:
        try:
            return _last_is_semicolon(rest)
        except (tokenize.TokenError, SyntaxError):
            pass
    try:
        return _last_is_semicolon(source)
    except (tokenize.TokenError, SyntaxError):
        return False


def _last_is_semicolon(text: str) -> bool:
    last = None
    for token in tokenize.generate_tokens(io.StringIO(text).readline):
        if token.type not in _SKIPPED:
            last = token
    return last is not None and last.type == tokenize.OP and last.string == ";"


class PlainHost:
    """Run a cell in a plain namespace with stdout/stderr teed; displays are dropped.

    >>> ns = {}; PlainHost("print('hi'); y = 2", ns).run().record.text()
    hi
    'hi\\n'
    """

    def __init__(self, source: str, namespace: dict[str, Any]) -> None:
        self.source = source
        self.namespace = namespace
        self.messages: list[str] = []

    def run(self) -> RunResult:
        __tracebackhide__ = True
        record = OutputRecord()
        cell = compile_cell(self.source)
        with tee_streams(record):
            value, has_value = run_compiled(cell, self.namespace)
        return RunResult(value, has_value, record)

    def replay(self, record: OutputRecord) -> None:
        replay(record)

    def message(self, text: str) -> None:
        self.messages.append(text)
        print(text, file=sys.stderr)
