"""What the fast hit path remembers gives what doing the work again gives: the cell
transform, the parsed options, the RNG state, the decoded extras."""

from __future__ import annotations

import gc
import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell

from ipy_resume.engine import rng
from ipy_resume.frontends.magics import CheckpointMagics
from ipy_resume.store import backend as backend_module
from ipy_resume.store import loader as loader_module
from ipy_resume.store import reader as reader_module
from ipy_resume.store import store as store_module


def magics_of(shell: InteractiveShell) -> CheckpointMagics:
    found = shell.magics_manager.registry["CheckpointMagics"]
    assert isinstance(found, CheckpointMagics)
    return found


BODIES = [
    "y = x + 1",
    "pwd",  # automagic on a one-line cell: depends on the namespace
    "files = !ls\nn = len(files)",
    "names = %who_ls\nk = 1",
    "  indented = 1\n  more = 2",
    ">>> p = 1\n>>> q = p + 1",
    "x?",
    "print('%d' % 3)",
]


def test_the_remembered_transform_is_ipythons(shell: InteractiveShell) -> None:
    m = magics_of(shell)
    for body in BODIES:
        assert m._transform(body) == shell.transform_cell(body), body
        assert m._transform(body) == shell.transform_cell(body), body  # remembered now
    shell.user_ns["pwd"] = "mine"  # shadows the magic: the one-line cell is plain Python now
    assert m._transform("pwd") == shell.transform_cell("pwd") == "pwd\n"
    del shell.user_ns["pwd"]
    assert "run_line_magic" in m._transform("pwd")


def test_a_transform_added_later_applies_every_time(shell: InteractiveShell) -> None:
    m = magics_of(shell)
    calls: list[int] = []

    def post(lines: list[str]) -> list[str]:
        calls.append(1)
        return [line.replace("SEVEN", "7") for line in lines]

    assert m._transform("a = SEVEN\nb = 1") == "a = SEVEN\nb = 1\n"
    shell.input_transformers_post.append(post)
    try:
        for n in (1, 2):
            assert m._transform("a = SEVEN\nb = 1") == "a = 7\nb = 1\n"
            assert len(calls) == n
    finally:
        shell.input_transformers_post.remove(post)


def test_a_cell_with_ipython_syntax_hits_with_its_values(
    shell: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    cell = "%%checkpoint syntax\nout = !echo hi\ntotal = len(out) + 1"
    for _ in range(2):
        result = shell.run_cell(cell)
        assert result.success, result.error_in_exec
        assert list(shell.user_ns["out"]) == ["hi"] and shell.user_ns["total"] == 2
    assert "restored 'syntax'" in capsys.readouterr().err


def test_options_are_parsed_once_and_malformed_lines_fail_each_time(
    shell: InteractiveShell,
) -> None:
    m = magics_of(shell)
    first = m._options("c --inputs a,b --deps x.csv y.csv --seed 3")
    first.inputs.append("mutated")
    first.deps.clear()
    again = m._options("c --inputs a,b --deps x.csv y.csv --seed 3")
    assert again.inputs == ["a", "b"] and again.deps == ["x.csv", "y.csv"]
    assert again.seed == 3 and again is not first
    for _ in range(2):
        with pytest.raises(UsageError, match="not both"):
            m._options("c --seed 1 --no-seed")
        with pytest.raises(UsageError, match="not a variable name"):
            m._options("c --inputs 1x")


def test_the_store_memo_follows_the_working_directory(
    shell: InteractiveShell, isolated: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    m = magics_of(shell)
    monkeypatch.delenv("IPY_RESUME_DIR")
    here = m.engine()
    assert Path(here.store.root) == (isolated / ".ipy_resume").resolve()
    (isolated / "sub").mkdir()
    monkeypatch.chdir(isolated / "sub")
    there = m.engine()
    assert there is not here
    assert Path(there.store.root) == (isolated / "sub" / ".ipy_resume").resolve()
    monkeypatch.setenv("IPY_RESUME_DIR", str(isolated / "named"))
    assert Path(m.engine().store.root) == (isolated / "named").resolve()


@pytest.mark.parametrize("seed", [0, 1, 12345, 2**32 - 1, 2**40 + 7])
def test_an_untouched_numpy_generator_is_restored_by_seeding(seed: int) -> None:
    rng.seed_all(seed)
    random.random()  # the Python generator moved, numpy's did not
    state = rng.snapshot(seed)
    assert state["numpy_seed"] == seed % 2**32
    assert "numpy" in state  # the full state too, for readers without the shortcut
    expected_np = np.random.get_state(legacy=False)
    expected_py = random.random()
    np.random.rand(10)
    random.random()
    rng.restore(state)
    assert random.random() == expected_py
    got = np.random.get_state(legacy=False)
    assert (got["state"]["key"] == expected_np["state"]["key"]).all()
    assert got["state"]["pos"] == expected_np["state"]["pos"]


@pytest.mark.parametrize("draws", [1, 624, 1248])
def test_a_generator_that_drew_keeps_its_full_state(draws: int) -> None:
    rng.seed_all(7)
    np.random.bytes(4 * draws)  # 32-bit words: 624 of them bring the position back to 624
    state = rng.snapshot(7)
    assert "numpy_seed" not in state
    after = np.random.rand(3)
    rng.seed_all(99)
    rng.restore(state)
    assert (np.random.rand(3) == after).all()
    assert "numpy_seed" not in rng.snapshot(None)


@pytest.mark.parametrize("seed", [0, 12345, 2**40 + 7])
def test_an_untouched_python_generator_is_restored_by_seeding(seed: int) -> None:
    rng.seed_all(seed)
    np.random.rand(2)  # numpy's moved, random's did not
    state = rng.snapshot(seed)
    assert state["python_seed"] == seed and "numpy_seed" not in state
    expected = random.random()
    random.seed(99)
    random.random()
    rng.restore(state)
    assert random.random() == expected
    # the full state is there for readers without the shortcut, and sets the same state
    # the way 0.1.0 sets it (a tuple of the words)
    version, words, gauss = state["python"]
    assert words.typecode == "I" and len(words) == 625
    random.setstate((version, tuple(words), gauss))
    assert random.random() == expected
    # a state recorded before (a tuple, no shortcut) is restored as before
    rng.seed_all(seed)
    old = {"python": random.getstate()}
    rng.seed_all(1)
    rng.restore(old)
    assert random.random() == expected


def test_a_python_generator_that_drew_is_not_a_fresh_seed() -> None:
    rng.seed_all(3)
    random.random()
    state = rng.snapshot(3)
    assert "python_seed" not in state and "numpy_seed" in state
    after = random.random()
    rng.seed_all(3)
    rng.restore(state)
    assert random.random() == after
    random.seed(3)  # seeded again by the cell itself, nothing drawn since: the same state
    assert rng.snapshot(3)["python_seed"] == 3
    assert "python_seed" not in rng.snapshot(None)


def test_a_hit_leaves_random_where_executing_leaves_it(shell: InteractiveShell) -> None:
    # the kernel's generators are somewhere else at the hit than at the save: executing
    # seeds first, so the state after the hit must not depend on them
    cell = "%%checkpoint quiet_rng --quiet\nv = 1"
    shell.run_cell("import random, numpy as np")
    shell.run_cell(cell)
    executed = (random.random(), float(np.random.rand()))
    random.seed(1234)
    np.random.seed(4321)
    shell.run_cell(cell)
    assert (random.random(), float(np.random.rand())) == executed
    shell.run_cell("%%checkpoint drew_rng --quiet\nw = random.random() + np.random.rand()")
    drew = (random.random(), float(np.random.rand()))
    random.seed(7)
    np.random.seed(8)
    shell.run_cell("%%checkpoint drew_rng --quiet\nw = random.random() + np.random.rand()")
    assert (random.random(), float(np.random.rand())) == drew


def test_a_gaussian_in_hand_is_not_a_fresh_seed() -> None:
    rng.seed_all(5)
    np.random.standard_normal()  # draws two, keeps one for later
    assert "numpy_seed" not in rng.snapshot(5)


def test_extras_decoded_once_are_still_verified(
    shell: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    store_module.forget_verified()
    cell = "%%checkpoint noisy\nprint('hello')\nv = 1"
    shell.run_cell(cell)
    shell.run_cell(cell)
    shell.run_cell(cell)
    assert capsys.readouterr().out.count("hello") == 3  # printed, then replayed twice
    decoded = list(loader_module._decoded.values())
    assert decoded, "the output record and the RNG state are remembered"
    engine = magics_of(shell).last_engine
    assert engine is not None
    (found,) = engine.store.manifests()
    ref = found.extras["outputs"]
    _flip_first_byte(engine.store, ref)
    shell.run_cell(cell)
    captured = capsys.readouterr()
    assert "corrupt" in captured.err and "executed 'noisy'" in captured.err
    assert captured.out.count("hello") == 1


def test_a_name_moved_on_is_not_linked_however_many_entries(tmp_path: Path) -> None:
    from ipy_resume.engine.sharing import SharedObjects
    from ipy_resume.store import Store

    store = Store(tmp_path / "st", key=bytes(32))
    namespace: dict[str, object] = {f"n{i}": [i, i + 1] for i in range(100)}
    saved = store.save("many", "k1", namespace).manifest
    shared = SharedObjects()
    shared.note(saved, dict(namespace), namespace)
    old = namespace["n5"]
    assert id(old) in shared.candidates()
    del namespace["n5"]  # the user deletes one name, then a hit notes another cell
    namespace["x"] = [0]
    other = store.save("other", "k2", {"x": namespace["x"]}).manifest
    shared.note(other, {"x": namespace["x"]}, namespace)
    found = shared.candidates()
    assert id(old) not in found
    assert id(namespace["n6"]) in found and id(namespace["x"]) in found
    assert "n5" not in shared.holders({id(old)}, {id(old)})


QUICK_LINES = [
    "c",
    " c --quiet",
    "a.b-c --force --quiet --explain --no-seed --no-file-deps",
    "c --quiet --quiet",
    "é --force",
    "c --qui",  # an abbreviation: argparse's
    "c --seed 3",
    "'a b' --quiet",
    "c --salt x#y",
    "c --inputs a,b --quiet",
    "--quiet c",
]


@pytest.mark.parametrize("line", QUICK_LINES)
def test_options_read_without_argparse_are_argparses(shell: InteractiveShell, line: str) -> None:
    m = magics_of(shell)
    quick = m._quick_parse(line)
    try:
        slow = m._parse(line)
    except UsageError:
        assert quick is None
        return
    assert quick is None or quick == slow
    assert m._options(line) == m._options(line)


def _cell(i: int) -> str:
    return f"%%checkpoint own{i} --quiet\nv{i} = [t * 0.5 + {i} for t in base]"


def test_a_hit_on_a_checkpoint_saved_here_lists_nothing(
    shell: InteractiveShell, monkeypatch: pytest.MonkeyPatch
) -> None:
    from conftest import spy

    shell.run_cell("base = [float(i) for i in range(10)]")
    assert shell.run_cell(_cell(1)).success
    engine = magics_of(shell).last_engine
    assert engine is not None
    (saved,) = engine.store.manifests()
    shell.run_cell("v1.append('changed after the save'); w = v1")
    reads = spy(monkeypatch, backend_module, "_read_fd")
    lists = spy(monkeypatch, reader_module.Reader, "manifest_paths")
    assert shell.run_cell(_cell(1)).success
    # no folder listed; its own manifest file at most, compared with the bytes it signed
    # (none once the file has settled: on a loaded machine 100 ms may pass before the hit)
    assert lists == [] and reads in ([], [str(saved.path)])
    assert shell.user_ns["v1"] == [t * 0.5 + 1 for t in range(10)]
    assert shell.user_ns["v1"] is not shell.user_ns["w"]  # a fresh object, as saved


def test_a_checkpoint_saved_here_and_removed_since_is_not_restored(
    shell: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    shell.run_cell("base = [1.0, 2.0]")
    shell.run_cell(_cell(2))
    engine = magics_of(shell).last_engine
    assert engine is not None
    (found,) = engine.store.manifests()
    assert found.path is not None
    Path(found.path).unlink()
    capsys.readouterr()
    shell.run_cell(_cell(2).replace("--quiet", ""))
    assert "executed 'own2'" in capsys.readouterr().err
    # replaced by another file of the same name: that one is read and verified
    (again,) = engine.store.manifests()
    assert again.path is not None
    data = Path(again.path).read_bytes()
    Path(again.path).unlink()
    tampered = data.replace(b'"complete":true', b'"complete":false')  # (a compact manifest)
    assert tampered != data
    Path(again.path).write_bytes(tampered)
    shell.run_cell(_cell(2).replace("--quiet", ""))
    err = capsys.readouterr().err
    assert "restored 'own2'" not in err and "executed 'own2'" in err


def _flip_first_byte(store: Any, ref: Any) -> None:
    """Corrupt the first byte of what *ref* points at, in its blob file."""
    blob = Path(store.blob_path(ref.blob))
    data = bytearray(blob.read_bytes())
    data[ref.offset] ^= 0xFF
    blob.chmod(0o644)
    blob.write_bytes(bytes(data))


def test_a_corrupt_blob_of_a_checkpoint_saved_here_is_caught(
    shell: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    shell.run_cell("base = [1.0, 2.0]")
    shell.run_cell(_cell(3))
    engine = magics_of(shell).last_engine
    assert engine is not None
    (found,) = engine.store.manifests()
    ref = found.values["v3"]
    _flip_first_byte(engine.store, ref)
    shell.run_cell("del v3")
    capsys.readouterr()
    shell.run_cell(_cell(3).replace("--quiet", ""))
    err = capsys.readouterr().err
    assert "corrupt" in err and "executed 'own3'" in err
    assert shell.user_ns["v3"] == [t * 0.5 + 3 for t in (1.0, 2.0)]


def test_identities_of_flat_values_are_the_containers() -> None:
    from ipy_resume.store import codecs

    floats, table, nested = [0.5] * 100, {"a": 1, "b": "x"}, [[1.0], (2, "s")]
    assert codecs.identities([floats]) == {id(floats)}
    assert codecs.identities([table]) == {id(table)}
    assert codecs.identities([nested]) == {id(nested), id(nested[0])}
    assert codecs.flat(floats) and codecs.flat(table) and not codecs.flat(nested)
    assert not codecs.flat([np.float64(1.0)])  # a subclass: walked as before


def test_what_a_restored_group_holds_is_what_the_walk_finds() -> None:
    # a group of flat values skips the walk: the same ids as identities() gives
    import sys

    from ipy_resume.store import codecs

    floats, table, items = [0.5] * 100, {"a": 1, "b": "x"}, {1, 2.5}
    groups = [
        [floats, 3, "s", (1, 2.0), frozenset({1})],
        [floats, floats, table, items, bytearray(b"ab")],
        [table, [[1.0]], np.zeros(3)],
        [sys.path, floats],  # a module's own list: not the group's
        [],
    ]
    for values in groups:
        assert codecs.held_by(values) == codecs.identities(values), values


TRICKY = [
    "y = x + 1",
    "y = x + 1\n",
    "\ny = 1",
    "  y = 1\n  z = 2",
    "y = 1\n   \nz = 2",
    "y = 1\n\t\nz = 2",
    "f(1,\n,2)",
    "x = 1\n/f 2",
    "x = 1\n;f a b",
    "s = 'In [1]: x'",
    "x = ...",
    "a = b # 100%",
    "a = b\r\nc = d",
    "a = 'x\x0c,y'",
    "def f():\n    return 1\n\nclass A:\n    pass",
    "s = '''\n>>> 1\n'''",
    "print('done')  # no trigger",
]


def test_plain_python_is_left_as_ipython_leaves_it(shell: InteractiveShell) -> None:
    import json

    from ipy_resume.frontends.magics import _untouched

    manager = shell.input_transformer_manager
    steps = (*manager.cleanup_transforms, *manager.line_transforms, *manager.token_transformers)
    cells = list(TRICKY) + BODIES
    for notebook in sorted((Path(__file__).parent / "corpus").glob("*.ipynb")):
        for c in json.loads(notebook.read_text())["cells"]:
            if c["cell_type"] == "code":
                source = "".join(c["source"]) if isinstance(c["source"], list) else c["source"]
                cells.append(source.partition("\n")[2] if source.startswith("%%") else source)
    taken = 0
    for cell in cells:
        quick = _untouched(cell, steps)
        if quick is not None:
            taken += 1
            assert quick == manager.transform_cell(cell), cell
    assert taken > len(cells) // 2  # most cells are plain Python
    assert _untouched("y = x + 1", steps[1:]) is None  # another set of transforms: not known


def _committed_manifest(shell: InteractiveShell, base: str, n: int) -> Path:
    """Run checkpointed cell *n* over ``base = <base>``, wait until it is durable, and give
    the path of the manifest the background writer committed (read from the engine: listing
    the store would parse it here)."""
    shell.run_cell(f"base = {base}")
    assert shell.run_cell(_cell(n)).success
    shell.run_line_magic("checkpoint", "wait")
    engine = magics_of(shell).last_engine
    assert engine is not None
    (path,) = engine._committed.values()
    return Path(path)


def test_a_hit_after_a_background_save_compares_the_bytes_and_parses_nothing(
    shell: InteractiveShell, monkeypatch: pytest.MonkeyPatch
) -> None:
    from conftest import spy

    from ipy_resume.store import manifest as manifest_module

    path = _committed_manifest(shell, "[float(i) for i in range(10)]", 5)
    shell.run_cell("del v5")
    reads = spy(monkeypatch, backend_module, "_read_fd")
    parsed = spy(monkeypatch, manifest_module.Manifest, "from_json")
    assert shell.run_cell(_cell(5)).success
    # parsed on the writer thread when it was committed; read and compared here
    assert reads == [str(path)] and parsed == []
    assert shell.user_ns["v5"] == [t * 0.5 + 5 for t in range(10)]


def test_a_manifest_tampered_after_the_writer_parsed_it_is_refused(
    shell: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _committed_manifest(shell, "[1.0, 2.0]", 6)
    data = path.read_bytes()
    assert data.count(b'"v6"') >= 1
    with open(path, "r+b") as f:  # same inode and size, new bytes: the signature fails
        f.write(data.replace(b'"v6"', b'"w6"', 1))
    shell.run_cell("del v6")
    capsys.readouterr()
    shell.run_cell(_cell(6).replace("--quiet", ""))
    err = capsys.readouterr().err
    assert "restored 'own6'" not in err and "executed 'own6'" in err
    assert "w6" not in shell.user_ns and shell.user_ns["v6"] == [t * 0.5 + 6 for t in (1.0, 2.0)]


def test_a_hit_loads_with_the_collector_off_and_leaves_it_as_it_was(
    shell: InteractiveShell, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from ipy_resume.engine import restoring

    seen: list[tuple[str, bool]] = []
    for name in ("load", "apply"):
        real = getattr(restoring, name)

        def observed(*args: Any, _real: Any = real, _name: str = name, **kwargs: Any) -> Any:
            seen.append((_name, gc.isenabled()))
            return _real(*args, **kwargs)

        monkeypatch.setattr(restoring, name, observed)
    shell.run_cell("base = [1.0, 2.0]")
    shell.run_cell(_cell(4))
    shell.run_cell("del v4")
    assert gc.isenabled()
    assert shell.run_cell(_cell(4)).success
    assert seen == [("load", False), ("apply", False)] and gc.isenabled()
    assert shell.user_ns["v4"] == [t * 0.5 + 4 for t in (1.0, 2.0)]
    # a load that fails verification turns it back on too
    engine = magics_of(shell).last_engine
    assert engine is not None
    (found,) = engine.store.manifests()
    _flip_first_byte(engine.store, found.values["v4"])
    shell.run_cell("del v4")
    capsys.readouterr()
    shell.run_cell(_cell(4).replace("--quiet", ""))
    assert "corrupt" in capsys.readouterr().err and gc.isenabled()
    # a kernel that turned the collector off finds it off after a hit
    shell.run_cell("del v4")
    seen.clear()
    gc.disable()
    try:
        assert shell.run_cell(_cell(4)).success
        assert seen == [("load", False), ("apply", False)] and not gc.isenabled()
    finally:
        gc.enable()


@pytest.mark.parametrize("seed", [0, 1, 12345, 2**32 - 1, 2**40 + 7])
def test_the_fresh_numpy_state_read_from_the_generator_is_numpys_own(seed: int) -> None:
    rng.seed_all(seed)
    expected = np.random.get_state(legacy=False)
    state = rng._numpy_state_if_fresh(seed % 2**32)
    assert state is not None
    assert state["bit_generator"] == expected["bit_generator"]
    assert state["state"]["pos"] == expected["state"]["pos"]
    assert state["state"]["key"].dtype == expected["state"]["key"].dtype
    assert (state["state"]["key"] == expected["state"]["key"]).all()
    assert (state["has_gauss"], state["gauss"]) == (expected["has_gauss"], expected["gauss"])
    np.random.set_state(state)  # numpy takes it back as its own
    assert (np.random.get_state(legacy=False)["state"]["key"] == expected["state"]["key"]).all()
    # anything drawn since, or another seed: not fresh
    np.random.random()
    assert rng._numpy_state_if_fresh(seed % 2**32) is None
    rng.seed_all(seed + 1)
    assert rng._numpy_state_if_fresh(seed % 2**32) is None
