"""Fingerprints: equal values agree across processes, different values differ."""

from __future__ import annotations

import collections
import copy
import dataclasses
import datetime
import decimal
import fractions
import functools
import itertools
import json
import math
import os
import pathlib
import struct
import subprocess
import sys
import textwrap
import threading
import tracemalloc
import types
import uuid
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import pandas as pd
import pytest
from conftest import python_output
from hypothesis import given, settings
from hypothesis import strategies as st

from ipy_resume.fingerprint import (
    Fingerprinter,
    Unfingerprintable,
    digest_bytes,
    fingerprint,
    fingerprint_hex,
    register,
)
from ipy_resume.fingerprint import core as fpcore

REPO = Path(__file__).resolve().parents[1]


def distinct(values: list[Any]) -> None:
    """Assert that all *values* have pairwise different fingerprints."""
    digests = [fingerprint(v) for v in values]
    for i, d in enumerate(digests):
        assert len(d) == 16
        for j in range(i):
            assert digests[j] != d, f"{values[j]!r} and {values[i]!r} collide"


def main_namespace(src: str) -> dict[str, Any]:
    """Run *src* in a fresh namespace that looks like a notebook's ``__main__``."""
    ns: dict[str, Any] = {"__name__": "__main__"}
    exec(compile(textwrap.dedent(src), "<cell>", "exec", dont_inherit=True), ns)
    return ns


# ---- interface -----------------------------------------------------------------------------


def test_digest_sizes_and_hex() -> None:
    assert len(fingerprint(1)) == 16
    assert fingerprint_hex([1, 2]) == fingerprint([1, 2]).hex()
    assert Fingerprinter().digest("x") == fingerprint("x")


def test_digest_bytes_frames_parts() -> None:
    assert digest_bytes(b"ab", b"c") != digest_bytes(b"a", b"bc")
    assert digest_bytes(b"abc") != digest_bytes(b"abc", b"")
    assert digest_bytes(b"abc") == digest_bytes(memoryview(b"abc"))
    big = np.arange(1 << 18, dtype=np.float64)  # 2 MB: takes the streaming path
    assert digest_bytes(b"x", memoryview(big)) == digest_bytes(b"x", big.tobytes())
    assert digest_bytes(memoryview(big)[::2]) == digest_bytes(big[::2].tobytes())


def test_unfingerprintable_is_picklable_and_one_line() -> None:
    import pickle

    exc = Unfingerprintable("generator", "generators cannot be pickled")
    clone = pickle.loads(pickle.dumps(exc))
    assert clone.type_name == "generator"
    assert (
        str(clone)
        == str(exc)
        == ("cannot fingerprint a value of type 'generator': generators cannot be pickled")
    )


# ---- scalars and type tags ---------------------------------------------------------------


def test_type_tags_distinguish_equal_looking_values() -> None:
    distinct(
        [
            1,
            1.0,
            True,
            "1",
            b"1",
            bytearray(b"1"),
            memoryview(b"1"),
            [1],
            (1,),
            {1},
            frozenset({1}),
            {1: 1},
            1 + 0j,
            decimal.Decimal(1),
            fractions.Fraction(1),
            np.int64(1),
            np.float64(1),
            np.array(1),
            None,
            0,
            False,
            "",
            b"",
            [],
            (),
            {},
            set(),
            frozenset(),
            ...,
            NotImplemented,
            range(1),
            slice(1),
        ]
    )


def test_ints_of_any_size() -> None:
    assert fingerprint(2**200) == fingerprint(int(str(2**200)))
    distinct([0, -1, 1, 255, 256, -256, 2**63, -(2**63), 2**64, 2**200, -(2**200)])


def test_floats() -> None:
    distinct([0.0, -0.0, 1.0, -1.0, math.inf, -math.inf, 5e-324, 0.1, 0.1 + 2**-56])
    assert fingerprint(float("nan")) == fingerprint(-float("nan")) == fingerprint(math.nan)
    assert fingerprint(complex(1, 2)) != fingerprint(complex(2, 1))
    assert fingerprint(complex(math.nan, 1)) == fingerprint(complex(math.nan, 1))


def test_strings_and_bytes() -> None:
    distinct(["a", "b", "ab", "é", "\ud800", "\ud801", "a\0"])
    assert fingerprint("x" * 3_000_000) == fingerprint("".join(["x"] * 3_000_000))
    assert fingerprint("x" * 3_000_000) != fingerprint("x" * 2_999_999 + "y")
    assert fingerprint(b"a" * 2_000_000) == fingerprint(bytes(bytearray(b"a" * 2_000_000)))
    assert fingerprint(bytearray(b"ab")) == fingerprint(bytearray(b"ab"))


def test_memoryview_by_contents_format_and_shape() -> None:
    data = np.arange(6, dtype=np.int32)
    assert fingerprint(memoryview(data)) == fingerprint(memoryview(data.copy()))
    assert fingerprint(memoryview(data)) != fingerprint(memoryview(data.astype(np.float32)))
    assert fingerprint(memoryview(data)) != fingerprint(memoryview(data.reshape(2, 3)))
    assert fingerprint(memoryview(data)[::2]) == fingerprint(memoryview(data[::2].copy()))


def test_ranges_and_slices() -> None:
    distinct([range(3), range(4), range(0, 3, 2), slice(1, 2), slice(1, 2, 1), slice("a")])
    assert fingerprint(slice(1, None)) == fingerprint(slice(1, None))


def test_stdlib_value_types() -> None:
    utc = datetime.timezone.utc
    plus1 = datetime.timezone(datetime.timedelta(hours=1))
    naive = datetime.datetime(2024, 1, 2, 3, 4, 5, 6)
    distinct(
        [
            decimal.Decimal("1.0"),
            decimal.Decimal("1.00"),
            fractions.Fraction(1, 3),
            fractions.Fraction(2, 3),
            datetime.date(2024, 1, 2),
            datetime.date(2024, 1, 3),
            naive,
            naive.replace(tzinfo=utc),
            naive.replace(tzinfo=plus1),
            naive.replace(fold=1),
            datetime.time(1, 2),
            datetime.time(1, 2, tzinfo=utc),
            datetime.timedelta(days=1),
            datetime.timedelta(seconds=1),
            uuid.UUID(int=1),
            uuid.UUID(int=2),
            pathlib.PurePosixPath("a/b"),
            pathlib.PurePosixPath("a/c"),
            pathlib.PureWindowsPath("a/b"),
            pathlib.Path("a/b"),
        ]
    )
    assert fingerprint(datetime.datetime(2024, 1, 2, tzinfo=utc)) == fingerprint(
        datetime.datetime(2024, 1, 2, tzinfo=datetime.timezone.utc)
    )
    assert fingerprint(pathlib.Path("a") / "b") == fingerprint(pathlib.Path("a/b"))


# ---- containers --------------------------------------------------------------------------


def test_sequences_are_ordered_and_recursive() -> None:
    distinct([[1, 2], [2, 1], (1, 2), [[1], 2], [1, [2]], [1, 2, 3], [(1, 2)], [[1, 2]]])
    assert fingerprint([1, [2, {"a": (3,)}]]) == fingerprint([1, [2, {"a": (3,)}]])
    long = list(range(200_000))  # more than one hashing batch
    assert fingerprint(long) == fingerprint(list(range(200_000)))
    assert fingerprint(long) != fingerprint([*range(199_999), -1])


def test_identity_does_not_matter_only_equality() -> None:
    inner = [1, 2]
    assert fingerprint([inner, inner]) == fingerprint([inner, [1, 2]])
    assert fingerprint({"a": inner, "b": inner}) == fingerprint({"a": [1, 2], "b": [1, 2]})


def test_dicts_ignore_insertion_order() -> None:
    a = {"x": 1, "y": [1, 2], 3: "z"}
    b = {3: "z", "y": [1, 2], "x": 1}
    assert fingerprint(a) == fingerprint(b)
    distinct([{"x": 1}, {"x": 2}, {"y": 1}, {"x": 1, "y": 1}, {1: "x"}])
    assert fingerprint({1: "a"}) != fingerprint({1.0: "a"})


def test_dict_flavours() -> None:
    od1 = collections.OrderedDict([("a", 1), ("b", 2)])
    od2 = collections.OrderedDict([("b", 2), ("a", 1)])
    # OrderedDict equality is order-sensitive, so its fingerprint is too
    assert od1 != od2
    assert fingerprint(od1) != fingerprint(od2)
    assert fingerprint(od1) == fingerprint(collections.OrderedDict([("a", 1), ("b", 2)]))
    assert fingerprint(od1) != fingerprint(dict(od1))
    dd_list: collections.defaultdict[str, Any] = collections.defaultdict(list, {"a": 1})
    dd_int: collections.defaultdict[str, Any] = collections.defaultdict(int, {"a": 1})
    distinct([dd_list, dd_int, {"a": 1}, collections.Counter({"a": 1})])
    reordered: collections.defaultdict[str, Any] = collections.defaultdict(list)
    reordered["b"] = 2
    reordered["a"] = 1
    assert fingerprint(reordered) == fingerprint(collections.defaultdict(list, {"a": 1, "b": 2}))


def test_sets_ignore_order() -> None:
    words = [f"w{i}" for i in range(100)]
    assert fingerprint(set(words)) == fingerprint(set(reversed(words)))
    assert fingerprint(frozenset(words)) == fingerprint(frozenset(reversed(words)))
    distinct([set(words), frozenset(words), set(words[:-1]), {1, 2}, {1, 3}])


def test_dict_views_and_mappingproxy() -> None:
    d = {"a": 1, "b": 2}
    e = {"b": 2, "a": 1}
    assert fingerprint(d.keys()) == fingerprint(e.keys())
    assert fingerprint(d.items()) == fingerprint(e.items())
    assert fingerprint(types.MappingProxyType(d)) == fingerprint(types.MappingProxyType(e))
    distinct([d.keys(), d.values(), d.items(), d, types.MappingProxyType(d)])


class Point(NamedTuple):
    x: int
    y: int


class Pair(NamedTuple):
    x: int
    y: int


@dataclasses.dataclass
class Box:
    content: Any
    tags: set[str] = dataclasses.field(default_factory=set)


@dataclasses.dataclass
class Crate:
    content: Any
    tags: set[str] = dataclasses.field(default_factory=set)


def test_named_tuples_and_dataclasses_include_the_class() -> None:
    distinct([Point(1, 2), Pair(1, 2), (1, 2), Point(2, 1)])
    assert fingerprint(Point(1, 2)) == fingerprint(Point(1, 2))
    distinct([Box(1), Crate(1), Box(2), Box(1, {"a"})])
    assert fingerprint(Box([1], {"a", "b"})) == fingerprint(Box([1], {"b", "a"}))


class TaggedList(list[int]):
    pass


def test_builtin_subclasses_keep_class_and_state() -> None:
    tagged = TaggedList([1, 2])
    distinct([tagged, [1, 2]])
    tagged.label = "x"  # type: ignore[attr-defined]
    other = TaggedList([1, 2])
    other.label = "y"  # type: ignore[attr-defined]
    assert fingerprint(tagged) != fingerprint(other)
    other.label = "x"  # type: ignore[attr-defined]
    assert fingerprint(tagged) == fingerprint(other)


# ---- cycles ------------------------------------------------------------------------------


class Node:
    def __init__(self, value: int) -> None:
        self.value = value
        self.next: Node | None = None


def test_cycles_terminate_and_are_structural() -> None:
    a: list[Any] = [1]
    a.append(a)
    b: list[Any] = [1]
    b.append(b)
    c: list[Any] = [2]
    c.append(c)
    assert fingerprint(a) == fingerprint(b)
    assert fingerprint(a) != fingerprint(c)
    d: dict[str, Any] = {}
    d["self"] = d
    d["nested"] = [d, {"again": d}]
    assert len(fingerprint(d)) == 16
    n1, n2 = Node(1), Node(2)
    n1.next, n2.next = n2, n1
    m1, m2 = Node(1), Node(2)
    m1.next, m2.next = m2, m1
    assert fingerprint(n1) == fingerprint(m1)
    assert fingerprint(n1) != fingerprint(n2)
    m2.value = 3
    assert fingerprint(n1) != fingerprint(m1)


def test_cycle_digests_do_not_depend_on_what_was_digested_before() -> None:
    a: list[Any] = [1]
    b: list[Any] = [2, a]
    a.append(b)
    holder = [a, b]
    fresh_a, fresh_b = fingerprint(a), fingerprint(b)
    fp = Fingerprinter()
    fp.digest(holder)
    assert (fp.digest(a), fp.digest(b)) == (fresh_a, fresh_b)
    fp = Fingerprinter()
    assert (fp.digest(b), fp.digest(a)) == (fresh_b, fresh_a)


@pytest.mark.parametrize("seed", range(20))
def test_cyclic_graphs_digest_independently_of_order(seed: int) -> None:
    import random

    rnd = random.Random(seed)
    nodes: list[list[Any]] = [[i % 3] for i in range(rnd.randint(2, 9))]
    for node in nodes:
        for _ in range(rnd.randint(0, 3)):
            node.append(rnd.choice(nodes))
    objects = [{"node": node} if rnd.random() < 0.3 else node for node in nodes]
    fresh = [fingerprint(o) for o in objects]
    twin = copy.deepcopy(objects)  # the same graph, built from new objects
    assert [fingerprint(o) for o in twin] == fresh
    shared = Fingerprinter()
    order = list(range(len(objects)))
    rnd.shuffle(order)
    assert {i: shared.digest(objects[i]) for i in order} == dict(enumerate(fresh))
    shared.digest(objects)
    assert [shared.digest(o) for o in reversed(twin)] == fresh[::-1]
    # within one call too: a dict's digest does not depend on its insertion order, so the
    # nodes' digests must not depend on which of them was reached first
    by_index = {i: objects[i] for i in range(len(objects))}
    expected = fingerprint(by_index)
    for _ in range(5):
        rnd.shuffle(order)
        assert fingerprint({i: objects[i] for i in order}) == expected
        assert fingerprint({i: twin[i] for i in order}) == expected


def test_shared_substructures_are_not_exponential() -> None:
    def tower(leaf: list[Any]) -> list[Any]:
        x = leaf
        for _ in range(200):  # 2**200 paths to the leaf, 200 distinct lists
            x = [x, x]
        return x

    assert fingerprint(tower([])) == fingerprint(tower([]))
    assert fingerprint(tower([])) != fingerprint(tower([0]))


def test_deep_nesting() -> None:
    limit = sys.getrecursionlimit()
    x: list[Any] = []
    for _ in range(100_000):
        x = [x]
    with pytest.raises(Unfingerprintable, match=r"list.*nested too deeply"):
        fingerprint(x)
    assert sys.getrecursionlimit() == limit
    if sys.version_info < (3, 11):
        return  # the recursion limit is only raised where deep Python recursion is safe
    deep: list[Any] = []
    for _ in range(2_000):
        deep = [deep]
    assert len(fingerprint(deep)) == 16
    nodes = [Node(i) for i in range(1_000)]
    for a, b in itertools.pairwise(nodes):
        a.next = b
    assert len(fingerprint(nodes[0])) == 16


# ---- functions ---------------------------------------------------------------------------

BASE = """
import numpy as np
from functools import reduce

SCALE = 2

def helper(x):
    return x + 1

def f(x, y=3, *, z=4):
    \"\"\"Doc.\"\"\"
    total = np.sum([helper(x), y, z]) * SCALE
    return [i for i in range(total)] if x in {"a", "b"} else total
"""

REFORMATTED = """
import numpy as np
from functools import reduce

SCALE = 2

def helper(x):
    # a comment
    return x+1



def f(x,   y = 3, *, z = 4):
    \"\"\"Doc.\"\"\"
    # the total
    total = (np.sum([helper(x),
                     y, z])
             * SCALE)
    return ([i for i in range(total)]
            if x in {"b", "a"}
            else total)
"""


def test_function_formatting_and_comments_do_not_matter() -> None:
    assert fingerprint(main_namespace(BASE)["f"]) == fingerprint(main_namespace(REFORMATTED)["f"])


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("return x + 1", "return x + 2"),  # the called helper (transitive)
        ("y=3, *, z=4", "y=5, *, z=4"),  # a default
        ("y=3, *, z=4", "y=3, *, z=5"),  # a keyword-only default
        ("SCALE = 2", "SCALE = 3"),  # a global it reads
        ('"""Doc."""', '"""Other doc."""'),  # the docstring is a constant
        ("* SCALE", "* SCALE * 1"),  # the body
        ("import numpy as np", "import numpy as np\nnp = None"),  # a global module
    ],
)
def test_function_changes_change_the_fingerprint(old: str, new: str) -> None:
    assert old in BASE
    changed = BASE.replace(old, new)
    assert fingerprint(main_namespace(BASE)["f"]) != fingerprint(main_namespace(changed)["f"])


def test_function_ignores_unrelated_globals_and_attribute_names() -> None:
    ns = main_namespace(
        """
        import threading
        def get(obj):
            return obj.data + obj.lock
        """
    )
    before = fingerprint(ns["get"])
    # same names as the attributes it reads, but never read as globals: no effect
    ns["data"] = np.arange(10)
    ns["lock"] = threading.Lock()
    ns["unrelated"] = 1
    assert fingerprint(ns["get"]) == before


def test_function_reading_global_data() -> None:
    ns = main_namespace("table = {'a': [1, 2]}\ndef lookup(k):\n    return table[k]\n")
    before = fingerprint(ns["lookup"])
    ns["table"]["a"].append(3)
    assert fingerprint(ns["lookup"]) != before
    ns["table"] = {"a": [1, 2]}
    assert fingerprint(ns["lookup"]) == before


def test_closures_lambdas_and_nested_code() -> None:
    src = """
    def make(k):
        def add(x):
            return x + k
        return add
    inc = make(1)
    inc_again = make(1)
    dec = make(-1)
    square = lambda x: x * x
    cube = lambda x: x * x * x
    """
    ns = main_namespace(src)
    assert fingerprint(ns["inc"]) == fingerprint(ns["inc_again"])
    assert fingerprint(ns["inc"]) != fingerprint(ns["dec"])
    assert fingerprint(ns["square"]) != fingerprint(ns["cube"])
    nested = main_namespace(src.replace("x + k", "x - k"))
    assert fingerprint(ns["make"]) != fingerprint(nested["make"])


def test_recursion_terminates_and_is_order_independent() -> None:
    ns = main_namespace(
        """
        def is_even(n):
            return True if n == 0 else is_odd(n - 1)
        def is_odd(n):
            return False if n == 0 else is_even(n - 1)
        def fact(n):
            return 1 if n <= 1 else n * fact(n - 1)
        """
    )
    even, odd = fingerprint(ns["is_even"]), fingerprint(ns["is_odd"])
    assert even != odd
    fp = Fingerprinter()
    assert (fp.digest(ns["is_odd"]), fp.digest(ns["is_even"])) == (odd, even)
    fp = Fingerprinter()
    assert (fp.digest(ns["is_even"]), fp.digest(ns["is_odd"])) == (even, odd)
    assert fingerprint(ns["fact"]) == fingerprint(
        main_namespace("def fact(n):\n    return 1 if n <= 1 else n * fact(n - 1)\n")["fact"]
    )
    changed = main_namespace("def fact(n):\n    return 1 if n <= 1 else n * fact(n - 2)\n")["fact"]
    assert fingerprint(ns["fact"]) != fingerprint(changed)
    mutual = BASE.replace("return x + 1", "return f(x) if x > 100 else x + 1")
    assert len(fingerprint(main_namespace(mutual)["f"])) == 16


def test_assigning_a_global_is_not_reading_it() -> None:
    ns = main_namespace("def publish(v):\n    global result\n    result = v\n")
    before = fingerprint(ns["publish"])
    ns["publish"](5)
    assert ns["result"] == 5
    assert fingerprint(ns["publish"]) == before


LIBRARY = """
__version__ = "1.0"

def make(k):
    def add(x):
        return x + k
    return add

def plain(x):
    return x * 2

def make_class(value):
    class Made:
        attr = value
    return Made
"""


def library_module(monkeypatch: pytest.MonkeyPatch, src: str = LIBRARY) -> types.ModuleType:
    module = types.ModuleType("fake_library_for_fingerprint")
    exec(compile(src, "<fake>", "exec", dont_inherit=True), module.__dict__)
    monkeypatch.setitem(sys.modules, module.__name__, module)
    return module


def test_library_code_is_identified_by_name_unless_made_at_run_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    lib = library_module(monkeypatch)
    plain = fingerprint(lib.plain)
    make_one = fingerprint(lib.make(1))
    made_one = fingerprint(lib.make_class(1))
    assert make_one == fingerprint(lib.make(1))
    assert make_one != fingerprint(lib.make(2))
    assert made_one == fingerprint(lib.make_class(1))
    assert made_one != fingerprint(lib.make_class(2))
    # importable library code is identified by name and version, never by its code
    edited = library_module(monkeypatch, LIBRARY.replace("x * 2", "x * 3"))
    assert fingerprint(edited.plain) == plain
    edited.__version__ = "1.1"  # type: ignore[attr-defined]
    assert fingerprint(edited.plain) != plain


def test_library_functions_by_name_and_version() -> None:
    assert fingerprint(np.sum) == fingerprint(np.sum)
    distinct([np.sum, np.mean, json.dumps, json.loads, len, abs, math.sqrt, np.add])
    bound = [1, 2].append
    assert fingerprint(bound) != fingerprint([1, 3].append)
    assert fingerprint(bound) == fingerprint([1, 2].append)


def test_module_level_aliases_of_hidden_singletons_ignore_their_state() -> None:
    import random

    before = (fingerprint(random.randint), fingerprint(random.random), fingerprint(np.random.rand))
    random.random()
    np.random.rand()
    after = (fingerprint(random.randint), fingerprint(random.random), fingerprint(np.random.rand))
    assert before == after
    rng = random.Random(1)
    method = fingerprint(rng.random)
    rng.random()
    assert fingerprint(rng.random) != method


def test_methods_and_partials() -> None:
    ns = main_namespace(
        """
        class Counter:
            def __init__(self, start):
                self.start = start
            def next(self):
                return self.start + 1
        """
    )
    one, two = ns["Counter"](1), ns["Counter"](2)
    assert fingerprint(one.next) == fingerprint(ns["Counter"](1).next)
    assert fingerprint(one.next) != fingerprint(two.next)
    p = functools.partial(max, 1, key=abs)
    assert fingerprint(p) == fingerprint(functools.partial(max, 1, key=abs))
    distinct([p, functools.partial(max, 2, key=abs), functools.partial(min, 1, key=abs), max])


# ---- classes and instances ---------------------------------------------------------------

CLASSES = """
import dataclasses, enum

class Color(enum.Enum):
    RED = 1
    BLUE = 2

@dataclasses.dataclass
class Model:
    weights: list
    name: str = "m"

    def predict(self, x):
        return sum(w * x for w in self.weights)

    @property
    def size(self):
        return len(self.weights)

    @classmethod
    def empty(cls):
        return cls([])

    def clone(self):
        return Model(list(self.weights), self.name)

class Slotted:
    __slots__ = ("a", "b")

    def __init__(self, a, b):
        self.a = a
        self.b = b
"""


def test_main_classes_by_content() -> None:
    ns1, ns2 = main_namespace(CLASSES), main_namespace(CLASSES)
    for name in ("Model", "Color", "Slotted"):
        assert fingerprint(ns1[name]) == fingerprint(ns2[name])
    ns3 = main_namespace(CLASSES.replace("w * x", "w + x"))
    assert fingerprint(ns1["Model"]) != fingerprint(ns3["Model"])
    assert fingerprint(ns1["Model"]([1.0])) != fingerprint(ns3["Model"]([1.0]))
    ns4 = main_namespace(CLASSES.replace("BLUE = 2", "BLUE = 3"))
    assert fingerprint(ns1["Color"].RED) != fingerprint(ns4["Color"].RED)


def test_class_and_method_cycle_is_order_independent() -> None:
    # Model.clone reads the global Model: the class and its method form a cycle
    ns = main_namespace(CLASSES)
    model = ns["Model"]
    fresh = fingerprint(model), fingerprint(model([1])), fingerprint(model.clone)
    for order in ([0, 1, 2], [2, 1, 0], [1, 2, 0]):
        fp = Fingerprinter()
        values = (model, model([1]), model.clone)
        assert {i: fp.digest(values[i]) for i in order} == dict(enumerate(fresh))


def test_main_instances_by_state() -> None:
    ns = main_namespace(CLASSES)
    model, slotted = ns["Model"], ns["Slotted"]
    assert fingerprint(model([1, 2])) == fingerprint(model([1, 2]))
    distinct([model([1, 2]), model([2, 1]), model([1, 2], "n"), slotted(1, 2), slotted(2, 1)])
    assert fingerprint(slotted({"x", "y"}, None)) == fingerprint(slotted({"y", "x"}, None))
    assert fingerprint(ns["Color"].RED) != fingerprint(ns["Color"].BLUE)


def test_flag_combinations_do_not_change_the_class() -> None:
    ns = main_namespace("import enum\nclass Perm(enum.Flag):\n    R = 1\n    W = 2\n")
    perm = ns["Perm"]
    before = fingerprint(perm), fingerprint(perm.R)
    both = perm.R | perm.W
    assert fingerprint(both) != fingerprint(perm.R)
    assert (fingerprint(perm), fingerprint(perm.R)) == before


def test_class_digest_stable_after_pickling_caches() -> None:
    import pickle

    ns = main_namespace(CLASSES)
    before = fingerprint(ns["Slotted"])
    copyreg_cache = ns["Slotted"](1, 2).__reduce_ex__(2)  # fills Slotted.__slotnames__
    assert copyreg_cache
    assert "__slotnames__" in ns["Slotted"].__dict__
    assert fingerprint(ns["Slotted"]) == before
    assert pickle.dumps(1)


# ---- modules -----------------------------------------------------------------------------


def test_modules_by_name_and_version(monkeypatch: pytest.MonkeyPatch) -> None:
    assert fingerprint(np) == fingerprint(sys.modules["numpy"])
    distinct([np, pd, json, np.linalg])
    fake = types.ModuleType("fake_pkg_for_fingerprint")
    fake.__version__ = "1.0"  # type: ignore[attr-defined]
    fake.payload = [1]  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "fake_pkg_for_fingerprint", fake)
    v1 = fingerprint(fake)
    fake.payload.append(2)  # type: ignore[attr-defined]
    assert fingerprint(fake) == v1  # contents never matter
    fake.__version__ = "2.0"  # type: ignore[attr-defined]
    assert fingerprint(fake) != v1


# ---- numpy -------------------------------------------------------------------------------

DTYPES = [
    "bool",
    "int8",
    "uint8",
    "int16",
    "int32",
    "int64",
    "uint64",
    "float16",
    "float32",
    "float64",
    ">f8",
    "complex64",
    "complex128",
    "datetime64[s]",
    "datetime64[ns]",
    "timedelta64[ms]",
    "S3",
    "U3",
    "V8",
    [("a", "<i4"), ("b", "<f8")],
    [("a", "<i4"), ("c", "<f8")],
    np.dtype([("a", "<i4"), ("b", "<f8")], align=True),
    [("a", "<i4", (2,))],
]


def test_every_dtype_is_distinct_and_stable() -> None:
    arrays = [np.zeros(3, dtype=dt) for dt in DTYPES]
    distinct(arrays)
    for arr in arrays:
        assert fingerprint(arr) == fingerprint(arr.copy())
        assert fingerprint(arr) == fingerprint(np.array(arr, copy=True, order="F"))


def test_dtype_values_matter() -> None:
    for dt in DTYPES:
        base = np.zeros(4, dtype=dt)
        changed = base.copy()
        changed.view(np.uint8)[-1] ^= 1
        assert fingerprint(base) != fingerprint(changed), dt


def test_array_shape_order_and_views() -> None:
    a = np.arange(24, dtype=np.float64).reshape(4, 6)
    distinct([a, a.reshape(6, 4), a.reshape(-1), a.reshape(2, 3, 4), np.asfortranarray(a), a.T])
    # strided views hash their values in logical C order, like their contiguous copies
    for view in (a[::2], a[:, ::2], a[1:3, 2:5], a[::-1], a.reshape(2, 3, 4).transpose(1, 0, 2)):
        assert not view.flags.c_contiguous
        assert fingerprint(view) == fingerprint(np.ascontiguousarray(view))
    # an F-contiguous array is tagged F: same values, different layout, different key
    f = np.asfortranarray(a)
    assert fingerprint(f) != fingerprint(a)
    assert fingerprint(f) == fingerprint(np.asfortranarray(a.copy()))
    assert fingerprint(a.T) == fingerprint(np.asfortranarray(a.T))


def test_zero_size_and_zero_dim_arrays() -> None:
    distinct(
        [
            np.zeros((0,)),
            np.zeros((0, 3)),
            np.zeros((3, 0)),
            np.zeros((0,), dtype=np.int64),
            np.array(1.0),
            np.array(2.0),
            np.array([1.0]),
        ]
    )
    assert fingerprint(np.array(1.0)) == fingerprint(np.array(1.0))


@pytest.mark.skipif(not hasattr(np.dtypes, "StringDType"), reason="numpy < 2")
def test_variable_width_string_arrays_hash_their_strings_not_pointers() -> None:
    string_dtype = np.dtypes.StringDType()
    a = np.array(["a", "bb", "ccc"], dtype=string_dtype)
    assert fingerprint(a) == fingerprint(np.array(["a", "bb", "ccc"], dtype=string_dtype))
    distinct([a, a.astype("U3"), np.array(["a", "bb", "ccd"], dtype=string_dtype)])


def test_object_arrays_recurse() -> None:
    a = np.array([{"b": 2, "a": 1}, [1, 2], None], dtype=object)
    b = np.array([{"a": 1, "b": 2}, [1, 2], None], dtype=object)
    assert fingerprint(a) == fingerprint(b)
    b[1] = [1, 3]
    assert fingerprint(a) != fingerprint(b)
    c = np.empty(1, dtype=object)
    c[0] = c
    assert len(fingerprint(c)) == 16
    rec = np.array([(1, "x")], dtype=[("n", "i4"), ("o", "O")])
    assert fingerprint(rec) == fingerprint(rec.copy())
    assert fingerprint(rec) != fingerprint(np.array([(1, "y")], dtype=rec.dtype))


def test_numpy_scalars() -> None:
    distinct(
        [
            np.float64(1),
            np.float32(1),
            np.int64(1),
            np.int32(1),
            np.bool_(True),
            np.str_("1"),
            np.bytes_(b"1"),
            np.datetime64("2024-01-01"),
            np.datetime64("2024-01-02"),
            1.0,
            "1",
        ]
    )
    assert fingerprint(np.float64(2.5)) == fingerprint(np.float64(2.5))
    void = np.zeros(1, dtype=[("a", "i4")])[0]
    assert fingerprint(void) == fingerprint(np.zeros(1, dtype=[("a", "i4")])[0])


class UnitArray(np.ndarray):
    unit = ""


def test_array_subclasses(tmp_path: Path) -> None:
    data = np.arange(4.0)
    m1 = np.ma.masked_array(data, mask=[0, 1, 0, 0])
    m2 = np.ma.masked_array(data, mask=[0, 0, 1, 0])
    metres, seconds = data.view(UnitArray), data.view(UnitArray)
    metres.unit, seconds.unit = "m", "s"
    distinct([data, m1, m2, metres, seconds, np.ma.masked])
    assert fingerprint(m1) == fingerprint(np.ma.masked_array(data.copy(), mask=[0, 1, 0, 0]))
    again = data.copy().view(UnitArray)
    again.unit = "m"
    assert fingerprint(metres) == fingerprint(again)
    mapped = np.memmap(tmp_path / "mapped.dat", mode="w+", dtype=data.dtype, shape=data.shape)
    mapped[:] = data
    assert fingerprint(mapped) == fingerprint(data)  # a memory map is just its values


def test_random_generators_by_state() -> None:
    g1, g2 = np.random.default_rng(42), np.random.default_rng(42)
    assert fingerprint(g1) == fingerprint(g2)
    g1.random()
    assert fingerprint(g1) != fingerprint(g2)
    g2.random()
    assert fingerprint(g1) == fingerprint(g2)
    assert fingerprint(np.random.default_rng(1)) != fingerprint(np.random.default_rng(2))
    r1, r2 = np.random.RandomState(3), np.random.RandomState(3)
    assert fingerprint(r1) == fingerprint(r2)
    r1.rand()
    assert fingerprint(r1) != fingerprint(r2)
    assert fingerprint(np.random.PCG64(5)) == fingerprint(np.random.PCG64(5))
    assert fingerprint(np.random.PCG64(5)) != fingerprint(np.random.MT19937(5))


def test_numpys_global_random_state_is_keyed_by_reference() -> None:
    # A scipy distribution holds numpy's global RandomState, which the seeding of every cell
    # moves: keyed by its state, the distribution would count as changed by each cell that
    # reads it (and be stored again with all that shares with it).
    stats = pytest.importorskip("scipy.stats")
    frozen = stats.gamma(2.0, scale=1.5)
    assert frozen.dist._random_state is np.random.mtrand._rand
    state = np.random.get_state()
    try:
        before = fingerprint(frozen)
        np.random.seed(7)
        np.random.rand()
        assert fingerprint(frozen) == before
    finally:
        np.random.set_state(state)
    own = stats.gamma(2.0, scale=1.5)
    own.random_state = np.random.RandomState(3)
    before = fingerprint(own)
    own.rvs()
    assert fingerprint(own) != before  # a RandomState of its own is still keyed by state


@pytest.mark.slow
def test_large_contiguous_array_is_hashed_without_a_copy() -> None:
    arr = np.zeros(64 * 2**20, dtype=np.float64)  # 512 MB
    arr[-1] = 1.0
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        digest = fingerprint(arr)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 64 * 2**20, f"peak {peak / 2**20:.1f} MB"
    arr[-1] = 2.0
    assert fingerprint(arr) != digest
    f_order = arr.reshape(2**13, 2**13, order="F")
    assert f_order.flags.f_contiguous and not f_order.flags.c_contiguous
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        fingerprint(f_order)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 64 * 2**20, f"peak {peak / 2**20:.1f} MB"


@pytest.mark.slow
def test_large_strided_view_uses_bounded_memory() -> None:
    base = np.zeros((2, 2**26), dtype=np.float64)  # 1 GB
    base[1, -2] = 1.0
    view = base[:, ::2]  # 512 MB of values, not contiguous
    small = np.ascontiguousarray(base[:, -64::2])
    assert not view.flags.c_contiguous and view.nbytes == 512 * 2**20
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        digest = fingerprint(view)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 64 * 2**20, f"peak {peak / 2**20:.1f} MB"
    base[1, -2] = 2.0
    assert fingerprint(view) != digest
    assert fingerprint(base[:, -64::2]) == fingerprint(np.ascontiguousarray(base[:, -64::2]))
    assert fingerprint(small) != fingerprint(base[:, -64::2])


# ---- pandas ------------------------------------------------------------------------------


def frame() -> pd.DataFrame:
    return pd.DataFrame(
        {
            "x": [1.0, 2.0, 3.0],
            "n": [1, 2, 3],
            "s": ["a", "b", None],
            "o": [{"k": 1}, [1], "t"],
            "c": pd.Categorical(["u", "v", "u"]),
            "i": pd.array([1, None, 3], dtype="Int64"),
            "t": pd.date_range("2024-01-01", periods=3, tz="UTC"),
        },
        index=pd.Index([10, 20, 30], name="id"),
    )


def test_dataframe_equal_frames_agree() -> None:
    assert fingerprint(frame()) == fingerprint(frame())
    assert fingerprint(frame()) == fingerprint(frame().copy(deep=True))


def test_dataframe_changes() -> None:
    base = fingerprint(frame())
    variants = []
    for col, value in [("x", 2.5), ("n", 7), ("s", "z"), ("o", "u"), ("c", "u"), ("i", 5)]:
        df = frame()
        df.loc[20, col] = value
        variants.append(df)
    df = frame()
    df.loc[30, "t"] = pd.Timestamp("2030-01-01", tz="UTC")
    variants.append(df)
    variants.append(frame()[["n", "x", "s", "o", "c", "i", "t"]])  # column order
    variants.append(frame().rename(columns={"x": "y"}))
    variants.append(frame().rename(index={30: 31}))  # index values
    variants.append(frame().rename_axis("key"))  # index name
    variants.append(frame().astype({"n": "float64"}))  # dtype
    digests = [fingerprint(v) for v in variants]
    assert base not in digests
    assert len(set(digests)) == len(digests)


def test_dataframe_missing_values_are_not_strings() -> None:
    distinct(
        [
            pd.DataFrame({"s": pd.Series(["a", None], dtype=object)}),
            pd.DataFrame({"s": pd.Series(["a", "None"], dtype=object)}),
            pd.DataFrame({"s": pd.Series(["a", math.nan], dtype=object)}),
            pd.DataFrame({"s": pd.Series(["a", "nan"], dtype=object)}),
            pd.DataFrame({"s": pd.Series(["a", 1], dtype=object)}),
            pd.DataFrame({"s": pd.Series(["a", "1"], dtype=object)}),
        ]
    )


def test_string_columns_are_hashed_by_content_without_ambiguity() -> None:
    # The fast path joins strings with NUL: strings holding NUL must not collide.
    distinct(
        [
            pd.Series(["a\0b", "c"], dtype=object),
            pd.Series(["a", "b\0c"], dtype=object),
            pd.Series(["a", "b", "c"], dtype=object),
            pd.Series(["a\0b\0c"], dtype=object),
            pd.Series(["", ""], dtype=object),
            pd.Series([""], dtype=object),
            pd.Series([], dtype=object),
            pd.Series(["a", None, "b"], dtype=object),
            pd.Series(["a", pd.NA, "b"], dtype=object),
            pd.Series([None, "a", "b"], dtype=object),
            pd.Series(["a", None, None, "b"], dtype=object),
            pd.Series(["a", None, math.nan, "b"], dtype=object),
            pd.Series(["\ud800", "x"], dtype=object),  # a lone surrogate still hashes
        ]
    )
    big = pd.Series([f"label-{i % 997}" for i in range(200_000)], dtype="str")
    changed = big.copy()
    changed.iloc[123_456] = "label-x"
    with_na = big.copy()
    with_na.iloc[5] = None
    distinct([big, changed, with_na])
    assert fingerprint(big) == fingerprint(big.copy())
    assert fingerprint(with_na) == fingerprint(with_na.copy())


def test_string_columns_hash_the_same_however_they_are_cut(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # the constant lives where pandas values are hashed since the module became a package
    from ipy_resume.fingerprint import pandas_rules as fpmod

    labels = pd.Series([f"doc {i} " * (i % 5) for i in range(50)], dtype=object)
    whole = fingerprint(labels)
    monkeypatch.setattr(fpmod, "_JOIN_CHUNK", 7)
    assert fingerprint(labels) == whole
    # a NUL inside a string is still caught when it sits in a later piece
    with_nul = labels.copy()
    with_nul.iloc[45] = "a\0b"
    split = labels.copy()
    split.iloc[45] = "a"
    assert fingerprint(with_nul) != fingerprint(split)
    monkeypatch.setattr(fpmod, "_JOIN_CHUNK", 10**9)
    assert fingerprint(labels) == whole


def test_dataframe_layout_does_not_matter() -> None:
    values = np.arange(12.0).reshape(4, 3)
    from_array = pd.DataFrame(values, columns=["a", "b", "c"])
    from_dict = pd.DataFrame({"a": values[:, 0], "b": values[:, 1], "c": values[:, 2]})
    assert fingerprint(from_array) == fingerprint(from_dict)


def test_dataframe_columns_read_from_blocks_digest_as_through_iloc(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Columns are read as their blocks store them; pandas without that method takes each
    # column through ``iloc``: both must give the same digest for every kind of column.
    wide = pd.DataFrame(np.asfortranarray(np.arange(24.0).reshape(6, 4)), columns=list("abcd"))
    mixed = frame()
    mixed["f32"] = np.float32(1.5)
    mixed["b"] = [True, False, True]
    mixed["naive"] = pd.to_datetime(["2024-01-01", None, "2024-01-03"])
    mixed["td"] = pd.to_timedelta([1, 2, 3], unit="s")
    mixed["arrow"] = pd.Series(["p", None, "q"], dtype="str", index=mixed.index)
    frames = [frame(), wide, wide.iloc[1:5, ::2], mixed, mixed.T, pd.DataFrame()]
    duplicated = frame()
    duplicated.columns = ["x"] * duplicated.shape[1]
    frames.append(duplicated)
    fast = [fingerprint(df) for df in frames]
    monkeypatch.delattr(pd.DataFrame, "_get_column_array")
    assert [fingerprint(df) for df in frames] == fast
    assert len(set(fast)) == len(fast)


def test_numeric_columns_are_hashed_as_buffers(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []

    def counting(value: Any) -> bytes:
        calls.append(value)
        return b"x" * 16

    fingerprint(np.float64(1))  # the rule for numpy scalars is now cached
    for scalar in (np.float64, np.int64):
        monkeypatch.setitem(fpcore.RESOLVED_ATOMIC, scalar, counting)
    df = pd.DataFrame({"x": np.arange(100_000.0), "n": np.arange(100_000)})
    fingerprint(df)
    fingerprint(df["x"])
    fingerprint(df.set_index("n").index)
    assert calls == []


def test_series_index_and_multiindex() -> None:
    s = pd.Series([1, 2], index=["a", "b"], name="s")
    distinct(
        [
            s,
            s.rename("t"),
            pd.Series([1, 2], index=["a", "c"], name="s"),
            pd.Series([1, 3], index=["a", "b"], name="s"),
            s.index,
            pd.Index(["a", "b"], name="k"),
        ]
    )
    assert fingerprint(s) == fingerprint(pd.Series([1, 2], index=["a", "b"], name="s"))
    mi = pd.MultiIndex.from_tuples([(1, "a"), (2, "b")], names=["n", "l"])
    assert fingerprint(mi) == fingerprint(
        pd.MultiIndex.from_tuples([(1, "a"), (2, "b")], names=["n", "l"])
    )
    distinct([mi, mi.set_names(["n", "m"]), pd.MultiIndex.from_tuples([(1, "a"), (2, "c")])])
    assert fingerprint(pd.RangeIndex(3)) != fingerprint(pd.RangeIndex(4))


def test_pandas_scalars() -> None:
    distinct([pd.Timestamp("2024-01-01"), pd.Timestamp("2024-01-02"), pd.NaT, pd.NA])
    assert fingerprint(pd.Timestamp("2024-01-01")) == fingerprint(pd.Timestamp("2024-01-01"))


# ---- unfingerprintable values ------------------------------------------------------------


class Unpicklable:
    def __reduce_ex__(self, protocol: Any) -> Any:
        raise RuntimeError("no pickling\nsecond line")


class Hostile:
    """Every attribute access fails, including the ones pickle makes."""

    def __getattribute__(self, name: str) -> Any:
        raise KeyError(name)


def test_unfingerprintable_values(tmp_path: Path) -> None:
    with open(tmp_path / "f.txt", "w") as handle:
        cases = [
            ((x for x in range(3)), "generator"),
            (threading.Lock(), "lock"),
            (handle, "TextIOWrapper"),
            (Unpicklable(), "Unpicklable"),
            ([1, {"k": (y for y in ())}], "generator"),
            (sys._getframe(), "frame"),
        ]
        for value, name in cases:
            with pytest.raises(Unfingerprintable) as info:
                fingerprint(value)
            assert name in str(info.value)
            assert name in info.value.type_name
            assert "\n" not in str(info.value)
            assert str(info.value).startswith("cannot fingerprint a value of type ")


def test_strange_objects_only_raise_unfingerprintable() -> None:
    for value in (Hostile(), types.SimpleNamespace(gen=(i for i in ()))):
        with pytest.raises(Unfingerprintable):
            fingerprint(value)


def test_function_reading_unfingerprintable_global() -> None:
    ns = main_namespace("def f():\n    return next(gen)\n")
    ns["gen"] = (i for i in range(3))
    with pytest.raises(Unfingerprintable, match="generator"):
        fingerprint(ns["f"])


# ---- registry ----------------------------------------------------------------------------


class Celsius:
    def __init__(self, degrees: float, note: str = "") -> None:
        self.degrees = degrees
        self.note = note


class Kelvin(Celsius):
    pass


class Broken:
    pass


def test_register_custom_types() -> None:
    calls = []

    def by_degrees(fp: Fingerprinter, value: Any) -> list[bytes]:
        calls.append(value)
        return [fp.digest(round(value.degrees, 3))]

    register(Celsius, by_degrees)
    register(Broken, lambda fp, value: [1])  # type: ignore[list-item]
    try:
        assert fingerprint(Celsius(1.0, "a")) == fingerprint(Celsius(1.0001, "b"))
        assert fingerprint(Celsius(1.0)) != fingerprint(Celsius(2.0))
        # found along the MRO; the digest names the actual type
        assert fingerprint(Kelvin(1.0)) != fingerprint(Celsius(1.0))
        assert calls
        with pytest.raises(Unfingerprintable, match="Broken"):
            fingerprint(Broken())
        with pytest.raises(TypeError):
            register("not a type", by_degrees)  # type: ignore[arg-type]
    finally:
        fpcore._REGISTRY.pop(Celsius, None)
        fpcore._REGISTRY.pop(Broken, None)
        fpcore._clear_rule_caches()
    assert fingerprint(Celsius(1.0, "a")) != fingerprint(Celsius(1.0001, "b"))


# ---- across processes --------------------------------------------------------------------

CHILD = r"""
import abc
import dataclasses
import enum
import functools
import typing
import numpy as np
import pandas as pd
from ipy_resume.fingerprint import fingerprint_hex

WORDS = {f"word{i}" for i in range(50)}

@dataclasses.dataclass
class Config:
    name: str
    tags: set
    limits: dict

def helper(x):
    return x in {"alpha", "beta", "gamma"}

def cell(x):
    return helper(x) and x in WORDS

class Plain:
    def __init__(self):
        self.members = {"x", "y", "z"}
        self.lookup = {"b": 1, "a": 2}

class Shape(abc.ABC):
    @abc.abstractmethod
    def area(self): ...

class Square(Shape):
    def __init__(self, side):
        self.side = side
    def area(self):
        return self.side ** 2

class Color(enum.Enum):
    RED = "r"
    GREEN = "g"

class Point(typing.NamedTuple):
    x: int
    y: int = 0

class Sized(typing.Protocol):
    def size(self) -> int: ...

@functools.lru_cache(maxsize=None)
def cached(n):
    return n * 2

values = {
    "set": set(WORDS),
    "frozenset": frozenset(WORDS),
    "dict": {w: len(w) for w in sorted(WORDS)},
    "nested": [{"k": {("a", 1), ("b", 2)}}, (frozenset({"x", "y"}), {"z": [1.5, None]})],
    "frame": pd.DataFrame({"s": ["a", None, "c"], "o": pd.Series([{"q", "r"}, 1, "x"],
                                                                  dtype=object),
                           "f": [1.0, 2.0, 3.0]}),
    "array": np.array([{"m", "n"}, "x"], dtype=object),
    "config": Config("c", {"p", "q", "r"}, {"z": 1, "y": 2}),
    "plain": Plain(),
    "function": cell,
    "class": Config,
    "abc": [Square(2), Shape],
    "enum": [Color.RED, Color],
    "namedtuple": [Point(1), Point],
    "protocol": Sized,
    "lru_cache": cached,
}
for name, value in values.items():
    print(name, fingerprint_hex(value))
"""

IN_PROCESS = ("set", "frozenset", "dict", "nested", "frame", "array")


def child_digests(seed: str) -> dict[str, str]:
    out = python_output(CHILD, seed, REPO)
    return dict(line.split() for line in out.splitlines())


def test_equal_across_processes_and_hash_seeds() -> None:
    runs = [child_digests(seed) for seed in ("0", "1", "12345")]
    assert len(runs[0]) == 15
    assert runs[0] == runs[1] == runs[2]
    # the set really is iterated in a different order under each seed
    order = "print(list({f'word{i}' for i in range(50)})[:5])"
    orders = {
        subprocess.run(
            [sys.executable, "-c", order],
            env=dict(os.environ, PYTHONHASHSEED=seed),
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        for seed in ("0", "1", "12345")
    }
    assert len(orders) > 1
    # values that do not involve __main__ give the same digests in this process too
    ns: dict[str, Any] = {"__name__": "child_replay"}
    exec(compile(CHILD.split("for name, value")[0], "<child>", "exec", dont_inherit=True), ns)
    for name in IN_PROCESS:
        assert fingerprint_hex(ns["values"][name]) == runs[0][name], name


# ---- properties --------------------------------------------------------------------------

scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False)
    | st.text(max_size=8)
    | st.binary(max_size=8)
)
hashables = st.recursive(scalars, lambda inner: st.tuples(inner, inner), max_leaves=4)
values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.tuples(inner, inner)
        | st.dictionaries(st.text(max_size=4) | st.integers(), inner, max_size=4)
        | st.sets(hashables, max_size=4)
        | st.frozensets(hashables, max_size=4)
    ),
    max_leaves=12,
)


def canonical(v: Any) -> Any:
    """A hashable description of *v* that tells types (and -0.0 from 0.0) apart."""
    if isinstance(v, float):
        return ("float", struct.pack("<d", v))
    if isinstance(v, (list, tuple)):
        return (type(v).__name__, tuple(canonical(x) for x in v))
    if isinstance(v, dict):
        return ("dict", frozenset((canonical(k), canonical(x)) for k, x in v.items()))
    if isinstance(v, (set, frozenset)):
        return (type(v).__name__, frozenset(canonical(x) for x in v))
    return (type(v).__name__, v)


@settings(max_examples=300, deadline=None)
@given(values)
def test_property_deepcopy_gives_equal_digest(v: Any) -> None:
    assert fingerprint(v) == fingerprint(copy.deepcopy(v))


@settings(max_examples=300, deadline=None)
@given(values, values)
def test_property_different_values_give_different_digests(a: Any, b: Any) -> None:
    if canonical(a) == canonical(b):
        assert fingerprint(a) == fingerprint(b)
    else:
        assert fingerprint(a) != fingerprint(b)


def test_padding_bytes_of_structured_values_are_not_part_of_the_key() -> None:
    """Padding is whatever memory held; a copy or a store round trip may change it."""
    padded = np.dtype({"names": ["p", "q"], "formats": ["<u2", "<i8"], "offsets": [0, 8]})
    nested = np.dtype([("s", padded, (2,)), ("t", "<f4")], align=True)
    for dt in (padded, nested):
        value = np.zeros(4, dt)
        raw = np.full(value.nbytes, 0xAB, np.uint8)
        other = raw.view(dt)
        other[:] = value  # the same fields, other padding bytes
        assert value.tobytes() != other.tobytes()
        assert Fingerprinter().digest(value) == Fingerprinter().digest(other)
        assert Fingerprinter().digest(value[1]) == Fingerprinter().digest(other[1])
        changed = other.copy()
        changed.view(np.uint8)[: dt.itemsize] = 0x01  # fields of the first item change
        assert Fingerprinter().digest(changed) != Fingerprinter().digest(value)
    # the same bytes under a layout with other gaps is another value
    packed = np.dtype([("p", "<u2"), ("q", "<i8")])
    a = np.zeros(2, padded)
    b = np.zeros(2, packed)
    assert Fingerprinter().digest(a) != Fingerprinter().digest(b)


class _MyFloat(float):
    pass


@pytest.mark.parametrize(
    "items",
    [
        [float(i) * 0.5 for i in range(100)],
        [
            1.0,
            float("nan"),
            -float("nan"),
            struct.unpack("<d", b"\x01\x00\x00\x00\x00\x00\xf8\x7f")[0],
        ],
        [0.0, -0.0, float("inf"), -float("inf"), 5e-324, 1e308],
        [1.0, _MyFloat(1.0), 1, True, "1.0", None, [2.0, 3.0], (4.0,)],
        [],
    ],
)
def test_lists_and_tuples_of_floats_digest_as_their_items_do(items: list[Any]) -> None:
    # A sequence of floats only (exact type) digests as its packed doubles (one hash, every
    # NaN as one NaN); any other as its items' digests, the bytes the float rule gives.
    from ipy_resume.fingerprint.primitives import NAN_BYTES, atomic_float, hash128

    def by_rule(tag: bytes, value: Any) -> bytes:
        if value and all(type(x) is float for x in value):
            packed = b"".join(NAN_BYTES if x != x else struct.pack("<d", x) for x in value)
            return hash128(tag + b"f64\0" + packed)
        parts = [atomic_float(x) if type(x) is float else Fingerprinter().digest(x) for x in value]
        return hash128(tag + b"".join(parts))

    assert Fingerprinter().digest(items) == by_rule(b"list\0", items)
    assert Fingerprinter().digest(tuple(items)) == by_rule(b"tuple\0", items)


def test_list_and_tuple_digests_are_the_ones_recorded_before() -> None:
    # (a mixed list: the value computed by the release before the inlined float loop)
    mixed = [1.0, 2.5, float("nan"), -0.0, "a", 3]
    assert Fingerprinter().digest(mixed).hex() == "0a94a0fc8de7e3f8eafd88cd823eb869"
    # (its inner list of floats digests packed after 0.1.0, see docs/keys.md: before, this was
    # 82ba51bee0f78140c53664b1d2123c7f)
    nested = (0.5, [1.0], float("inf"))
    assert Fingerprinter().digest(nested).hex() == "613a366a7a52644539d8990cb3119fe5"


def test_packed_float_digests_keep_every_difference_that_matters() -> None:
    """Exactness of the packed form: each item's bits count (-0.0 is not 0.0, 1.0 is not 1
    nor True nor a float subclass), NaNs are one value whatever their payload (as a lone
    float's digest is), the order counts, and a list is not a tuple."""
    d = Fingerprinter().digest
    base = [float(i) * 0.5 for i in range(100)]
    assert d(base) == d(list(base)) == d([float(x) for x in base])
    changed = list(base)
    changed[57] = math.nextafter(changed[57], 1e9)  # one bit of one item
    assert d(changed) != d(base)
    assert d([0.0, 1.0]) != d([-0.0, 1.0])
    assert d([1.0, 2.0]) != d([1, 2.0]) != d([1, 2])
    assert d([1.0, 2.0]) != d([True, 2.0])
    assert d([1.0, 2.0]) != d([_MyFloat(1.0), 2.0])
    assert d([1.0, 2.0]) != d([2.0, 1.0])
    assert d([1.0, 2.0]) != d((1.0, 2.0))
    payload = struct.unpack("<d", b"\x01\x00\x00\x00\x00\x00\xf8\x7f")[0]
    nans = [[1.0, float("nan")], [1.0, -float("nan")], [1.0, payload], [1.0, math.inf - math.inf]]
    assert len({d(v) for v in nans}) == 1
    assert d([1.0, float("nan")]) != d([1.0, math.inf])
    assert d([math.inf, -math.inf]) != d([-math.inf, math.inf])  # (their sum is NaN)
    assert d([[1.0, 2.0], [3.0]]) != d([[1.0], [2.0, 3.0]])
    # the same digest in another process (the packing is little-endian on every machine)
    code = (
        "from ipy_resume.fingerprint import Fingerprinter;"
        "print(Fingerprinter().digest([float(i) * 0.5 for i in range(100)]).hex())"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == d(base).hex()


def test_a_top_level_list_of_floats_digests_as_the_traversal_does(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # the quick path of a key's input (no traversal) gives the traversal's bytes, aliases
    # included, and steps aside for a rule registered for float
    values = [[0.5 * i for i in range(50)], tuple([1.0, float("nan"), -0.0]), [1.0, 2]]
    quick = [Fingerprinter().digest(v) for v in values]
    with monkeypatch.context() as m:
        m.setattr(fpcore, "TOP_LEVEL_QUICK", {})
        assert [Fingerprinter().digest(v) for v in values] == quick
    fpcore.register_alias(quick[0], b"s" * 16)
    try:
        assert Fingerprinter().digest(values[0]) == b"s" * 16
    finally:
        fpcore.clear_aliases()
    register(float, lambda fp, v: [struct.pack("<d", round(v, 1))])
    try:
        assert Fingerprinter().digest([1.01, 2.0]) == Fingerprinter().digest([1.0, 2.0])
    finally:
        fpcore._REGISTRY.pop(float, None)
        fpcore._clear_rule_caches()
    assert Fingerprinter().digest([1.01, 2.0]) != Fingerprinter().digest([1.0, 2.0])


def _packed_strs_reference(tag: bytes, items: list[str]) -> bytes:
    """The packed form of a list of strs as docs/keys.md describes it, written plainly."""
    import xxhash

    encoded = [s.encode("utf-8", "surrogatepass") for s in items]
    body = b"str\0" + struct.pack("<Q", len(items))
    for start in range(0, len(items), 1024):
        run = b"".join(encoded[start : start + 1024])
        body += struct.pack("<Q", len(run)) + run
    body += b"".join(struct.pack("<Q", len(e)) for e in encoded)
    pad = (7 - len(body)) % 16
    return xxhash.xxh3_128_digest(tag + body + bytes(pad) + bytes([pad]))


class _MyStr(str):
    pass


def test_lists_of_ints_or_strs_digest_packed_as_documented() -> None:
    from ipy_resume.fingerprint.primitives import hash128

    d = Fingerprinter().digest
    ints = [-(1 << 63), -1, 0, 7, (1 << 63) - 1]
    assert d(ints) == hash128(b"list\0i64\0" + struct.pack("<5q", *ints))
    assert d(tuple(ints)) == hash128(b"tuple\0i64\0" + struct.pack("<5q", *ints))
    # strs: ASCII runs and runs with other characters (a lone surrogate too), over several
    # runs of 1,024, give the bytes of the plain encoding
    words = [f"w{i}" for i in range(2500)]
    words[1500] = "naïve \udcff ✓"
    assert d(words) == _packed_strs_reference(b"list\0", words)
    assert d(tuple(words[:9])) == _packed_strs_reference(b"tuple\0", words[:9])
    # another process, another hash seed: the same digest
    code = (
        "from ipy_resume.fingerprint import Fingerprinter;"
        "print(Fingerprinter().digest([f'w{i}' for i in range(2500)]).hex(),"
        " Fingerprinter().digest({f'k{i}': i for i in range(50)}).hex())"
    )
    env = dict(os.environ, PYTHONHASHSEED="12345")
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env
    )
    plain = [f"w{i}" for i in range(2500)]
    assert out.stdout.split() == [d(plain).hex(), d({f"k{i}": i for i in range(50)}).hex()]


def test_packed_int_and_str_digests_keep_every_difference_that_matters() -> None:
    d = Fingerprinter().digest
    assert d([1, 2]) != d([2, 1]) != d([1, 2, 0])
    assert d([1, 2]) != d([True, 2]) != d([1.0, 2.0])
    assert d([1, 2]) != d((1, 2))
    # past 64 bits: item by item, still apart from its neighbours
    from ipy_resume.fingerprint.primitives import atomic_int, hash128

    big = [1 << 64, 1]
    assert d(big) == hash128(b"list\0" + atomic_int(1 << 64) + atomic_int(1))
    assert d(big) != d([(1 << 64) + 1, 1])
    eight = ["a"] * 6
    assert d([*eight, "ab", "c"]) != d([*eight, "a", "bc"])
    assert d([*eight, "x", "y"]) != d([*eight, "y", "x"])
    assert d([*eight, "x", "y"]) != d([*eight, "x", _MyStr("y")])
    assert d([*eight, "x", "y"]) != d([*eight, "x", b"y"])
    assert d([*eight, "x", ""]) != d([*eight, "x"])
    # the nested form: runs of strs inside lists keep their bounds
    assert d([["a"] * 8, ["b"] * 9]) != d([["a"] * 9, ["b"] * 8])


def test_packed_dicts_ignore_insertion_order_and_keep_their_values_apart() -> None:
    d = Fingerprinter().digest
    vocabulary = {f"word{i}": i for i in range(300)}
    reversed_order = dict(reversed(list(vocabulary.items())))
    assert d(vocabulary) == d(reversed_order)
    changed = dict(vocabulary, word7=8)
    assert d(changed) != d(vocabulary)
    assert d(vocabulary) != d({k: float(v) for k, v in vocabulary.items()})
    assert d(vocabulary) != d({k: str(v) for k, v in vocabulary.items()})
    assert d({i: f"v{i}" for i in range(10)}) != d({str(i): f"v{i}" for i in range(10)})
    # keys and values cannot trade bytes between them
    a = {f"k{i}": "x" for i in range(8)}
    b = {f"k{i}": "x" for i in range(8)}
    b["k0x"] = b.pop("k0")
    b["k0x"] = ""
    assert d(a) != d(b)
    # mixed values and small dicts: pair by pair, as before (order still does not count)
    mixed = {f"k{i}": (i if i % 2 else str(i)) for i in range(20)}
    assert d(mixed) == d(dict(reversed(list(mixed.items()))))


def test_a_rule_registered_for_str_or_int_steps_the_packed_forms_aside() -> None:
    words = [f"Word{i}" for i in range(20)]
    lower = [w.lower() for w in words]
    register(str, lambda fp, v: [v.lower().encode()])
    try:
        assert Fingerprinter().digest(words) == Fingerprinter().digest(lower)
        as_keys = dict.fromkeys(words, 1)
        assert Fingerprinter().digest(as_keys) == Fingerprinter().digest(dict.fromkeys(lower, 1))
    finally:
        fpcore._REGISTRY.pop(str, None)
        fpcore._clear_rule_caches()
    assert Fingerprinter().digest(words) != Fingerprinter().digest(lower)
    register(int, lambda fp, v: [str(v % 10).encode()])
    try:
        assert Fingerprinter().digest([1, 2, 3]) == Fingerprinter().digest([11, 12, 13])
    finally:
        fpcore._REGISTRY.pop(int, None)
        fpcore._clear_rule_caches()
    assert Fingerprinter().digest([1, 2, 3]) != Fingerprinter().digest([11, 12, 13])
