"""``%%checkpoint`` in a real IPython shell: hits, misses, invalidation, failures."""

from __future__ import annotations

import re
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell
from IPython.utils.capture import capture_output

from ipy_resume.fingerprint import fingerprint
from ipy_resume.store import Store


def run(shell: InteractiveShell, source: str) -> object:
    """Run a cell; fail the test on any error; return its result."""
    result = shell.run_cell(source)
    if not result.success:
        raise AssertionError(f"cell failed: {result.error_in_exec or result.error_before_exec}")
    return result.result


def counting_cell(cell_id: str, body: str, options: str = "") -> str:
    """A checkpointed cell that counts its executions in the list ``runs``."""
    return f"%%checkpoint {cell_id} {options}\nruns.append({cell_id!r})\n{body}\n"


@pytest.fixture
def counted(shell: InteractiveShell) -> InteractiveShell:
    shell.user_ns["runs"] = []
    return shell


def executions(shell: InteractiveShell, cell_id: str) -> int:
    return list(shell.user_ns["runs"]).count(cell_id)


def forget(shell: InteractiveShell, *names: str) -> None:
    for name in names:
        shell.user_ns.pop(name, None)


def test_second_run_restores_without_executing(
    counted: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    # ``runs`` is read by the cell (runs.append), so it is left out of the key.
    cell = counting_cell("double", "y = x * 2", "--ignore runs")
    counted.user_ns["x"] = 21
    run(counted, cell)
    forget(counted, "y")
    run(counted, cell)
    assert counted.user_ns["y"] == 42
    assert executions(counted, "double") == 1
    assert "restored 'double'" in capsys.readouterr().err


def test_status_line_and_quiet(shell: InteractiveShell, capsys: pytest.CaptureFixture[str]) -> None:
    run(shell, "%%checkpoint q\na = 1")
    capsys.readouterr()
    run(shell, "%%checkpoint q\na = 1")
    assert "restored 'q' from checkpoint" in capsys.readouterr().err
    run(shell, "%%checkpoint q --quiet\na = 1")
    assert capsys.readouterr().err == ""


def test_result_value_and_stdout_are_replayed(
    shell: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    cell = "%%checkpoint show\nprint('working', 7)\nimport sys; print('warn', file=sys.stderr)\n{'answer': 42}"
    first = run(shell, cell)
    out1 = capsys.readouterr()
    second = run(shell, cell)
    out2 = capsys.readouterr()
    assert first == second == {"answer": 42}
    assert "working 7" in out1.out and "working 7" in out2.out
    assert "warn" in out2.err


def test_trailing_semicolon_hides_result(shell: InteractiveShell) -> None:
    assert run(shell, "%%checkpoint semi\n1 + 1;") is None
    assert run(shell, "%%checkpoint semi2\n1 + 1") == 2


@pytest.mark.parametrize(
    ("source", "hidden"),
    [
        ("1 + 1;", True),
        ("1 + 1", False),
        ("x = 1\nx;  # a comment ; here", True),
        ("x = 1\nx  # a comment ;", False),
        ("(1 +\n 2);", True),
        ("(1 +\n 2)\n", False),
        ("(1)", False),
        ("'a;' ;", True),
        ("'a;'", False),
        ("'é' + 'ü' ;", True),
        ("'é' + 'ü;'", False),
        ("f'{1};'", False),
        ("x = 1; x", False),
        ("x = 1; x;", True),
        ("if True:\n    y = 2\ny;\n\n", True),
        ('"""multi\nline;"""', False),
        ('"""multi\nline""";', True),
        ("x = 1\r\nx;", True),
    ],
)
def test_trailing_semicolon_found_from_the_last_statement(source: str, hidden: bool) -> None:
    # Only what follows the last statement is tokenized: the answer must be the whole
    # text's, whatever the statement holds (strings, comments, non-ASCII, line breaks).
    import ast

    from ipy_resume.engine.execution import _ends_with_semicolon

    final = ast.parse(source).body[-1]
    assert _ends_with_semicolon(source) is hidden
    assert _ends_with_semicolon(source, final) is hidden


def test_rich_display_is_recorded_and_replayed(shell: InteractiveShell) -> None:
    cell = (
        "%%checkpoint rich --quiet\n"
        "from IPython.display import HTML, display\n"
        "display(HTML('<b>bold</b>'))\n"
        "print('between')\n"
    )
    with capture_output() as first:
        run(shell, cell)
    with capture_output() as second:
        run(shell, cell)
    assert [o.data for o in first.outputs] == [o.data for o in second.outputs]
    assert any("text/html" in o.data for o in second.outputs)
    assert first.stdout == second.stdout == "between\n"


def test_input_change_executes_and_going_back_hits(counted: InteractiveShell) -> None:
    cell = "%%checkpoint sq --ignore runs\nruns.append('sq')\ny = x ** 2\n"
    for x in (3, 4, 3, 4):
        counted.user_ns["x"] = x
        run(counted, cell)
        assert counted.user_ns["y"] == x**2
    assert executions(counted, "sq") == 2


def test_comment_and_whitespace_edits_still_hit(counted: InteractiveShell) -> None:
    counted.user_ns["x"] = 5
    run(counted, "%%checkpoint c --ignore runs\nruns.append('c')\ny = x + 1\n")
    run(
        counted,
        "%%checkpoint c --ignore runs\n# a comment\nruns.append( 'c' )\n\n\ny   =   x+1  # why\n",
    )
    assert executions(counted, "c") == 1
    run(counted, "%%checkpoint c --ignore runs\nruns.append('c')\ny = x + 2\n")
    assert executions(counted, "c") == 2


def test_called_function_body_change_executes(counted: InteractiveShell) -> None:
    run(counted, "def helper(v):\n    return v + 1\n\ndef f(v):\n    return helper(v) * 2\n")
    cell = "%%checkpoint fn --ignore runs\nruns.append('fn')\ny = f(1)\n"
    run(counted, cell)
    run(counted, cell)
    assert executions(counted, "fn") == 1
    run(counted, "def helper(v):\n    return v + 10\n")
    run(counted, cell)
    assert executions(counted, "fn") == 2 and counted.user_ns["y"] == 22


def test_deps_seed_and_salt_invalidate(counted: InteractiveShell, isolated: Path) -> None:
    data = isolated / "data.csv"
    data.write_text("1,2,3\n")
    base = "%%checkpoint d --ignore runs {opts}\nruns.append('d')\ny = 1\n"
    run(counted, base.format(opts="--deps data.csv"))
    run(counted, base.format(opts="--deps data.csv"))
    assert executions(counted, "d") == 1
    data.write_text("1,2,4\n")
    run(counted, base.format(opts="--deps data.csv"))
    assert executions(counted, "d") == 2
    run(counted, base.format(opts="--deps data.csv --seed 7"))
    assert executions(counted, "d") == 3
    run(counted, base.format(opts="--deps data.csv --seed 7 --salt v2"))
    assert executions(counted, "d") == 4
    run(counted, base.format(opts="--deps data.csv --seed 7 --salt v2"))
    assert executions(counted, "d") == 4


def test_force_executes_and_rerecords(counted: InteractiveShell) -> None:
    cell = "%%checkpoint f {opt}--ignore runs\nruns.append('f')\ny = 1\n"
    run(counted, cell.format(opt=""))
    run(counted, cell.format(opt="--force "))
    run(counted, cell.format(opt=""))
    assert executions(counted, "f") == 2


def test_explain_names_the_changed_input(
    shell: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    shell.user_ns.update(lr=0.1, epochs=3)
    cell = "%%checkpoint train --explain\nscore = lr * epochs\n"
    run(shell, cell)
    assert "no earlier checkpoint" in capsys.readouterr().err
    shell.user_ns["lr"] = 0.2
    run(shell, cell)
    err = capsys.readouterr().err
    assert "input 'lr' changed" in err and "epochs" not in err.split("executes:")[1]
    run(shell, cell.replace("lr * epochs", "lr * epochs + 1"))
    assert "the cell's code changed" in capsys.readouterr().err


def test_inplace_mutations_are_restored(shell: InteractiveShell) -> None:
    import pandas as pd

    def setup() -> None:
        shell.user_ns.update(
            lst=[1, 2],
            arr=np.arange(4.0),
            df=pd.DataFrame({"a": [1, 2, 3]}),
        )

    cell = "%%checkpoint mut\nlst.append(3)\narr *= 2\ndf['c'] = df['a'] * 10\n"
    setup()
    run(shell, cell)
    setup()
    run(shell, cell)
    assert shell.last_execution_succeeded
    assert shell.user_ns["lst"] == [1, 2, 3]
    np.testing.assert_array_equal(shell.user_ns["arr"], np.arange(4.0) * 2)
    assert list(shell.user_ns["df"]["c"]) == [10, 20, 30]
    manifest = Store(Path("store")).manifests()[-1]
    # ``arr *= 2`` rebinds arr, so it is an ordinary output; the others were changed in place.
    assert set(manifest.info["mutated"]) == {"lst", "df"}
    assert {"lst", "arr", "df"} <= set(manifest.info["outputs"])


def test_a_change_through_one_of_two_names_changes_both(shell: InteractiveShell) -> None:
    # One object under two names is digested once per key and once after the run: the
    # change made through one name must still show in both, and in the next key.
    shell.user_ns.update(a=[1], b=None)
    shell.user_ns["b"] = shell.user_ns["a"]
    cell = "%%checkpoint alias\nb.append(len(a))\ntotal = sum(a) + sum(b)\n"
    run(shell, cell)
    manifest = Store(Path("store")).manifests()[-1]
    assert set(manifest.info["mutated"]) == {"a", "b"}
    digests = manifest.info["output_digests"]
    assert digests["a"] == digests["b"] == fingerprint([1, 1]).hex()
    assert manifest.info["key_parts"]["input:a"] == manifest.info["key_parts"]["input:b"]
    assert manifest.info["key_parts"]["input:a"] == fingerprint([1]).hex()
    run(shell, cell)  # [1, 1] now: a new key, so the cell executes again
    assert shell.user_ns["a"] == [1, 1, 2] and shell.user_ns["total"] == 8


def test_deletions_are_applied_on_hit(shell: InteractiveShell) -> None:
    cell = "%%checkpoint deleting\ntmp = 1\nkeep = tmp + 1\ndel tmp\n"
    run(shell, cell)
    shell.user_ns["tmp"] = "stale"
    forget(shell, "keep")
    run(shell, cell)
    assert "tmp" not in shell.user_ns and shell.user_ns["keep"] == 2


def test_cell_that_raises_stores_nothing(shell: InteractiveShell) -> None:
    result = shell.run_cell("%%checkpoint boom\nz = 1\nraise ValueError('bad input 17')\n")
    assert isinstance(result.error_in_exec, ValueError)
    assert str(result.error_in_exec) == "bad input 17"
    assert Store("store").manifests() == []


def test_unpicklable_output_is_named_and_cell_reruns(
    counted: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    cell = "%%checkpoint gen --ignore runs\nruns.append('gen')\nimport threading\ng = (i for i in range(3))\nlock = threading.Lock()\nok = 5\n"
    run(counted, cell)
    err = capsys.readouterr().err
    assert "'g'" in err and "'lock'" in err and "incomplete" in err
    assert counted.user_ns["ok"] == 5 and isinstance(
        counted.user_ns["lock"], type(threading.Lock())
    )
    run(counted, cell)
    assert executions(counted, "gen") == 2


def test_rng_draws_after_a_hit_match_an_execution(shell: InteractiveShell) -> None:
    cell = "%%checkpoint draw\nimport random\nimport numpy as np\na = np.random.rand(3)\nb = random.random()\n"
    after = "nxt = (np.random.rand(2).tolist(), random.random())"
    run(shell, cell)
    run(shell, after)
    executed = (shell.user_ns["a"].tolist(), shell.user_ns["b"], shell.user_ns["nxt"])
    shell.run_cell("np.random.seed(999); random.seed(999)")
    run(shell, cell)
    run(shell, after)
    restored = (shell.user_ns["a"].tolist(), shell.user_ns["b"], shell.user_ns["nxt"])
    assert executed == restored


def test_seed_option_makes_draws_reproducible(shell: InteractiveShell) -> None:
    run(shell, "%%checkpoint s1 --seed 5\nimport numpy as np\nv = np.random.rand()")
    first = shell.user_ns["v"]
    run(shell, "%%checkpoint s2 --seed 5\nimport numpy as np\nv = np.random.rand()")
    assert shell.user_ns["v"] == first == np.random.RandomState(5).rand()


def test_no_seed_leaves_generators_alone(shell: InteractiveShell) -> None:
    run(shell, "import numpy as np\nnp.random.seed(11)")
    run(shell, "%%checkpoint ns --no-seed\nv = np.random.rand()")
    assert shell.user_ns["v"] == np.random.RandomState(11).rand()


def test_files_option_restores_written_files(shell: InteractiveShell, isolated: Path) -> None:
    cell = "%%checkpoint writer --files out/result.txt\nimport os\nos.makedirs('out', exist_ok=True)\nopen('out/result.txt', 'w').write('hello')\n"
    run(shell, cell)
    (isolated / "out" / "result.txt").unlink()
    run(shell, cell)
    assert (isolated / "out" / "result.txt").read_text() == "hello"


def test_outputs_option_stores_only_named(shell: InteractiveShell) -> None:
    cell = "%%checkpoint only --outputs keep\nkeep = 1\nscratch = 2\n"
    run(shell, cell)
    forget(shell, "keep", "scratch")
    run(shell, cell)
    assert shell.user_ns["keep"] == 1 and "scratch" not in shell.user_ns


@pytest.mark.parametrize(
    ("line", "fragment"),
    [
        ("%%checkpoint", "CELL_ID"),
        ("%%checkpoint a --seed x", "--seed"),
        ("%%checkpoint a --seed 1 --no-seed", "either --seed"),
        ("%%checkpoint a --inputs 1x", "not a variable name"),
        ("%%checkpoint a --bogus", "unrecognized"),
    ],
)
def test_misuse_is_a_one_line_usage_error(
    shell: InteractiveShell, line: str, fragment: str
) -> None:
    with pytest.raises(UsageError, match=fragment.replace("-", r"\-")) as info:
        shell.run_cell_magic("checkpoint", line.removeprefix("%%checkpoint").strip(), "x = 1")
    assert "\n" not in str(info.value).strip()


def test_help_lists_every_option(shell: InteractiveShell) -> None:
    doc = shell.find_cell_magic("checkpoint").__doc__ or ""
    for option in (
        "--force",
        "--inputs",
        "--ignore",
        "--outputs",
        "--deps",
        "--files",
        "--seed",
        "--no-seed",
        "--salt",
        "--explain",
        "--quiet",
    ):
        assert option in doc


def test_loading_twice_is_harmless(shell: InteractiveShell) -> None:
    shell.run_line_magic("load_ext", "ipy_resume")
    shell.run_line_magic("reload_ext", "ipy_resume")
    assert run(shell, "%%checkpoint twice\n3") == 3


def test_line_magic_list_and_show(
    shell: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    run(shell, "%%checkpoint listed\nvalue = 1")
    capsys.readouterr()
    shell.run_line_magic("checkpoint", "list")
    assert "listed" in capsys.readouterr().out
    shell.run_line_magic("checkpoint", "show listed")
    shown = capsys.readouterr().out
    assert "cell 'listed'" in shown and re.search(r"^\s+value\s+int\b", shown, re.M)
    with pytest.raises(UsageError, match="no checkpoint matches"):
        shell.run_line_magic("checkpoint", "show nothing-like-this")


def test_the_magic_line_expands_variables_as_ipython_does(
    shell: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    # (ipy_resume expands the line itself, and only when it has "$", "{" or "}")
    shell.user_ns.update(lr=0.5, tag="sweep")
    run(shell, "%%checkpoint train_{lr * 2} --salt $tag\nw = lr")
    run(shell, "%%checkpoint train_1.0 --salt sweep\nw = lr")
    err = capsys.readouterr().err
    assert "executed 'train_1.0'" in err and "restored 'train_1.0'" in err
    # a literal brace pair that is not an expression is left as IPython leaves it
    run(shell, "%%checkpoint plain --salt a}b\nv = 1")
    assert "executed 'plain'" in capsys.readouterr().err
    # and in a function, its locals count as in IPython's own expansion
    run(shell, "def f():\n    n = 3\n    %checkpoint show train_{n - 2}.0\nf()")
    assert "cell 'train_1.0'" in capsys.readouterr().out


def test_unfingerprintable_input_always_executes(
    counted: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    counted.user_ns["gen"] = (i for i in range(3))
    cell = "%%checkpoint un --ignore runs\nruns.append('un')\nfirst = next(gen)\n"
    run(counted, cell)
    run(counted, cell)
    assert executions(counted, "un") == 2
    assert "'gen' cannot be fingerprinted" in capsys.readouterr().err


def test_editing_a_local_helper_module_executes_again(
    counted: InteractiveShell, isolated: Path
) -> None:
    import importlib
    import sys

    (isolated / "helpers_for_test.py").write_text("def f(v):\n    return v + 1\n")
    sys.path.insert(0, str(isolated))
    try:
        run(counted, "import helpers_for_test")
        cell = counting_cell("local", "y = helpers_for_test.f(1)", "--ignore runs")
        run(counted, cell)
        run(counted, cell)
        assert executions(counted, "local") == 1
        (isolated / "helpers_for_test.py").write_text("def f(v):\n    return v + 100\n")
        importlib.reload(sys.modules["helpers_for_test"])
        run(counted, cell)
        assert executions(counted, "local") == 2 and counted.user_ns["y"] == 101
    finally:
        sys.path.remove(str(isolated))
        sys.modules.pop("helpers_for_test", None)


def test_a_restore_stopped_by_a_damaged_blob_says_the_kernel_is_unchanged(
    shell: InteractiveShell, isolated: Path
) -> None:
    from IPython.core.error import UsageError

    shell.run_cell("%%checkpoint big\nimport numpy as np\nbig = np.arange(200_000.0)")
    shell.run_cell("big = 'changed since'")
    store = isolated / "store"  # ($IPY_RESUME_DIR of the isolated fixture)
    blob = max(
        (p for p in (store / "objects").rglob("*") if p.is_file()), key=lambda p: p.stat().st_size
    )
    data = bytearray(blob.read_bytes())
    data[len(data) // 2] ^= 0xFF
    blob.write_bytes(bytes(data))
    for magic, line in [("resume", ""), ("checkpoint", "restore big")]:
        with pytest.raises(UsageError) as raised:
            shell.run_line_magic(magic, line)
        said = str(raised.value)
        # a restore runs no cell: the line must not promise one, and must say what happened
        assert "execute again" not in said and "recomputed" not in said, said
        assert "Nothing was restored: the kernel is as it was;" in said, said
        assert shell.user_ns["big"] == "changed since"


def _twice(probe: str, isolated: Path) -> list[tuple[Any, str]]:
    """Run *probe* in two fresh interpreters one after the other (the second finds the
    store the first made): what each printed last, as JSON, and its stderr."""
    import json
    import subprocess
    import sys

    from conftest import subprocess_env

    runs = []
    for _ in range(2):
        out = subprocess.run(
            [sys.executable, "-c", probe],
            env=subprocess_env(isolated),
            capture_output=True,
            text=True,
            timeout=120,
            cwd=isolated,
        )
        assert out.returncode == 0, out.stderr
        runs.append((json.loads(out.stdout.strip().splitlines()[-1]), out.stderr))
    return runs


_RESULT_PROBE = """
import json
from IPython.core.interactiveshell import InteractiveShell
sh = InteractiveShell.instance()
sh.run_line_magic("load_ext", "ipy_resume")
seen = []
for cell in {cells!r}:
    assert sh.run_cell(cell).success
    ns = sh.user_ns
    seen.append([ns["_"] is ns.get("box"), ns["_"] is ns.get("items"), ns["_"]])
print(json.dumps(seen))
"""


def test_a_result_that_is_a_stored_value_is_that_value_after_a_restore(isolated: Path) -> None:
    # ``box`` is the first cell's value and its result: stored once, in the group, so that
    # ``_`` restored is ``box``.  The second cell's result is a new list: a pickle of its own.
    # Both runs are fresh interpreters (the display settings a result's key reads are theirs).
    cells = [
        "%%checkpoint boxed\nbox = {'items': [1, 2]}\nbox",
        "%%checkpoint part\nitems = list(box['items'])\nsorted(items, reverse=True)",
    ]
    runs = _twice(_RESULT_PROBE.format(cells=cells), isolated)
    store = Store(isolated / "store")
    boxed = store.history("boxed")[-1]
    assert boxed.extras["result"] == boxed.values["box"]  # one place in one group
    part = store.history("part")[-1]
    assert part.extras["result"] != part.values["items"]
    (executed, _), (restored, said) = runs
    assert "restored 'boxed'" in said and "restored 'part'" in said
    assert executed == restored == [[True, False, {"items": [1, 2]}], [False, False, [2, 1]]]


_WARM_PROBE = """
import json, os
from IPython.core.interactiveshell import InteractiveShell
sh = InteractiveShell.instance()
sh.run_line_magic("load_ext", "ipy_resume")
magics = sh._ipy_resume_magics
warming = magics._warming
opened = None
if warming is not None:
    warming.join(60)
    engines = list(magics.engines._by_key.values())
    opened = [e.journal._conn is not None for e in engines]
    # the options' defaults parsed, and (with a store) the journal's writer thread waiting
    from ipy_resume.store import journal as journal_module
    opened += [magics._switches is not None, journal_module._helper is not None]
from ipy_resume.store.signing import default_key_path
made = [os.path.isdir(os.environ["IPY_RESUME_DIR"]), default_key_path().exists()]
assert sh.run_cell("%%checkpoint warm\\nx = sum(range(10))").success
print(json.dumps([warming is not None, made, opened, magics.engines._by_key and
                  list(magics.engines._by_key.values())[0] is magics.engine(), sh.user_ns["x"]]))
"""


def test_the_first_cell_finds_its_store_and_journal_opened_when_the_store_exists(
    isolated: Path,
) -> None:
    runs = _twice(_WARM_PROBE, isolated)
    (first, said_first), (second, said_second) = runs
    # no store yet: no store opened, and neither a store nor a key made before the first
    # checkpoint
    assert first == [True, [False, False], [True, False], True, 45]
    assert "restored" not in said_first
    # a store: opened, with its journal, by the time the first cell asks; the cell restores
    assert second == [True, [True, True], [True, True, True], True, 45]
    assert "restored 'warm'" in said_second
