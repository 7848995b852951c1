"""Bounded fingerprints: linear cost on cycles and shared graphs, the budget, aliases, rules
for handles (files, sockets, connections, locks, threads) and widgets."""

from __future__ import annotations

import io
import itertools
import socket
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from ipy_resume.fingerprint import (
    BUDGET_ENV,
    Fingerprinter,
    Unfingerprintable,
    clear_aliases,
    defer_alias,
    fingerprint,
    register_alias,
)
from ipy_resume.fingerprint.core import read_budget

REPO = Path(__file__).resolve().parents[1]


class Hub:
    def __init__(self) -> None:
        self.nodes: list[Node] = []


class Node:
    def __init__(self, value: int, hub: Hub) -> None:
        self.value = value
        self.hub = hub
        self.left: Node | None = None
        self.right: Node | None = None
        self.skip: Node | None = None


def cycle_graph(n: int, ring: int = 16) -> Hub:
    """*n* nodes, each pointing to a shared hub and to neighbours in rings of *ring*."""
    hub = Hub()
    nodes = [Node(i, hub) for i in range(n)]
    for start in range(0, n, ring):
        group = nodes[start : start + ring]
        for j, node in enumerate(group):
            node.left = group[j - 1]
            node.right = group[(j + 1) % len(group)]
            # a second path around the ring: the path-by-path traversal was exponential here
            node.skip = group[(j + 2) % len(group)]
    hub.nodes = nodes
    return hub


def timed(value: object) -> tuple[bytes, float]:
    # this thread's CPU time: the ratios below compare work, which a loaded machine's
    # waiting for a core would otherwise swamp
    start = time.thread_time()
    digest = fingerprint(value)
    return digest, time.thread_time() - start


def test_cycle_heavy_graph_is_linear() -> None:
    small, big = cycle_graph(50_000), cycle_graph(100_000)
    timed(cycle_graph(2_000))  # warm the rule caches
    d_small, t_small = timed(small)
    d_big, t_big = timed(big)
    assert d_small != d_big
    assert t_big < 5 * t_small + 0.5, (t_small, t_big)
    assert fingerprint(cycle_graph(50_000)) == d_small  # a rebuilt graph agrees
    changed = cycle_graph(50_000)
    changed.nodes[31_234].value = -1
    assert fingerprint(changed) != d_small


def test_old_exponential_cycle_case_is_fast() -> None:
    # One ring of 40 with skip links has ~10**8 simple paths; each node is now digested a
    # bounded number of times.
    hub = cycle_graph(40, ring=40)
    digest, seconds = timed(hub)
    assert seconds < 2
    assert digest == fingerprint(cycle_graph(40, ring=40))


def shared_dag(width: int, depth: int) -> list[Any]:
    layer: list[Any] = [[i] for i in range(width)]
    for _ in range(depth):
        layer = [[layer[i], layer[(i + 1) % width]] for i in range(width)]
    return layer


def test_shared_dag_of_a_million_objects_is_linear() -> None:
    # 2**100 paths from the top to each leaf; 10,000 x 101 lists plus 10,000 leaves
    half, full = shared_dag(5_000, 100), shared_dag(10_000, 100)
    d_half, t_half = timed(half)
    d_full, t_full = timed(full)
    assert d_half != d_full
    assert t_full < 5 * t_half + 0.5, (t_half, t_full)
    assert t_full < 60


def test_cycles_keep_structure() -> None:
    # The same contents with the reference pointing elsewhere: never one digest.
    def graph(redirect: bool) -> list[Any]:
        top, a, b, c, y = ["l"], ["a"], ["b"], ["c"], ["y"]
        top += [a, b]
        a.append(y)
        b.append(c)
        y.append(top)
        if redirect:
            y2 = ["y", b]
            c.append(y2)
        else:
            c.append(y)
        return top

    assert fingerprint(graph(False)) != fingerprint(graph(True))
    assert fingerprint(graph(False)) == fingerprint(graph(False))


def test_cycle_member_digest_is_independent_of_entry_point() -> None:
    nodes = [Node(i, Hub()) for i in range(6)]
    for a, b in itertools.pairwise([*nodes, nodes[0]]):
        a.right = b
    alone = [fingerprint(n) for n in nodes]
    together = Fingerprinter()
    together.digest(list(reversed(nodes)))
    assert [together.digest(n) for n in nodes] == alone
    assert len(set(alone)) == 6


def test_unordered_containers_on_cycles_do_not_depend_on_order() -> None:
    def build(order: list[int]) -> dict[str, Any]:
        nodes = {i: Node(i, Hub()) for i in range(5)}
        top: dict[str, Any] = {}
        for i in order:
            top[f"n{i}"] = nodes[i]
            nodes[i].left = top  # type: ignore[assignment]
        return top

    assert fingerprint(build([0, 1, 2, 3, 4])) == fingerprint(build([4, 2, 0, 3, 1]))


def test_budget_exceeded_raises_in_words() -> None:
    value = [[i] for i in range(100)]
    with pytest.raises(Unfingerprintable) as info:
        Fingerprinter(max_objects=50).digest(value)
    message = str(info.value)
    assert "'list'" in message
    assert "too large to fingerprint (more than 50 objects" in message
    assert BUDGET_ENV in message
    assert len(Fingerprinter(max_objects=101).digest(value)) == 16


def test_default_budget_message(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(BUDGET_ENV, raising=False)
    fp = Fingerprinter()
    assert (fp._max_objects, fp._max_seconds) == (5_000_000, 20.0)
    fp._top_name = "tuple"
    fp._count = 5_000_001
    with pytest.raises(Unfingerprintable) as info:
        fp._check_budget()
    assert str(info.value) == (
        "cannot fingerprint a value of type 'tuple': it is too large to fingerprint "
        "(more than 5,000,000 objects; IPY_RESUME_FINGERPRINT_BUDGET raises the limit)"
    )


def test_time_budget() -> None:
    graph = cycle_graph(60_000)
    with pytest.raises(Unfingerprintable, match=r"takes too long to fingerprint \(more than"):
        Fingerprinter(max_seconds=0.001).digest(graph)


def test_budget_is_per_top_level_value() -> None:
    fp = Fingerprinter(max_objects=150)
    for _ in range(5):
        assert len(fp.digest([[i] for i in range(100)])) == 16


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (None, (5_000_000, 20.0)),
        ("", (5_000_000, 20.0)),
        ("1000", (1000, 20.0)),
        ("1000,2.5", (1000, 2.5)),
        (" 2_000 , 7 ", (2000, 7.0)),
        ("many", (5_000_000, 20.0)),
        ("-5,-1", (5_000_000, 20.0)),
        ("10,nan", (10, 20.0)),
        ("x,3", (5_000_000, 3.0)),
    ],
)
def test_budget_env_format(text: str | None, expected: tuple[int, float]) -> None:
    assert read_budget(text) == expected


def test_budget_env_var_is_read_when_a_fingerprinter_is_created(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    value = [[i] for i in range(100)]
    monkeypatch.setenv(BUDGET_ENV, "20")
    fp = Fingerprinter()
    with pytest.raises(Unfingerprintable, match="more than 20 objects"):
        fp.digest(value)
    monkeypatch.setenv(BUDGET_ENV, "not a number")
    assert len(Fingerprinter().digest(value)) == 16
    monkeypatch.delenv(BUDGET_ENV)
    with pytest.raises(Unfingerprintable):
        fp.digest(value)  # the limit read at creation stays


def test_budget_env_var_in_a_child_process() -> None:
    code = (
        "from ipy_resume.fingerprint import fingerprint, Unfingerprintable\n"
        "try:\n    fingerprint([[i] for i in range(1000)])\n"
        "except Unfingerprintable as exc:\n    print(exc)\n"
    )
    env = {"PATH": "/usr/bin:/bin", BUDGET_ENV: "100,5"}
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert "more than 100 objects" in out.stdout


# ---- aliases ------------------------------------------------------------------------------------


class Bunch(dict[str, Any]):
    """Like scikit-learn's Bunch: a private attribute that pickling drops."""

    def __setstate__(self, state: Any) -> None:
        pass


@pytest.fixture
def aliases() -> Any:
    clear_aliases()
    yield
    clear_aliases()


def test_alias_top_level_and_nested(aliases: None) -> None:
    import pickle

    saved = Bunch(data=[1, 2, 3])
    saved.__dict__["_private"] = "dropped by pickling"
    saved_digest = fingerprint(saved)
    restored = pickle.loads(pickle.dumps(saved))
    restored_digest = fingerprint(restored)
    assert restored_digest != saved_digest  # the round trip is not exact
    nested_before = fingerprint({"model": saved, "n": 1})
    assert fingerprint({"model": restored, "n": 1}) != nested_before
    register_alias(restored_digest, saved_digest)
    assert fingerprint(restored) == saved_digest
    assert fingerprint({"model": restored, "n": 1}) == nested_before
    assert fingerprint([restored, restored]) == fingerprint([saved, saved])
    # a change after the restore misses
    restored["data"] = [1, 2, 4]
    assert fingerprint(restored) not in (saved_digest, restored_digest)
    assert fingerprint({"model": restored, "n": 1}) != nested_before
    clear_aliases()
    restored["data"] = [1, 2, 3]
    assert fingerprint(restored) == restored_digest


def test_alias_applies_to_cycle_members(aliases: None) -> None:
    a: list[Any] = [1]
    a.append(a)
    digest, nested = fingerprint(a), fingerprint([a])
    register_alias(digest, b"\x07" * 16)
    assert fingerprint(a) == b"\x07" * 16
    assert fingerprint([a]) != nested  # the list hashes the alias


def _round_trip(value: Any) -> Any:
    import pickle

    return pickle.loads(pickle.dumps(value))


def test_a_deferred_alias_is_decided_by_the_first_digest(aliases: None) -> None:
    saved = Bunch(data=[1, 2, 3])
    saved.__dict__["_private"] = "dropped by pickling"
    saved_digest = fingerprint(saved)
    asked: list[int] = []

    def recompute_of(value: Any) -> Any:
        def recompute() -> bytes:
            asked.append(1)
            return fingerprint(_round_trip(value))

        return recompute

    # inexact round trip, unchanged since: the saved digest, nested too; reloaded once
    restored = _round_trip(saved)
    defer_alias(restored, saved_digest, recompute_of(saved))
    nested = fingerprint({"model": saved, "n": 1})
    assert fingerprint({"model": restored, "n": 1}) == nested
    assert fingerprint(restored) == saved_digest
    assert len(asked) == 1
    # changed before its first digest: no alias, and it misses
    clear_aliases()
    changed = _round_trip(saved)
    defer_alias(changed, saved_digest, recompute_of(saved))
    changed["data"] = [9]
    assert fingerprint(changed) != saved_digest
    changed["data"] = [1, 2, 3]  # changed back: the value as restored again
    assert fingerprint(changed) == saved_digest
    # an exact round trip never reloads
    clear_aliases()
    asked.clear()
    exact = Bunch(data=[4])
    defer_alias(_round_trip(exact), fingerprint(exact), recompute_of(exact))
    again = _round_trip(exact)
    defer_alias(again, fingerprint(exact), recompute_of(exact))
    assert fingerprint(again) == fingerprint(exact) and asked == []
    # a reload that fails registers nothing
    clear_aliases()
    failing = _round_trip(saved)
    defer_alias(failing, saved_digest, lambda: None)
    assert fingerprint(failing) != saved_digest


def test_a_deferred_alias_follows_its_object_not_its_address(aliases: None) -> None:
    import gc

    saved = Bunch(data=[1])
    saved.__dict__["_private"] = 1
    gone = _round_trip(saved)
    defer_alias(gone, fingerprint(saved), lambda: fingerprint(_round_trip(saved)))
    del gone
    gc.collect()
    other = Bunch(data=[2])  # (may sit where the restored object was)
    assert fingerprint(other) == fingerprint(Bunch(data=[2]))
    with pytest.raises(ValueError):
        defer_alias(other, b"short", lambda: None)


def test_alias_arguments_are_checked(aliases: None) -> None:
    with pytest.raises(TypeError):
        register_alias("x" * 16, b"y" * 16)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        register_alias(b"short", b"y" * 16)
    value = [1, 2]
    register_alias(fingerprint(value), fingerprint(value))  # an alias to itself is a no-op
    assert fingerprint(value) == fingerprint([1, 2])


def test_aliases_do_not_touch_atomic_values(aliases: None) -> None:
    register_alias(fingerprint("text"), b"\x01" * 16)
    assert fingerprint("text") != b"\x01" * 16


# ---- handles and stdlib objects -----------------------------------------------------------------


def test_handles_raise_with_a_reason(tmp_path: Path) -> None:
    path = tmp_path / "f.txt"
    path.write_text("x")
    lock = threading.Lock()
    thread = threading.Thread(target=lambda: None)
    connection = sqlite3.connect(":memory:")
    sock = socket.socket()
    try:
        with path.open() as text_file, path.open("rb") as binary_file:
            cases: list[tuple[Any, str]] = [
                (text_file, "open file"),
                (binary_file, "open file"),
                (lock, "lock"),
                (threading.RLock(), "lock"),
                (threading.Condition(), "lock"),
                (threading.Event(), "lock"),
                (thread, "thread"),
                (connection, "database connection"),
                (connection.cursor(), "database connection"),
                (sock, "network socket"),
            ]
            for value, words in cases:
                with pytest.raises(Unfingerprintable, match=words):
                    fingerprint(value)
                with pytest.raises(Unfingerprintable, match=words):
                    fingerprint({"nested": [value]})
    finally:
        connection.close()
        sock.close()


def test_in_memory_streams_and_counters_are_values() -> None:
    assert fingerprint(io.BytesIO(b"abc")) == fingerprint(io.BytesIO(b"abc"))
    assert fingerprint(io.BytesIO(b"abc")) != fingerprint(io.BytesIO(b"abd"))
    assert fingerprint(itertools.count(3)) == fingerprint(itertools.count(3))
    assert fingerprint(itertools.count(3)) != fingerprint(itertools.count(4))
    assert fingerprint(itertools.count(3, 2)) != fingerprint(itertools.count(3))


def test_ipywidgets_by_synchronised_state() -> None:
    widgets = pytest.importorskip("ipywidgets")
    a = widgets.IntSlider(value=3, description="n")
    b = widgets.IntSlider(value=3, description="n")
    assert fingerprint(a) == fingerprint(b)  # model ids differ, values do not
    b.value = 4
    assert fingerprint(a) != fingerprint(b)
    box_a = widgets.VBox([a, widgets.Label("x")])
    box_b = widgets.VBox([widgets.IntSlider(value=3, description="n"), widgets.Label("x")])
    assert fingerprint(box_a) == fingerprint(box_b)
    a.layout.width = "100px"
    assert fingerprint(box_a) != fingerprint(box_b)
