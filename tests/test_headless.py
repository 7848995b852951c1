"""``ipy-resume run`` and ``papermill --engine ipy_resume``: batch runs that resume."""

from __future__ import annotations

import hashlib
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import nbformat
import pytest
from conftest import subprocess_env
from deadlines import wait_until
from kernel_utils import Kernel, kernel_env

from ipy_resume.frontends import headless

HANG_AT = 15  # the code cell (1-based) that hangs, or sleeps past the timeout, on request


def make_notebook(path: Path) -> None:
    """20 code cells: parameters, random draws, a DataFrame, a plot, a side-effect log."""
    v4 = nbformat.v4

    def logged(n: int, body: str) -> str:
        return f"open('side.log', 'a').write('{n}\\n')\n{body}"

    code = [
        "alpha = 0.1\nrows = 50\nlabel = 'run'",
        "import os, time\nimport numpy as np, pandas as pd\nimport matplotlib\n"
        "matplotlib.use('Agg')\nimport matplotlib.pyplot as plt",
        "noise = np.random.rand(rows)",
        "df = pd.DataFrame({'x': np.arange(rows), 'noise': noise})\ndf.head(3)",
        "scaled = df['noise'] * alpha",
        "total = float(scaled.sum())\nprint(f'total {total:.6f}')",
        "draws = np.random.rand(3)\ndraws",
        "df['y'] = df['x'] * 2\ndf.shape",
        "means = df.mean()\nprint(means.round(4).to_dict())",
        "tag = label.upper()\ntag",
        "counts = {'n': rows}\ncounts",
        "squares = [i * i for i in range(rows)]\nlen(squares)",
        "fig, ax = plt.subplots()\nax.plot(df['x'], df['noise'])\nfig.savefig('plot.png')\n"
        "plt.close(fig)\nprint('plotted')",
        "extra = np.random.rand(2)\nprint(extra.round(6).tolist())",
        "if os.path.exists('hang'):\n    open('hang.pid', 'w').write(str(os.getpid()))\n"
        "    time.sleep(600)\nif os.path.exists('slow'):\n    time.sleep(30)\nafter_hang = total * 2",
        "combined = after_hang + float(draws.sum())\nprint(round(combined, 6))",
        "summary = df.describe().round(4)\nsummary",
        "more = np.random.rand(4)\nmore.round(6).tolist()",
        "final = {'total': round(total, 6), 'tag': tag, 'combined': round(combined, 6)}\nfinal",
        "print(final, round(float(more.sum()), 6))",
    ]
    cells = [v4.new_code_cell(logged(n, body)) for n, body in enumerate(code, start=1)]
    cells[0] = v4.new_code_cell(code[0])  # the parameters cell has no side effect
    cells[0].metadata["tags"] = ["parameters"]
    for n, cell in enumerate(cells, start=1):
        cell.id = f"cell-{n}"  # the same file, run twice: the same ids
    nb = v4.new_notebook(cells=[v4.new_markdown_cell("# A batch notebook"), *cells])
    nb.cells[0].id = "intro"
    nb.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    nbformat.write(nb, path)


def cli(folder: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "ipy_resume.frontends.cli",
            "run",
            "nb.ipynb",
            "-o",
            "out.ipynb",
            *args,
        ],
        cwd=folder,
        env=subprocess_env(folder, MPLBACKEND="Agg"),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def logged(folder: Path) -> list[int]:
    path = folder / "side.log"
    return [int(x) for x in path.read_text().split()] if path.exists() else []


def outputs(path: Path) -> list[list[dict[str, Any]]]:
    """Every code cell's outputs as compared: text exact, images by the hash of their bytes,
    a stream's consecutive chunks joined (where a kernel cuts its text depends on when its
    I/O thread flushes: ``print(a, b)`` arrives as one message or two)."""
    nb = nbformat.read(path, as_version=4)
    out = []
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        shown = []
        for o in cell.outputs:
            item: dict[str, Any] = {"type": o.output_type}
            if o.output_type == "stream":
                last = shown[-1] if shown else {}
                if last.get("type") == "stream" and o.name in last:
                    last[o.name] += o.text
                    continue
                item[o.name] = o.text
            elif "data" in o:
                item.update(
                    {
                        mime: hashlib.sha256(str(v).encode()).hexdigest()
                        if mime.startswith("image/")
                        else v
                        for mime, v in o.data.items()
                    }
                )
            else:
                item["error"] = o.get("ename")
            shown.append(item)
        out.append(shown)
    return out


def outcomes(stdout: str) -> dict[int, str]:
    """Per code cell (1-based), what the progress lines said happened."""
    found = {}
    for line in stdout.splitlines():
        if line.startswith("[") and "/" in line.split()[0]:
            number = int(line.split("]")[0][1:].split("/")[0])
            found[number] = line.split("]")[1].split()[0]
    return found


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An empty store whose copies share one base seed: default-seeded draws then match
    between an interrupted run and the uninterrupted one it is compared with."""
    from ipy_resume.store import Store

    root = tmp_path_factory.mktemp("template") / "store"
    assert Store(root).seed_base  # writes store.json with the base seed
    return root


def prepare(folder: Path, template: Path) -> None:
    make_notebook(folder / "nb.ipynb")
    shutil.copytree(template, folder / "store")


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory: pytest.TempPathFactory, template: Path) -> Path:
    folder = tmp_path_factory.mktemp("uninterrupted")
    prepare(folder, template)
    done = cli(folder)
    assert done.returncode == 0, done.stderr
    assert logged(folder) == list(range(2, 21))
    return folder


def pid_in(path: Path, seconds: float = 120) -> int:
    """The pid a hanging cell writes to *path*, once the file holds it (it is created first)."""
    text = wait_until(
        lambda: path.exists() and path.read_text().strip(), seconds, what=f"a pid in {path.name}"
    )
    return int(text)


def killed_in_cell_15(folder: Path, *command: str) -> subprocess.CompletedProcess[str]:
    """Run *command* until cell 15 hangs, SIGKILL the kernel there; the finished run."""
    (folder / "hang").touch()
    proc = subprocess.Popen(
        [sys.executable, "-m", *command],
        cwd=folder,
        env=subprocess_env(folder, MPLBACKEND="Agg"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    os.kill(pid_in(folder / "hang.pid"), signal.SIGKILL)
    stdout, stderr = proc.communicate(timeout=120)
    (folder / "hang").unlink()
    assert proc.returncode != 0
    assert logged(folder) == list(range(2, HANG_AT + 1))
    return subprocess.CompletedProcess(command, proc.returncode, stdout, stderr)


def test_a_run_killed_in_cell_15_resumes_there(
    tmp_path: Path, uninterrupted: Path, template: Path
) -> None:
    prepare(tmp_path, template)
    killed = killed_in_cell_15(
        tmp_path, "ipy_resume.frontends.cli", "run", "nb.ipynb", "-o", "out.ipynb"
    )
    assert f"cell {HANG_AT} (" in killed.stderr and "the kernel died" in killed.stderr
    again = cli(tmp_path)
    assert again.returncode == 0, again.stderr
    assert logged(tmp_path) == list(range(2, HANG_AT + 1)) + list(range(HANG_AT, 21))
    seen = outcomes(again.stdout)
    assert all(seen[n] == "restored" for n in range(1, HANG_AT)), again.stdout
    assert all(seen[n] in ("executed", "incomplete") for n in range(HANG_AT, 21)), again.stdout
    assert outputs(tmp_path / "out.ipynb") == outputs(uninterrupted / "out.ipynb")
    assert (tmp_path / "plot.png").read_bytes() == (uninterrupted / "plot.png").read_bytes()


# alpha feeds `scaled` (cell 5), then total (6), after_hang (15), combined (16), final (19),
# and the last cell (20); nothing else reads them.
ALPHA_CELLS = {5, 6, 15, 16, 19, 20}


def test_a_changed_parameter_re_executes_only_what_depends_on_it(
    tmp_path: Path, uninterrupted: Path
) -> None:
    shutil.copytree(uninterrupted, tmp_path / "nb", dirs_exist_ok=True)
    folder = tmp_path / "nb"
    (folder / "side.log").unlink()
    changed = cli(folder, "-p", "alpha", "0.5")
    assert changed.returncode == 0, changed.stderr
    seen = outcomes(changed.stdout)
    # the injected cell takes position 2: cell N of the notebook is N + 1 here
    executed = {n - 1 for n, what in seen.items() if what == "executed" and n > 2}
    assert executed == ALPHA_CELLS, changed.stdout
    assert logged(folder) == sorted(ALPHA_CELLS)
    nb = nbformat.read(folder / "out.ipynb", as_version=4)
    injected = nb.cells[2]
    assert injected.metadata["tags"] == ["injected-parameters"]
    assert injected.source == "# Parameters\nalpha = 0.5\n"


def test_parameters_are_read_and_written_as_papermill_does() -> None:
    papermill = pytest.importorskip("papermill.parameterize")
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("a = 1")])
    nb.cells[0].metadata["tags"] = ["parameters"]
    values = {"a": "2", "b": "0.5", "c": "True", "d": "None", "e": "text 'q' \"x\""}
    ours = nbformat.from_dict(nb)
    headless.inject_parameters(ours, {k: headless.parse_value(v) for k, v in values.items()})
    from papermill.cli import _resolve_type

    for_papermill = nbformat.from_dict(nb)
    for_papermill.metadata["papermill"] = {}  # papermill's own runs add it first
    theirs = papermill.parameterize_notebook(
        for_papermill,
        {k: _resolve_type(v) for k, v in values.items()},
        kernel_name="python3",
        language="python",
    )
    assert ours.cells[1].source == theirs.cells[1].source


def test_a_cell_timeout_names_the_cell_and_the_next_run_resumes_at_it(tmp_path: Path) -> None:
    make_notebook(tmp_path / "nb.ipynb")
    (tmp_path / "slow").touch()
    timed_out = cli(tmp_path, "--cell-timeout", "5")
    assert timed_out.returncode != 0
    assert f"cell {HANG_AT} (" in timed_out.stderr and "no result within 5 s" in timed_out.stderr
    (tmp_path / "slow").unlink()
    again = cli(tmp_path, "--cell-timeout", "60")
    assert again.returncode == 0, again.stderr
    seen = outcomes(again.stdout)
    assert all(seen[n] == "restored" for n in range(1, HANG_AT)), again.stdout
    assert logged(tmp_path) == list(range(2, HANG_AT + 1)) + list(range(HANG_AT, 21))


def papermill_run(folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "papermill",
            "nb.ipynb",
            "out.ipynb",
            "--engine",
            "ipy_resume",
            *args,
        ],
        cwd=folder,
        env=subprocess_env(folder, MPLBACKEND="Agg"),
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_papermill_engine_resumes_and_follows_parameters(
    tmp_path: Path, uninterrupted: Path, template: Path
) -> None:
    pytest.importorskip("papermill")
    prepare(tmp_path, template)
    killed_in_cell_15(tmp_path, "papermill", "nb.ipynb", "out.ipynb", "--engine", "ipy_resume")
    again = papermill_run(tmp_path)
    assert again.returncode == 0, again.stderr
    assert logged(tmp_path) == list(range(2, HANG_AT + 1)) + list(range(HANG_AT, 21))
    assert "ipy_resume: cell 2 restored" in again.stderr, again.stderr[-2000:]
    ours = outputs(tmp_path / "out.ipynb")
    # papermill injects nothing without parameters; its output equals ipy-resume run's
    assert ours == outputs(uninterrupted / "out.ipynb")

    (tmp_path / "side.log").unlink()
    changed = papermill_run(tmp_path, "-p", "alpha", "0.5")
    assert changed.returncode == 0, changed.stderr
    assert logged(tmp_path) == sorted(ALPHA_CELLS)


def test_a_relative_store_dir_is_next_to_the_notebook_wherever_the_run_starts(
    tmp_path: Path,
) -> None:
    """``IPY_RESUME_DIR=runs``: ``ipy-resume run`` started from another folder and a
    kernel's ``%%checkpoint`` in the notebook's folder use one store, ``runs`` beside it."""
    notebooks, elsewhere = tmp_path / "notebooks", tmp_path / "elsewhere"
    notebooks.mkdir()
    elsewhere.mkdir()
    source = "open('side.log', 'a').write('ran\\n')\nanswer = 41 + 1\nprint(answer)"
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(source)])
    nb.cells[0].id = "answer"
    nb.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    nbformat.write(nb, notebooks / "nb.ipynb")
    env = {**subprocess_env(tmp_path), "IPY_RESUME_DIR": "runs"}

    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "ipy_resume.frontends.cli",
            "run",
            os.path.join("..", "notebooks", "nb.ipynb"),
        ],
        cwd=elsewhere,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr
    assert f"checkpoints in {notebooks / 'runs'}" in run.stdout, run.stdout
    assert (notebooks / "runs").is_dir() and not (elsewhere / "runs").exists()
    assert (notebooks / "side.log").read_text() == "ran\n"

    # the same cell in a kernel of the notebook's folder, the same relative variable:
    # restored from the headless run's checkpoint, so its side effect does not repeat
    with Kernel(notebooks, {**kernel_env(tmp_path), "IPY_RESUME_DIR": "runs"}) as kernel:
        assert kernel.run("%load_ext ipy_resume").status == "ok"
        cell = kernel.run(headless.wrapped(source, "answer"))
        assert cell.status == "ok", cell.error
        assert cell.stdout == "42\n"
        where = kernel.run("from ipy_resume.store import location; print(location.default_root())")
        assert where.stdout.strip() == str(notebooks / "runs")
    assert (notebooks / "side.log").read_text() == "ran\n"


def test_the_kernels_environment_names_the_chosen_store_and_keeps_the_rest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ipy_resume.store.journal import SYNC_ENV

    monkeypatch.setenv("IPY_RESUME_DIR", "relative")
    monkeypatch.setenv("IPY_RESUME_TEST_MARK", "kept")
    env = headless.kernel_env(tmp_path / "store")
    assert env["IPY_RESUME_DIR"] == str(tmp_path / "store")
    assert env[SYNC_ENV] == "1"
    assert env["IPY_RESUME_TEST_MARK"] == "kept"
    assert os.environ["IPY_RESUME_DIR"] == "relative"  # this process's is left alone


def test_cell_ids_come_from_the_file_or_the_source(tmp_path: Path) -> None:
    make_notebook(tmp_path / "nb.ipynb")
    nb = nbformat.read(tmp_path / "nb.ipynb", as_version=4)
    assert headless.file_has_cell_ids(tmp_path / "nb.ipynb")
    assert set(headless.cell_ids(nb).values()) == {c.id for c in nb.cells if c.cell_type == "code"}
    twice = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x = 1") for _ in "ab"])
    ids = list(headless.cell_ids(twice, trust_ids=False).values())
    assert ids[0].startswith("src-") and ids[1] == ids[0] + "-2"


def test_bad_input_gets_one_line(tmp_path: Path) -> None:
    missing = cli(tmp_path)
    assert missing.returncode == 2 and "cannot read nb.ipynb" in missing.stderr
    make_notebook(tmp_path / "nb.ipynb")
    bad = cli(tmp_path, "-p", "not-a-name", "1")
    assert bad.returncode == 2 and "is not a Python identifier" in bad.stderr
