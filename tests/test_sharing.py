"""Shared objects stay shared, and keys stay stable, across a restore in a fresh process."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from IPython.core.interactiveshell import InteractiveShell
from test_cross_process import run_process

from ipy_resume.engine.sharing import SharedObjects, fingerprints_of
from ipy_resume.store import Store

BOX = (
    "%%checkpoint a\n"
    "import numpy as np\n"
    "class Box:\n"
    "    def __init__(self):\n"
    "        self.items = [1]\n"
    "box = Box(); base = np.arange(10.0); big = np.arange(100_000.0)"
)
HOLDER = (
    "%%checkpoint b\n"
    "holder = {'box': box}; view = base[2:5]; big_view = big[10:20]; pair = [box, box]"
)
AFTER = "box.items.append(2); view[0] = 99.0; big_view[0] = -1.0"
CHECKS = {
    "holder_is_box": "holder['box'] is box",
    "pair_is_box": "pair[0] is box and pair[1] is box",
    "items": "holder['box'].items",
    "base2": "float(base[2])",
    "big10": "float(big[10])",
}
UNINTERRUPTED = {
    "holder_is_box": "True",
    "pair_is_box": "True",
    "items": "[1, 2]",
    "base2": "99.0",
    "big10": "-1.0",
}


def _statuses(report: dict[str, object]) -> list[str]:
    cells = report["cells"]
    assert isinstance(cells, list)
    return [c["stderr"] for c in cells]


def test_box_and_view_behave_after_a_restore_as_in_the_uninterrupted_kernel(
    tmp_path: Path,
) -> None:
    first = run_process(tmp_path, [BOX, HOLDER, AFTER], CHECKS)
    assert first["eval"] == UNINTERRUPTED
    second = run_process(tmp_path, [BOX, HOLDER, AFTER], CHECKS)
    assert all("restored" in s for s in _statuses(second)[:2]), _statuses(second)
    assert second["eval"] == UNINTERRUPTED


@pytest.mark.parametrize("how", ["%resume", "%checkpoint restore b"])
def test_resume_and_restore_keep_objects_shared(tmp_path: Path, how: str) -> None:
    run_process(tmp_path, [BOX, HOLDER], {})
    report = run_process(tmp_path, [how, AFTER], CHECKS)
    assert report["cells"][0]["error"] is None, report["cells"][0]
    assert report["eval"] == UNINTERRUPTED


def test_an_object_changed_after_its_checkpoint_is_stored_again(tmp_path: Path) -> None:
    # box changes in a plain cell between a and b: b must not link to a's stale box
    cells = [BOX, "box.items.append(5)", HOLDER]
    checks = {"items": "holder['box'].items", "box": "box.items"}
    first = run_process(tmp_path, cells, checks)
    assert first["eval"] == {"items": "[1, 5]", "box": "[1, 5]"}
    second = run_process(tmp_path, cells, checks)
    assert all("restored" in s for s in (_statuses(second)[0], _statuses(second)[2]))
    assert second["eval"] == {"items": "[1, 5]", "box": "[1, 5]"}


BUNCH = "%%checkpoint load\nfrom sklearn.datasets import load_iris\niris = load_iris()"
READ = "%%checkpoint read\nn_rows = iris.data.shape[0]\nprint(iris.DESCR[:20])"


def test_a_bunch_restored_keeps_its_key_and_a_change_still_misses(tmp_path: Path) -> None:
    pytest.importorskip("sklearn")
    run_process(tmp_path, [BUNCH, READ], {})
    again = run_process(tmp_path, [BUNCH, READ], {"n": "n_rows"})
    assert [("restored" in s) for s in _statuses(again)] == [True, True], _statuses(again)
    changed = run_process(tmp_path, [BUNCH, "iris['extra'] = 1", READ], {"n": "n_rows"})
    assert "executed 'read'" in _statuses(changed)[2], _statuses(changed)


class Dropper:
    """A class whose ``__setstate__`` drops a cache, as many library classes do."""

    def __init__(self, n: int) -> None:
        self.n = n
        self._cache = {"computed": n * 2}

    def __getstate__(self) -> dict[str, object]:
        return dict(self.__dict__)

    def __setstate__(self, state: dict[str, object]) -> None:
        state = dict(state)
        state.pop("_cache", None)
        self.__dict__.update(state)


DROPPER = (
    "%%checkpoint make\n"
    "class Dropper:\n"
    "    def __init__(self, n):\n"
    "        self.n = n\n"
    "        self._cache = {'computed': n * 2}\n"
    "    def __setstate__(self, state):\n"
    "        state = dict(state); state.pop('_cache', None); self.__dict__.update(state)\n"
    "d = Dropper(3)"
)
USE = "%%checkpoint use\ntotal = d.n + 1"


def test_a_setstate_that_drops_an_attribute_still_hits_downstream(tmp_path: Path) -> None:
    run_process(tmp_path, [DROPPER, USE], {})
    again = run_process(
        tmp_path, [DROPPER, USE], {"total": "total", "cache": "hasattr(d, '_cache')"}
    )
    assert [("restored" in s) for s in _statuses(again)] == [True, True], _statuses(again)
    assert again["eval"] == {"total": "4", "cache": "False"}
    changed = run_process(tmp_path, [DROPPER, "d.n = 10", USE], {"total": "total"})
    assert "executed 'use'" in _statuses(changed)[2] and changed["eval"] == {"total": "11"}


def test_linked_values_survive_in_the_store_alone(tmp_path: Path) -> None:
    # Without the process that saved them: the link's blobs are in the second manifest.
    store = Store(tmp_path / "st", key=b"k" * 32)
    shared = SharedObjects()
    box = {"w": np.arange(5.0)}
    items = [box, "x"]
    first = {"items": items}
    m1 = store.save("a", "k1", first, info={"fingerprints": fingerprints_of(first)}).manifest
    shared.note(m1, first)
    second = {"holder": {"items": items}}
    m2 = store.save("b", "k2", second, linker=shared).manifest
    assert list(m2.links) == [f"{m1.id}/items"]
    alone = store.load_values(m2)
    assert alone["holder"]["items"][1] == "x"  # type: ignore[index]
    cache: dict[object, object] = {}
    together = store.load_values(m1, cache=cache), store.load_values(m2, cache=cache)
    assert together[1]["holder"]["items"] is together[0]["items"]  # type: ignore[index]
    assert store.verify() == []
    # gc keeping only b keeps the blobs b links to
    store.gc(keep_last=1)
    assert store.load_values(m2)["holder"]["items"][0]["w"].tolist() == [0, 1, 2, 3, 4]  # type: ignore[index]


PIPE = (
    "%%checkpoint parts\n"
    "from sklearn.linear_model import Ridge\n"
    "from sklearn.pipeline import make_pipeline\n"
    "from sklearn.preprocessing import StandardScaler\n"
    "ridge = Ridge(); model = make_pipeline(StandardScaler(), ridge)"
)
FIT = (
    "%%checkpoint fit\n"
    "import numpy as np\n"
    "X = np.arange(40.0).reshape(20, 2); y = X @ np.array([1.0, 2.0])\n"
    "model.fit(X, y)"
)
DIGITS = "%%checkpoint digits\nfrom sklearn.datasets import load_digits\ndigits = load_digits()"
IMAGE = "%%checkpoint image\nimage = digits['images'][0]"
PIPE_CHECKS = {
    "fitted": "hasattr(ridge, 'coef_')",
    "same": "model.steps[-1][1] is ridge",
    "view": "bool(__import__('numpy').shares_memory(image, digits['images']))",
}


def _same_after_a_restore(
    tmp_path: Path, cells: list[str], checks: dict[str, str], expected: dict[str, str]
) -> None:
    """*checks* give *expected* after the cells run, and again once all of them are restored
    in a fresh process."""
    first = run_process(tmp_path, cells, checks)
    assert first["eval"] == expected
    second = run_process(tmp_path, cells, checks)
    assert all("restored" in s for s in _statuses(second)), _statuses(second)
    assert second["eval"] == expected


def test_an_object_changed_through_another_keeps_its_name_and_sharing(tmp_path: Path) -> None:
    # `model.fit` fits `ridge` without naming it: the restored `ridge` must be fitted, and
    # still the pipeline's step; a view into an array inside a Bunch stays a view.
    pytest.importorskip("sklearn")
    expected = {"fitted": "True", "same": "True", "view": "True"}
    _same_after_a_restore(tmp_path, [PIPE, FIT, DIGITS, IMAGE], PIPE_CHECKS, expected)


def test_the_arrays_a_save_links_to_are_asked_for_again_after_each_operation(
    tmp_path: Path,
) -> None:
    """``arrays()`` is remembered within one save (asked twice there); a note of new values
    and the start of the next operation both give the current answer."""
    store = Store(tmp_path / "st", key=b"k" * 32)
    shared = SharedObjects()
    first = {"a": np.arange(4.0)}
    shared.note(store.save("a", "k1", first).manifest, first)
    assert [x is first["a"] for x in shared.arrays()] == [True]
    second = {"b": np.ones(3)}
    shared.note(store.save("b", "k2", second).manifest, second)
    assert {id(x) for x in shared.arrays()} == {id(first["a"]), id(second["b"])}
    namespace = {"b": second["b"]}  # 'a' was deleted in the kernel
    third = {"c": [1, 2]}
    shared.note(store.save("c", "k3", third).manifest, third, namespace)
    assert [x is second["b"] for x in shared.arrays()] == [True]
    shared.forget_checks()
    del namespace["b"], second
    fourth = {"d": 1.5}
    shared.note(store.save("d", "k4", fourth).manifest, fourth, namespace)
    assert shared.arrays() == []


SERIES = (
    "%%checkpoint series\nimport pandas as pd\n"
    "index = pd.MultiIndex.from_tuples([('CA', 2010), ('CA', 2020), ('NY', 2010)])\n"
    "pop = pd.Series([1, 2, 3], index=index)"
)
FRAME = "%%checkpoint frame\npop_df = pd.DataFrame({'total': pop, 'u': [4, 5, 6]})"
RENAME = "%%checkpoint rename\npop.index.names = ['state', 'year']"
FRAME_CHECKS = {"same": "pop_df.index is pop.index", "names": "list(pop_df.index.names)"}


def test_a_frame_built_on_a_series_index_follows_a_later_change_through_the_series(
    tmp_path: Path,
) -> None:
    # Found in a public tutorial (hierarchical indexing): the frame shares the Series' index
    # (stored as a link), and a later cell renames the index levels through the Series.
    pytest.importorskip("pandas")
    expected = {"same": "True", "names": "['state', 'year']"}
    _same_after_a_restore(tmp_path, [SERIES, FRAME, RENAME], FRAME_CHECKS, expected)


HOLD = "%%checkpoint hold\nholder = {'frame': pop_df}"
HOLD_CHECKS = {**FRAME_CHECKS, "held": "holder['frame'] is pop_df"}


def test_a_value_holding_that_frame_follows_it_too(tmp_path: Path) -> None:
    # holder is stored with a link to the frame; once the rename stores the frame again,
    # holder must be stored again with it, or it keeps the frame of before the rename.
    pytest.importorskip("pandas")
    expected = {"same": "True", "names": "['state', 'year']", "held": "True"}
    _same_after_a_restore(tmp_path, [SERIES, FRAME, HOLD, RENAME], HOLD_CHECKS, expected)


# Two rows of a transposed array that no name holds (``x, y = draws.T``), small and large
# enough for arrays of their own: one memory in the kernel, and after a restore too.
SIBLINGS = (
    "%%checkpoint siblings\n"
    "import numpy as np\n"
    "x, y = np.arange(20_000.0).reshape(10_000, 2).T\n"
    "s, t = np.arange(20.0).reshape(10, 2).T\n"
    "whole = np.arange(30_000.0).reshape(100, 300); rows = whole[::2]"
)
SIBLING_CHECKS = {
    "base": "x.base is y.base and s.base is t.base",
    "shares": "[bool(np.may_share_memory(a, b)) for a, b in [(x, y), (s, t), (whole, rows)]]",
    "layout": "[x.strides, y.strides, x.shape, int(y[0]), int(t[0])]",
    # a write through the base reaches both (evaluated last: it changes them)
    "through": "[(a.base.reshape(-1).__setitem__(1, -5.0), float(b[0]))[1] for a, b in [(x, y), (s, t)]]"
    " + [(rows.__setitem__((1, 0), -5.0), float(whole[2, 0]))[1]]",
}


def test_sibling_views_of_an_unnamed_base_come_back_as_views_of_one_base(
    tmp_path: Path,
) -> None:
    expected = {
        "base": "True",
        "shares": "[True, True, True]",
        "layout": "[(16,), (16,), (10000,), 1, 1]",
        "through": "[-5.0, -5.0, -5.0]",
    }
    _same_after_a_restore(tmp_path, [SIBLINGS], SIBLING_CHECKS, expected)


# `features = iris.data.T` (PDSH 04.02): the name holds all of the memory of an array that
# lives inside another value, which goes to the pickled group while `features` is stored
# as an array of its own.
STOOD_FOR = (
    "%%checkpoint transposed\n"
    "import numpy as np\n"
    "class Bunch(dict):\n"
    "    pass\n"
    "iris = Bunch(data=np.arange(600.0).reshape(150, 4).copy())  # owns its memory\n"
    "features = iris['data'].T"
)
STOOD_FOR_CHECKS = {
    "shares": "bool(np.shares_memory(features, iris['data']))",
    "layout": "[features.shape, features.strides, iris['data'].shape, iris['data'].strides]",
    "through": "(features.__setitem__((1, 0), -5.0), float(iris['data'][0, 1]))[1]",
}


def test_an_array_inside_a_value_and_a_name_standing_for_its_memory_stay_shared(
    tmp_path: Path,
) -> None:
    expected = {
        "shares": "True",
        "layout": "[(4, 150), (8, 32), (150, 4), (32, 8)]",
        "through": "-5.0",
    }
    _same_after_a_restore(tmp_path, [STOOD_FOR], STOOD_FOR_CHECKS, expected)


class _Box:
    def __init__(self) -> None:
        self.items = [1]


def _note(
    store: Store, shared: SharedObjects, namespace: dict[str, object], cell: str, names: list[str]
) -> list[str]:
    """Save *names* as a checkpoint of *cell* with *shared* as its linker (as the engine
    does); the names the checkpoint stored."""
    shared.forget_checks()
    values = {n: namespace[n] for n in names}
    saved = store.save(cell, f"k-{cell}", values, linker=shared)
    stored = sorted({*values, *saved.added})
    shared.note(saved.manifest, {n: namespace[n] for n in stored}, namespace)
    return stored


def test_only_the_names_that_share_with_a_changed_object_are_stored_again(
    tmp_path: Path,
) -> None:
    # One checkpoint holds a box, a list inside it under a name of its own, and a value that
    # shares nothing with either: a later change of the box stores the first two again.
    store = Store(tmp_path / "st", key=b"k" * 32)
    shared = SharedObjects()
    box = _Box()
    ns: dict[str, object] = {"box": box, "items": box.items, "unrelated": {"k": [2, 3]}}
    assert _note(store, shared, ns, "a", ["box", "items", "unrelated"]) == sorted(ns)
    box.items.append(2)
    assert _note(store, shared, ns, "b", ["box"]) == ["box", "items"]
    # ...and through one another: 'tail' shares nothing with the box, but with 'items2'
    again = _Box()
    chain = {"box2": again, "items2": again.items, "tail": [again.items], "alone": [9]}
    ns.update(chain)
    assert _note(store, shared, ns, "c", list(chain)) == sorted(chain)
    again.items.append(5)
    assert _note(store, shared, ns, "d", ["box2"]) == ["box2", "items2", "tail"]


OUTER = "%%checkpoint outer\nouter = {'inner': [1]}"
ALIAS = "%%checkpoint alias\nalias = outer['inner']"


def test_a_value_inside_a_restored_checkpoint_stays_shared_with_a_later_one(
    tmp_path: Path,
) -> None:
    # What a restored checkpoint's values hold is walked only when a later save asks: the
    # new checkpoint, saved after a restore, must still find 'inner' in 'outer' and store
    # the two together, so a third kernel has them shared.
    run_process(tmp_path, [OUTER], {})
    second = run_process(tmp_path, [OUTER, ALIAS], {"shared": "alias is outer['inner']"})
    assert [("restored" in s) for s in _statuses(second)] == [True, False], _statuses(second)
    assert second["eval"] == {"shared": "True"}
    third = run_process(
        tmp_path,
        [OUTER, ALIAS, "alias.append(2)"],
        {"shared": "alias is outer['inner']", "inner": "outer['inner']"},
    )
    assert [("restored" in s) for s in _statuses(third)[:2]] == [True, True], _statuses(third)
    assert third["eval"] == {"shared": "True", "inner": "[1, 2]"}


def test_pandas_dtypes_and_index_caches_are_no_evidence_but_an_index_is(tmp_path: Path) -> None:
    pd = pytest.importorskip("pandas")
    from ipy_resume.store import codecs

    frame = pd.DataFrame({"c": pd.Categorical(["x", "y", "x"]), "n": [1.0, 2.0, 3.0]})
    frame.index.get_loc(1)  # builds the index's engine (a cache)
    counts = frame.groupby("c", observed=True)["n"].mean()  # shares the categories
    assert counts.index.dtype.categories is frame["c"].dtype.categories
    assert codecs.identities([frame]).isdisjoint(codecs.identities([counts]))
    column = pd.Series([4, 5, 6], index=frame.index)  # the index object (its name can be
    assert column.index is frame.index  # set in place, and shows through both)
    assert id(frame.index) in codecs.identities([frame]) & codecs.identities([column])


def test_copies_of_a_frame_share_no_evidence_and_saves_stay_flat(
    shell: InteractiveShell, isolated: Path
) -> None:
    # A frame's copies share what pandas never changes in place (the columns Index's
    # values, block placements, slices).  Counted, every copy was linked to all the
    # earlier ones, and each save walked them all: cell n cost n walks (19 ms a cell at
    # first, 90 ms after 150 copies).
    pd = pytest.importorskip("pandas")
    from IPython.utils.capture import capture_output

    from ipy_resume.engine.sharing import shared_objects
    from ipy_resume.store import codecs

    frame = pd.DataFrame({"a": np.arange(1000), "b": np.linspace(0, 1, 1000), "s": ["x"] * 1000})
    copies = [frame.copy() for _ in range(3)]
    assert copies[0].columns is not copies[1].columns  # (their values are shared)
    assert codecs.identities([copies[0]]).isdisjoint(codecs.identities([copies[1]]))
    shell.push({"df": frame})
    for i in range(6):
        with capture_output():
            assert shell.run_cell(f"%%checkpoint c{i}\nz{i} = df.copy()").success
    registry = shared_objects(isolated / "store")
    last = codecs.identities([shell.user_ns["z5"]])
    assert set(registry.holders(last)) == {"z5"}  # itself: no earlier copy shares with it
    with capture_output():
        shell.run_cell("z5.loc[0, 'a'] = -1")
    assert int(shell.user_ns["z4"].loc[0, "a"]) == 0  # (and none ever was)


def test_the_registry_answers_from_its_indexes_and_they_follow_every_drop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``holders`` reads only the entries that may hold what it is asked about, however many
    names the kernel holds; a dropped entry (its name rebound, or re-noted) is in no answer."""
    from ipy_resume.engine import sharing

    store = Store(tmp_path / "st", key=b"k" * 32)
    shared = SharedObjects()
    namespace: dict[str, object] = {}
    for i in range(60):
        values = {f"x{i}": [float(i)] * 3}
        namespace.update(values)
        shared.note(store.save(f"x{i}", f"k{i}", values).manifest, values, namespace)
    box = {"inner": [1, 2]}
    values = {"box": box}
    namespace.update(values)
    shared.note(store.save("box", "kb", values).manifest, values, namespace, {id(box["inner"])})
    shared.forget_checks()
    reads: list[str] = []
    get = sharing._Entry.get

    def counted(entry: sharing._Entry) -> object:
        reads.append(entry.name)
        return get(entry)

    monkeypatch.setattr(sharing._Entry, "get", counted)
    shared.holders({id(object())})  # (the sweep the last note left runs first)
    reads.clear()
    assert shared.holders({id(object())}) == {}
    assert reads == []  # nothing to read: no entry holds that object
    assert shared.holders({id(box["inner"])}) == {"box": box}
    assert set(reads) == {"box"}
    assert shared.holders({id(namespace["x7"])}) == {"x7": namespace["x7"]}
    # x7 rebound in the kernel: the next operation's sweep drops its entry and every index
    namespace["x7"] = "other"
    values = {"y": 2.5}
    shared.note(store.save("y", "ky", values).manifest, values, namespace)
    old = [7.0] * 3
    assert shared.holders({id(old)}) == {}
    assert not any(t.endswith("/x7") for ts in shared._by_obj.values() for t in ts)
    assert not any(t.endswith("/x7") for ts in shared._by_checkpoint.values() for t in ts)
    # re-noting a name replaces its entry everywhere
    again = {"box": {"inner": [3]}}
    namespace.update(again)
    shared.note(
        store.save("box", "kb2", again).manifest, again, namespace, {id(again["box"]["inner"])}
    )
    assert shared.holders({id(box["inner"])}) == {}
    assert shared.holders({id(again["box"]["inner"])}) == {"box": again["box"]}
    assert sum(t.endswith("/box") for ts in shared._by_obj.values() for t in ts) == 1


def test_a_restored_group_waits_for_its_walk_only_while_it_has_an_entry(tmp_path: Path) -> None:
    import json as module

    store = Store(tmp_path / "st", key=b"k" * 32)
    shared = SharedObjects()
    namespace: dict[str, object] = {}
    for name in ("a", "b"):
        values = {name: {"k": [1]}}
        namespace.update(values)
        shared.note(store.save(name, f"k{name}", values).manifest, values, namespace)
    assert len(shared._unwalked) == 2
    namespace["a"] = "rebound"  # the next note's sweep drops a's entry, and its group
    values = {"m": module}  # (a module: never an entry)
    namespace.update(values)
    shared.note(store.save("m", "km", values).manifest, values, namespace)
    (tok,) = shared._by_name["b"]
    assert list(shared._unwalked) == [id(shared._all[tok].members)]  # b's, not a's or m's


def test_candidates_follow_every_entry_added_and_dropped(tmp_path: Path) -> None:
    """The objects a save may link to are kept as entries come and go: the latest entry of
    an object names it, an earlier one again once that is dropped, and neither a value
    whose identity means nothing nor an object that died is a candidate."""
    import gc

    store = Store(tmp_path / "st", key=b"k" * 32)
    shared = SharedObjects()
    box, weak = [1, 2], _Box()  # (a list is held by the registry, a _Box weakly)
    ns: dict[str, object] = {"a": box, "w": weak, "n": 3.5}
    first = store.save("a", "k1", dict(ns)).manifest
    shared.note(first, dict(ns), ns)
    assert shared.candidates() == {id(box): f"{first.id}/a", id(weak): f"{first.id}/w"}
    ns["b"] = box
    second = store.save("b", "k2", {"b": box}).manifest
    shared.note(second, {"b": box}, ns)
    assert shared.candidates()[id(box)] == f"{second.id}/b"
    del ns["b"]  # the next note's sweep drops that entry: the first one names the list again
    third = store.save("c", "k3", {"c": [0]}).manifest
    shared.note(third, {"c": ns.setdefault("c", [0])}, ns)
    found = shared.candidates()
    assert found[id(box)] == f"{first.id}/a" and found[id(ns["c"])] == f"{third.id}/c"
    gone = id(weak)
    del ns["w"], weak
    gc.collect()
    assert shared.candidates().get(gone) != f"{first.id}/w"


COLORS = (
    "%%checkpoint colors\nimport numpy as np\nrng = np.random.default_rng(0)\n"
    "centers = rng.random((16, 3))\nnew_colors = centers[rng.integers(0, 16, 60_000)]"
)
RECOLORED = "%%checkpoint recolored\nimage = new_colors.reshape(200, 300, 3)"
RECOLORED_CHECKS = {
    "shares": "bool(np.shares_memory(image, new_colors))",
    "through": "(new_colors.__setitem__((0, 0), -3.0), float(image[0, 0, 0]))[1]",
}


def test_a_reshape_of_an_earlier_checkpoints_array_stays_its_view(tmp_path: Path) -> None:
    """A later cell's whole view of an array an earlier checkpoint stored (PDSH 05.11's
    ``china_recolored = new_colors.reshape(china.shape)``) is stored as a view of it, not
    as a second copy, and is that view again after a restore."""
    expected = {"shares": "True", "through": "-3.0"}
    first = run_process(tmp_path, [COLORS, RECOLORED], RECOLORED_CHECKS)
    assert first["eval"] == expected
    saved = _statuses(first)[1]
    # a view's description, not the 1.4 MB of memory a second time
    assert re.search(r"\(\d+(\.\d+)? (B|KB) written", saved), saved
    second = run_process(tmp_path, [COLORS, RECOLORED], RECOLORED_CHECKS)
    assert all("restored" in s for s in _statuses(second)), _statuses(second)
    assert second["eval"] == expected


RECORDS = [
    "%%checkpoint people\nimport numpy as np\n"
    "data = np.zeros(4, dtype={'names': ('name', 'age'), 'formats': ('U10', 'i4')})\n"
    "data['age'] = [25, 45, 37, 19]",
    # PDSH 02.09: a record-array view of an earlier cell's structured array
    "%%checkpoint records\ndata_rec = data.view(np.recarray)",
    "%%checkpoint alone\nfresh = np.zeros(3, dtype=[('x', 'f8')])\nfresh_rec = fresh.view(np.recarray)",
    "data_rec.age[0] = 99\nfresh_rec.x[1] = 5.0",
]
RECORD_CHECKS = {
    "age0": "int(data['age'][0])",
    "x1": "float(fresh['x'][1])",
    "classes": "(type(data_rec) is np.recarray, type(fresh_rec) is np.recarray)",
    "dtype": "str(data_rec.dtype)",
}


def test_a_record_array_view_shares_its_base_and_is_a_recarray_after_a_restore(
    tmp_path: Path,
) -> None:
    # The view was stored as a copy (views were kept for plain arrays only), so a write
    # through 'data_rec' no longer reached 'data'; and np.recarray itself was pickled by
    # value ('numpy.rec' is not imported until np.rec is read), so the restored array was
    # of another class that merely has the same name.
    first = run_process(tmp_path, RECORDS, RECORD_CHECKS)
    assert first["eval"]["age0"] == "99" and first["eval"]["x1"] == "5.0"
    second = run_process(tmp_path, RECORDS, RECORD_CHECKS)
    assert all("restored" in c["stderr"] for c in second["cells"][:3]), second["cells"]
    assert second["eval"] == first["eval"]
    assert second["eval"]["classes"] == "(True, True)"


COW_FRAME = (
    "%%checkpoint frame\n"
    "import pandas as pd\n"
    "df = pd.DataFrame({'a': [1.0, 2.0], 'b': [3.0, 4.0], 'c': pd.Categorical(['x', 'y'])})"
)
COW_DERIVED = "%%checkpoint derived\nnarrow = df.drop(columns=['b']); alias = df.copy(deep=False)"
COW_CHANGED = "%%checkpoint changed\ndf['e'] = [5, 6]"
COW_WRITE = "df.iloc[0, 0] = 99.0; df.loc[0, 'c'] = 'y'"
COW_CHECKS = {
    "narrow": "(float(narrow.iloc[0, 0]), str(narrow.loc[0, 'c']))",
    "alias": "(float(alias.iloc[0, 0]), str(alias.loc[0, 'c']))",
    "df": "(float(df.iloc[0, 0]), str(df.loc[0, 'c']))",
}


def _copy_on_write_pandas() -> Any:
    """pandas, when it copies on write (else the test is skipped)."""
    pd = pytest.importorskip("pandas")
    from ipy_resume.store import pandas_cow

    if not pandas_cow.active():
        pytest.skip(f"pandas {pd.__version__} does not copy on write")
    return pd


def test_frames_sharing_blocks_under_copy_on_write_stay_apart_after_a_restore(
    tmp_path: Path,
) -> None:
    # `narrow` and `alias` hold df's blocks; pandas copies a block before a write while
    # another frame holds it.  Restored sharing that memory without pandas' bookkeeping,
    # the write to df showed through both (99.0, 'y'): the restored kernel differed.
    _copy_on_write_pandas()
    expected = {"narrow": "(1.0, 'x')", "alias": "(1.0, 'x')", "df": "(99.0, 'y')"}
    cells = [COW_FRAME, COW_DERIVED, COW_CHANGED, COW_WRITE]
    first = run_process(tmp_path, cells, COW_CHECKS)
    assert first["eval"] == expected
    second = run_process(tmp_path, cells, COW_CHECKS)
    assert all("restored" in s for s in _statuses(second)[:3]), _statuses(second)
    assert second["eval"] == expected
    report = run_process(
        tmp_path, ["from ipy_resume import cli\nrc = cli.main(['list', '--json'])"], {}
    )
    listed = json.loads(report["cells"][0]["stdout"])
    names = {r["cell_id"]: r["names"] for r in listed}
    # the frames are no evidence of one another: neither save stores the other again
    assert names == {"frame": ["df", "pd"], "derived": ["alias", "narrow"], "changed": ["df"]}


def test_copy_on_write_shared_blocks_are_no_evidence_but_their_objects_are(
    tmp_path: Path,
) -> None:
    pd = _copy_on_write_pandas()
    from ipy_resume.store import codecs, pandas_cow

    item = {"k": 1}  # an object a column holds: shared with its name, whatever pandas does
    frame = pd.DataFrame({"a": np.arange(4.0), "o": [item, 2, 3, 4]})
    derived = frame.drop(columns=[])
    assert pandas_cow.shared_block(frame._mgr.blocks[0])
    common = codecs.identities([frame]) & codecs.identities([derived])
    assert common == {id(item)}
    assert id(item) in codecs.identities([frame]) & codecs.identities([[item]])
    apart = frame.copy()  # a copy of its own: its block's memory counts as before
    assert not pandas_cow.shared_block(apart._mgr.blocks[0])
    column = apart["a"].to_numpy()  # (a view of that block's memory)
    assert codecs.data_pointer(column) in codecs.identities([apart])


def test_an_earlier_value_a_closure_holds_stays_shared_with_its_name(tmp_path: Path) -> None:
    # `cfg` changed outside any checkpoint, so `get`'s closure holds it inline rather than
    # as a link; no walk enters a function, only the pickle meets it (the registry holds no
    # list or dict here: the pickler says what it wrote, without a copy of its memo).  Its
    # name is stored again with `get`, so the two are one object after a restore.
    cells = [
        "%%checkpoint a\nclass Cfg:\n    pass\ncfg = Cfg()\ncfg.v = 1",
        "cfg.v = 2",
        "%%checkpoint b\ndef make(c):\n    return lambda: c.v\nget = make(cfg)",
    ]
    checks = {"now": "get()", "shared": "(setattr(cfg, 'v', 7), get())[1]"}
    expected = {"now": "2", "shared": "7"}
    assert run_process(tmp_path, cells, checks)["eval"] == expected
    second = run_process(tmp_path, cells, checks)
    said = _statuses(second)
    assert "restored 'a'" in said[0] and "restored 'b'" in said[2], said
    assert second["eval"] == expected
