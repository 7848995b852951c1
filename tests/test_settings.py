"""Library settings a restored cell made are re-applied (cross-process)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_cross_process import run_process

from ipy_resume.runtime import settings

SETUP = """%%checkpoint setup
import os, warnings
import numpy as np, pandas as pd
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
import seaborn as sns
sns.set_theme(style="whitegrid")
plt.rcParams["figure.dpi"] = 50
pd.set_option("display.max_rows", 7)
np.set_printoptions(precision=3)
warnings.simplefilter("ignore", FutureWarning)
os.environ["MY_FLAG"] = "1"
"""
PLOT = """import io, hashlib
fig, ax = plt.subplots(figsize=(3, 2))
ax.plot([1, 3, 2]); ax.set_title("t")
buf = io.BytesIO(); fig.savefig(buf, format="png")
png = hashlib.sha256(buf.getvalue()).hexdigest()
"""
CHECKS = {
    "png": "png",
    "dpi": "plt.rcParams['figure.dpi']",
    "grid": "plt.rcParams['axes.grid']",
    "rows": "pd.get_option('display.max_rows')",
    "precision": "np.get_printoptions()['precision']",
    "ignored": "any(f[0] == 'ignore' and f[2] is FutureWarning for f in warnings.filters)",
    "flag": "os.environ.get('MY_FLAG')",
}


def test_settings_of_a_restored_cell_are_re_applied(tmp_path: Path) -> None:
    pytest.importorskip("seaborn")
    first = run_process(tmp_path, [SETUP, PLOT], CHECKS)
    assert first["cells"][1]["error"] is None, first["cells"][1]
    second = run_process(tmp_path, [SETUP, PLOT], CHECKS)
    assert "restored 'setup'" in second["cells"][0]["stderr"], second["cells"][0]
    assert second["eval"] == first["eval"]
    assert first["eval"]["rows"] == "7" and first["eval"]["flag"] == "'1'"


DRAW = """%%checkpoint draw
import io, hashlib
fig2, ax2 = plt.subplots(figsize=(3, 2)); ax2.plot([1, 2])
buf2 = io.BytesIO(); fig2.savefig(buf2, format="png"); png2 = hashlib.sha256(buf2.getvalue()).hexdigest()
"""


def test_a_drawing_cell_misses_when_the_style_changes(tmp_path: Path) -> None:
    pytest.importorskip("seaborn")
    run_process(tmp_path, [SETUP, DRAW], {})
    same = run_process(tmp_path, [SETUP, DRAW], {})
    assert "restored 'draw'" in same["cells"][1]["stderr"]
    restyled = run_process(
        tmp_path,
        [
            SETUP,
            "plt.rcParams['lines.linewidth'] = 4",
            DRAW.replace("draw\n", "draw --explain\n", 1),
        ],
        {},
    )
    err = restyled["cells"][2]["stderr"]
    assert "executed 'draw'" in err and "matplotlib's settings changed" in err, err


SHOWN_BEFORE = "import numpy as np, pandas as pd\nimport matplotlib\nmatplotlib.use('Agg')\nimport matplotlib.pyplot as plt\n"
SHOWING = {
    # what the cell prints or keeps depends on a setting no input of it holds
    "numpy": ("np.set_printoptions(precision=2)", "%%checkpoint p\nprint(np.array([1.23456789]))"),
    "pandas": (
        "pd.set_option('display.precision', 2)",
        "%%checkpoint p\npd.DataFrame({'x': [1.23456789]})",
    ),
    "matplotlib": (
        "plt.style.use('dark_background')",
        "%%checkpoint p\nimport matplotlib.pyplot as plt\nfig = plt.figure(); ax = fig.add_subplot()\n"
        "face = tuple(ax.get_facecolor())",
    ),
}


@pytest.mark.parametrize("library", sorted(SHOWING))
def test_a_cell_that_showed_something_misses_when_the_settings_it_showed_under_change(
    tmp_path: Path, library: str
) -> None:
    change, cell = SHOWING[library]
    first = run_process(tmp_path, [SHOWN_BEFORE, cell], {})
    assert "executed 'p'" in first["cells"][1]["stderr"], first["cells"][1]
    again = run_process(tmp_path, [SHOWN_BEFORE, cell], {})
    assert "restored 'p'" in again["cells"][1]["stderr"], again["cells"][1]
    changed = run_process(
        tmp_path, [SHOWN_BEFORE + change, cell], {"face": "face"} if library == "matplotlib" else {}
    )
    err = changed["cells"][1]["stderr"]
    assert "executes:" in err and "changed since checkpoint" in err, err
    assert "executed 'p'" in err, err
    shown = changed["cells"][1]["stdout"] + json.dumps(changed["cells"][1]["displays"])
    shown += str(changed["cells"][1]["result"])
    if library == "numpy":
        assert "[1.23]" in shown, shown
    elif library == "pandas":
        assert "1.23" in shown and "1.234568" not in shown, shown
    else:  # the value the cell kept is the new style's, not the old one's
        assert changed["eval"]["face"] == "(0.0, 0.0, 0.0, 1.0)", changed["eval"]
    back = run_process(tmp_path, [SHOWN_BEFORE, cell], {})  # the first settings again
    assert "restored 'p'" in back["cells"][1]["stderr"], back["cells"][1]


def test_formatters_that_are_functions_are_the_same_setting_in_the_next_process(
    tmp_path: Path,
) -> None:
    # a function's repr holds its address: the same formatter must not look changed
    header = SHOWN_BEFORE + (
        "pd.options.display.float_format = '{:.2f}'.format\n"
        "np.set_printoptions(formatter={'float': lambda v: f'<{v:.1f}>'})\n"
    )
    cell = "%%checkpoint f\nprint(np.array([1.25]))\npd.Series([1.25])"
    first = run_process(tmp_path, [header, cell], {})
    assert "<1.2>" in first["cells"][1]["stdout"], first["cells"][1]
    again = run_process(tmp_path, [header, cell], {})
    assert "restored 'f'" in again["cells"][1]["stderr"], again["cells"][1]
    other = run_process(tmp_path, [header.replace("{:.2f}", "{:.3f}"), cell], {})
    assert "executed 'f'" in other["cells"][1]["stderr"], other["cells"][1]
    assert "1.250" in str(other["cells"][1]["result"]), other["cells"][1]


def test_a_silent_cell_still_restores_after_display_settings_change(tmp_path: Path) -> None:
    # what nothing shows cannot be stale: a training cell must not rerun for a precision
    cell = "%%checkpoint quiet\nimport numpy as np\nw = np.arange(3.0) / 3"
    run_process(tmp_path, [SHOWN_BEFORE, cell], {})
    later = run_process(
        tmp_path,
        [
            SHOWN_BEFORE
            + "np.set_printoptions(precision=1)\npd.set_option('display.precision', 1)",
            cell,
        ],
        {},
    )
    assert "restored 'quiet'" in later["cells"][1]["stderr"], later["cells"][1]


def test_changes_and_merge_in_process() -> None:
    import os
    import sys

    before = settings.snapshot()
    os.environ["IPY_RESUME_TEST_FLAG"] = "x"
    sys.path.insert(0, "/nonexistent-ipy-resume")
    try:
        diff = settings.changes(before, settings.snapshot())
    finally:
        del os.environ["IPY_RESUME_TEST_FLAG"]
        sys.path.remove("/nonexistent-ipy-resume")
    assert diff["environ"] == {"set": {"IPY_RESUME_TEST_FLAG": "x"}, "unset": []}
    assert diff["sys.path"]["added"] == [(0, "/nonexistent-ipy-resume")]
    assert settings.apply(diff) == []
    try:
        assert (
            os.environ["IPY_RESUME_TEST_FLAG"] == "x" and sys.path[0] == "/nonexistent-ipy-resume"
        )
    finally:
        del os.environ["IPY_RESUME_TEST_FLAG"]
        sys.path.remove("/nonexistent-ipy-resume")
    later = {"environ": {"set": {}, "unset": ["IPY_RESUME_TEST_FLAG"]}}
    merged = settings.merge(diff, later)
    assert merged["environ"] == {"set": {}, "unset": ["IPY_RESUME_TEST_FLAG"]}


def test_an_unchanged_rcparams_snapshot_is_the_last_one_and_a_change_is_seen() -> None:
    import matplotlib

    name = "matplotlib.rcParams"
    first = settings.snapshot()[name]
    again = settings.snapshot()[name]
    assert again is first  # nothing changed: the last copy stands, and diffs to nothing
    assert settings.changes({name: first}, {name: again}) == {}
    old = matplotlib.rcParams["lines.linewidth"]
    try:
        matplotlib.rcParams["lines.linewidth"] = old + 1.0
        changed = settings.snapshot()[name]
        assert changed is not first and changed["lines.linewidth"] == old + 1.0
        diff = settings.changes({name: first}, {name: changed})
        assert diff[name] == {"set": {"lines.linewidth": old + 1.0}, "unset": []}
        # a raw write (no validation) is seen too
        dict.__setitem__(matplotlib.rcParams, "lines.linewidth", old + 2.0)
        assert settings.snapshot()[name]["lines.linewidth"] == old + 2.0
    finally:
        matplotlib.rcParams["lines.linewidth"] = old
    assert settings.snapshot()[name]["lines.linewidth"] == old
    assert first["lines.linewidth"] == old  # (a snapshot handed out is never changed)


def test_importing_a_library_records_only_what_the_cell_set(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A cell that imports pandas left its options at their defaults: nothing to re-apply,
    so a restore does not set every option (one of which imports matplotlib)."""
    cells = [
        "import sys",
        "%%checkpoint frame\nimport pandas as pd\npd.set_option('display.max_rows', 7)\n"
        "df = pd.DataFrame({'a': [1]})",
    ]
    evals = {"mpl": "'matplotlib' in sys.modules", "rows": "pd.get_option('display.max_rows')"}
    first = run_process(tmp_path, cells, evals)
    second = run_process(tmp_path, cells, evals)
    assert "restored 'frame'" in second["cells"][1]["stderr"]
    assert first["eval"] == second["eval"] == {"mpl": "False", "rows": "7"}
    from ipy_resume.store import Store

    monkeypatch.setenv("JUPYTER_DATA_DIR", str(tmp_path / "jupyter-data"))  # the runs' key
    store = Store(tmp_path / "store")
    (manifest,) = store.history("frame")
    recorded = store.load_extras(manifest, names=["settings"])["settings"]
    assert recorded["pandas.options"] == {"set": {"display.max_rows": 7}, "unset": []}


def test_a_restored_backend_switch_leaves_rcparams_as_the_magic_did(tmp_path: Path) -> None:
    # `%matplotlib notebook` switches through pyplot; re-doing it with matplotlib.use set
    # rcParams' backend_fallback to False, so every later drawing cell missed after a
    # restart (Whirlwind Tour of Python, notebook 15).
    from kernel_utils import Kernel, kernel_env

    probe = "import matplotlib as m; print(m.rcParams['backend_fallback'], m.get_backend())"
    cells = ["%matplotlib notebook", "import matplotlib.pyplot as plt\nplt.style.use('ggplot')"]
    seen = []
    for _ in range(2):
        with Kernel(tmp_path, kernel_env(tmp_path)) as k:
            k.run("%load_ext ipy_resume")
            statuses = [k.run(f"%%checkpoint b{i}\n{c}").stderr for i, c in enumerate(cells)]
            seen.append((statuses, k.run(probe).stdout.strip()))
    (first, before), (second, after) = seen
    assert all("executed" in s for s in first), first
    assert all("restored" in s for s in second), second
    assert before == after, (before, after)
    assert after.startswith("True ")


SYMPY_SETUP = (
    "%%checkpoint setup\nfrom sympy import Symbol, init_printing\ninit_printing(use_latex='png')"
)
SYMPY_STATE = {
    "png": "__import__('sympy').printing.defaults.Printable._repr_png_ is not None",
    "plain": "get_ipython().display_formatter.formatters['text/plain'].type_printers[int].__name__",
}


def test_sympy_init_printing_comes_back_with_the_restored_cell(tmp_path: Path) -> None:
    # init_printing() registers printers with IPython's formatters and sets sympy's own
    # display methods: later expressions must print as pretty (and as PNG) after a restore
    pytest.importorskip("sympy")
    first = run_process(tmp_path, [SYMPY_SETUP], SYMPY_STATE)
    assert first["eval"]["png"] == "True", first
    second = run_process(tmp_path, [SYMPY_SETUP], SYMPY_STATE)
    assert "restored 'setup'" in second["cells"][0]["stderr"], second["cells"][0]
    assert second["eval"] == first["eval"]
