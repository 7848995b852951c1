"""A checkpoint made in one real kernel is restored by a fresh kernel, as a user sees it."""

from __future__ import annotations

from pathlib import Path

from kernel_utils import Kernel, kernel_env

CELLS = [
    "%load_ext ipy_resume",
    (
        "%%checkpoint fit\n"
        "import numpy as np\n"
        "from IPython.display import Markdown, display\n"
        "open('executions.log', 'a').write('fit\\n')\n"
        "coef = np.random.normal(size=(64, 64))\n"
        "print('fitting done')\n"
        "display(Markdown('**converged**'))\n"
        "coef.shape\n"
    ),
    "draw = np.random.rand(4).tolist(); draw",
]


def test_fresh_kernel_restores_values_output_and_rng(tmp_path: Path) -> None:
    runs = []
    for _ in range(2):
        with Kernel(tmp_path, kernel_env(tmp_path)) as kernel:
            outputs = [kernel.run(cell) for cell in CELLS]
            checksum = kernel.run("float(coef.sum())").result
        assert all(o.status == "ok" for o in outputs), [o.error for o in outputs]
        runs.append((outputs, checksum))
    (first, sum1), (second, sum2) = runs
    assert (tmp_path / "executions.log").read_text() == "fit\n"
    assert sum1 == sum2
    assert first[1].stdout == second[1].stdout == "fitting done\n"
    assert first[1].displays == second[1].displays
    assert "text/markdown" in second[1].displays[0]
    assert first[1].result == second[1].result and second[1].result["text/plain"] == "(64, 64)"
    assert first[2].result == second[2].result
    assert "restored 'fit'" in second[1].stderr
