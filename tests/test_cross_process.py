"""What must survive a restart: a checkpoint made in one process, restored in another."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import subprocess_env

RUNNER = Path(__file__).with_name("shell_runner.py")


def run_process(
    tmp_path: Path, cells: list[str], evals: dict[str, str], **env: str
) -> dict[str, Any]:
    """Run *cells* in a fresh Python process sharing this test's store; return its report."""
    job = tmp_path / f"job-{len(list(tmp_path.glob('job-*')))}.json"
    job.write_text(json.dumps({"cells": cells, "eval": evals}))
    proc = subprocess.run(
        [sys.executable, str(RUNNER), str(job)],
        cwd=tmp_path,
        env=subprocess_env(tmp_path, **env),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    report: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return report


TRAIN = """%%checkpoint train
import numpy as np, random
from IPython.display import HTML, display
with open('side_effect.log', 'a') as fh:
    fh.write('ran\\n')
weights = np.random.rand(1000, 50)
noise = random.random()
print('trained', weights.shape)
display(HTML('<p>done</p>'))
{'loss': round(float(weights.mean()), 6)}
"""
AFTER = "nxt = (np.random.rand(3).tolist(), random.random())"


def test_restored_in_a_fresh_process_without_executing(tmp_path: Path) -> None:
    evals = {"w": "weights.sum()", "noise": "noise", "nxt": "nxt"}
    first = run_process(tmp_path, [TRAIN, AFTER], evals)
    second = run_process(tmp_path, [TRAIN, AFTER], evals)
    assert (tmp_path / "side_effect.log").read_text() == "ran\n"  # executed once only
    assert first["eval"] == second["eval"]
    one, two = first["cells"][0], second["cells"][0]
    assert one["error"] is None and two["error"] is None
    assert one["stdout"] == two["stdout"] and "trained (1000, 50)" in two["stdout"]
    assert one["displays"] == two["displays"] and "text/html" in two["displays"][0]
    assert one["result"] == two["result"]
    assert "restored 'train'" in two["stderr"]


SET_CELL = "%%checkpoint sets\nlabels = sorted(vocab) + sorted(counts)\nwith open('runs.log', 'a') as fh:\n    fh.write('x')\n"
SET_SETUP = (
    "vocab = {f'w{i}' for i in range(200)}\ncounts = {f'k{i}': {i, f's{i}'} for i in range(100)}"
)


def test_set_and_dict_inputs_hit_across_hash_seeds(tmp_path: Path) -> None:
    for seed in ("0", "1", "12345"):
        report = run_process(
            tmp_path, [SET_SETUP, SET_CELL], {"n": "len(labels)"}, PYTHONHASHSEED=seed
        )
        assert report["cells"][1]["error"] is None
    assert (tmp_path / "runs.log").read_text() == "x"


def test_store_under_another_key_is_not_trusted(tmp_path: Path) -> None:
    cell = "%%checkpoint k\nwith open('runs.log', 'a') as fh:\n    fh.write('x')\nv = 3"
    run_process(tmp_path, [cell], {})
    other = run_process(tmp_path, [cell], {"v": "v"}, JUPYTER_DATA_DIR=str(tmp_path / "other-key"))
    assert (tmp_path / "runs.log").read_text() == "xx"
    assert other["eval"]["v"] == "3"
    assert "trust" in other["cells"][0]["stderr"]
    # The foreign save does not hide the owner's own checkpoint from the owner.
    again = run_process(tmp_path, [cell], {"v": "v"})
    assert (tmp_path / "runs.log").read_text() == "xx", again["cells"][0]["stderr"]


@pytest.mark.slow
def test_one_gigabyte_array_without_an_extra_copy(tmp_path: Path) -> None:
    # Peak RSS of a process holding a 1 GB input and a 1 GB output: hashing or saving
    # through a copy would add another gigabyte.
    gib = 1 << 30
    setup = "import numpy as np, resource\na = np.ones(2**27)\n"  # 1 GiB of float64
    cell = "%%checkpoint big --quiet\nb = a + 1.0\n"
    peak = "resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024"
    first = run_process(tmp_path, [setup, cell], {"peak": peak, "b0": "float(b[0])"})
    second = run_process(tmp_path, [setup, cell], {"peak": peak, "b0": "float(b[-1])"})
    assert first["cells"][1]["error"] is None and second["eval"]["b0"] == "2.0"
    for report in (first, second):
        assert int(report["eval"]["peak"]) < 2 * gib + 400 * (1 << 20), report["eval"]["peak"]


CHAIN = [
    "%%checkpoint defs\nopen('ran.log', 'a').write('defs ')\n"
    "import pandas as pd\n"
    "def scale(v, k=2):\n    return v * k\n"
    "class Model:\n    def __init__(self, w):\n        self.w = w\n    def predict(self, x):\n        return scale(x, self.w)\n"
    "model = Model(3)\nframe = pd.DataFrame({'a': [1, 2, 3], 'b': ['x', 'y', 'z']})",
    "%%checkpoint use\nopen('ran.log', 'a').write('use ')\npreds = [model.predict(v) for v in frame['a']]\nlabels = set(frame['b'])",
    "%%checkpoint last\nopen('ran.log', 'a').write('last ')\nresult = sum(preds) + len(labels) + scale(1)",
]


def test_run_all_after_restart_restores_a_chain_of_cells(tmp_path: Path) -> None:
    # Functions and classes restored from a checkpoint must fingerprint like the originals,
    # or every cell after the first would execute again.
    first = run_process(tmp_path, CHAIN, {"r": "result"})
    second = run_process(tmp_path, CHAIN, {"r": "result", "p": "model.predict(5)"})
    assert first["eval"]["r"] == second["eval"]["r"] == "23"
    assert second["eval"]["p"] == "15"
    assert (tmp_path / "ran.log").read_text() == "defs use last "
    assert all("restored" in cell["stderr"] for cell in second["cells"])


GROUPBY = [
    "import numpy as np, pandas as pd\n"
    "df = pd.DataFrame({'key': ['a', 'a', None, 'b'], 'data': np.arange(4.0)})",
    "%%checkpoint group\ngrouped = df['data'].groupby(df['key'])\ngrouped",
    "%%checkpoint means\nmeans = grouped.mean().tolist()",
]


def test_a_saved_groupby_is_left_as_it_was_so_the_next_cell_hits_after_a_restart(
    tmp_path: Path,
) -> None:
    # Saving 'group' used to ask the GroupBy for its dtype (for the timeline's summary),
    # which computed every group and filled its caches: its fingerprint then differed from
    # the restored one's, and 'means' executed in every fresh kernel.
    first = run_process(tmp_path, GROUPBY, {"m": "means"})
    second = run_process(tmp_path, GROUPBY, {"m": "means"})
    assert first["eval"] == second["eval"] == {"m": "[0.5, 3.0]"}
    statuses = [cell["stderr"] for cell in second["cells"][1:]]
    assert all("restored" in status for status in statuses), statuses


DYNAMIC = [
    "x = 1\na = [1]; b = [2]; c = [3]",
    "%%checkpoint ex\nexec('y = x + 1')",
    "%%checkpoint gl\nglobals()['z'] = x * 10",
    "%%checkpoint dl\n%xdel b\nglobals().pop('c')\ndel a",
]
DYNAMIC_STATE = {"y": "y", "z": "z", "gone": "[n for n in 'abc' if n not in globals()]"}


def test_names_bound_or_deleted_without_an_assignment_or_del_come_back(tmp_path: Path) -> None:
    first = run_process(tmp_path, DYNAMIC, DYNAMIC_STATE)
    assert first["eval"] == {"y": "2", "z": "10", "gone": "['a', 'b', 'c']"}
    again = run_process(tmp_path, DYNAMIC, DYNAMIC_STATE)
    for cell in again["cells"][1:]:
        assert "restored" in cell["stderr"], cell
    assert again["eval"] == first["eval"]
    changed = run_process(tmp_path, ["x = 2" + DYNAMIC[0][5:], *DYNAMIC[1:]], DYNAMIC_STATE)
    assert changed["eval"] == {"y": "3", "z": "20", "gone": "['a', 'b', 'c']"}  # never stale


def test_a_restored_reset_selective_deletes_what_running_it_would(tmp_path: Path) -> None:
    # what %reset_selective deletes depends on the namespace: another namespace, another key
    cell = "%%checkpoint tidy\n%reset_selective -f ^tmp"
    left = {"left": "sorted(n for n in globals() if n.startswith('tmp'))"}
    run_process(tmp_path, ["tmp1 = 1", cell], left)
    same = run_process(tmp_path, ["tmp1 = 1", cell], left)
    assert "restored 'tidy'" in same["cells"][1]["stderr"] and same["eval"]["left"] == "[]"
    other = run_process(tmp_path, ["tmp1 = 1\ntmp2 = 2", cell], left)
    assert "executed 'tidy'" in other["cells"][1]["stderr"], other["cells"][1]
    assert other["eval"]["left"] == "[]"
