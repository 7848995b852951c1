"""Write the demo notebooks from the cell lists below (run: python notebooks/make_notebooks.py).

Keeping the notebooks' source here makes their diffs readable; the .ipynb files
are what users open. Cell tags drive the test harness (tests/test_notebooks.py):
``restart-kernel-before`` restarts the kernel before the cell (the user does it
from the Kernel menu), ``expect-crash`` marks the cell that kills the kernel on
purpose. Metadata ``expect_output`` lists text the cell's output must contain.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

HERE = Path(__file__).parent


def md(text: str) -> Any:
    return new_markdown_cell(text.strip())


def code(text: str, *tags: str, expect: tuple[str, ...] = ()) -> Any:
    cell = new_code_cell(text.strip())
    if tags:
        cell.metadata["tags"] = list(tags)
    if expect:
        cell.metadata["expect_output"] = list(expect)
    return cell


# Run once, then again after a kernel restart: the same cell, restored the second time.
SLOW_CELL = """
%%checkpoint slow
import time
import numpy as np

started = time.perf_counter()
features = np.random.rand(2_000, 500)
for step in range(4):
    time.sleep(0.5)  # stands in for real work
    features = np.tanh(features @ np.random.rand(500, 500) / 50)
    print(f"step {step}: mean {features.mean():.4f}")
first_run_seconds = time.perf_counter() - started
features.shape
"""

QUICKSTART = [
    md("""
# ipy_resume in two minutes

A slow cell, checkpointed; the kernel restarted; the cell back in a fraction of
the time. Open the **checkpoint timeline** in the right sidebar (the clock icon)
to watch the rows appear as you go.
"""),
    code("%load_ext ipy_resume"),
    md(
        "The cell below takes a few seconds. `%%checkpoint slow` gives it a name; the first run executes it and saves what it produced."
    ),
    code(
        SLOW_CELL,
        expect=("step 3", "executed 'slow'"),
    ),
    md("""
Now **restart the kernel** (Kernel → Restart Kernel…) and run the cells below.
Everything in memory is gone — but the checkpoint is on disk.
"""),
    code("%load_ext ipy_resume", "restart-kernel-before"),
    code(
        SLOW_CELL,
        expect=("step 3", "restored 'slow'"),
    ),
    md(
        "Nothing executed: the printed lines are a replay, `features` is back, and so is `first_run_seconds` from the first run."
    ),
    code(
        """
print(f"the first run took {first_run_seconds:.1f} s")
assert features.shape == (2000, 500)
""",
        expect=("the first run took",),
    ),
    md("Every checkpoint of this folder's store:"),
    code("%checkpoint list", expect=("slow",)),
    md("""
Change the code or an input of the cell and it executes again; add `--explain`
to be told why. See `timeline.ipynb` for going back in time and
`crash_and_resume.ipynb` for a loop that survives a crash.
"""),
]

TRAIN_CELL = """
%%checkpoint train --seed 7
import os, signal
import numpy as np
from ipy_resume import resumable

weights = np.zeros(X.shape[1])
losses = []
for epoch in resumable(range(12), state=["weights", "losses"], every=1):
    batch = np.random.choice(len(X), 256, replace=False)
    error = X[batch] @ weights - y[batch]
    weights -= 0.05 * X[batch].T @ error / len(batch)
    losses.append(float(np.mean(error**2)))
    print(f"epoch {epoch:2d}  loss {losses[-1]:.4f}")
    if epoch == 5 and os.path.exists("crash-once"):
        os.remove("crash-once")
        os.kill(os.getpid(), signal.SIGKILL)  # the kernel dies here, on purpose
"""

CRASH_AND_RESUME = [
    md("""
# A training loop that survives a kernel crash

A loop wrapped in `resumable(...)` commits its state every iteration. We kill
the kernel during epoch 5, bring it back with `%resume`, run the same
cell again, and the loop continues where it stopped — with exactly the numbers
and random draws an uninterrupted run produces.
"""),
    code("%load_ext ipy_resume"),
    code(
        """
%%checkpoint data --seed 1
import numpy as np
X = np.random.normal(size=(5_000, 20))
true_weights = np.linspace(-1, 1, 20)
y = X @ true_weights + np.random.normal(scale=0.1, size=5_000)
X.shape
""",
        expect=("executed 'data'",),
    ),
    md(
        "Arm the crash: the training cell kills its own kernel at epoch 5 if this file exists (and removes it first, so it happens once)."
    ),
    code('open("crash-once", "w").close()'),
    code(TRAIN_CELL, "expect-crash", expect=("epoch  5",)),
    md("""
The kernel died. **Restart it** and carry on: `%resume` brings back what the
checkpointed cells had produced.
"""),
    code("%load_ext ipy_resume\n%resume", "restart-kernel-before", expect=("restored", "'data'")),
    md(
        "Run the training cell again: it resumes after the last saved epoch instead of starting over."
    ),
    code(TRAIN_CELL, expect=("resuming loop 0 of 'train' at iteration 5 of 12", "epoch 11")),
    md("An uninterrupted run with the same seed, for comparison — no ipy_resume involved:"),
    code(
        """
np.random.seed(7)
reference_weights = np.zeros(X.shape[1])
reference_losses = []
for epoch in range(12):
    batch = np.random.choice(len(X), 256, replace=False)
    error = X[batch] @ reference_weights - y[batch]
    reference_weights -= 0.05 * X[batch].T @ error / len(batch)
    reference_losses.append(float(np.mean(error**2)))
next_draw_reference = np.random.rand()
assert np.array_equal(weights, reference_weights)
assert losses == reference_losses
print("identical weights and losses:", np.array_equal(weights, reference_weights) and losses == reference_losses)
""",
        expect=("identical weights and losses: True",),
    ),
    code(
        """
import matplotlib
matplotlib.use("module://matplotlib_inline.backend_inline")
import matplotlib.pyplot as plt
fig, ax = plt.subplots(figsize=(6, 3))
ax.plot(range(5), losses[:5], "o-", label="before the crash")
ax.plot(range(5, 12), losses[5:], "o-", label="after %resume")
ax.axvline(5.5, color="grey", linestyle=":")
ax.set_xlabel("epoch"); ax.set_ylabel("loss"); ax.legend()
plt.show()
""",
    ),
]

TIMELINE = [
    md("""
# Going back in time

Every execution and restore is an event on the store's timeline. Here we build
three steps, go back to the first, and ask why a cell re-executes.
"""),
    code("%load_ext ipy_resume"),
    code(
        """
%%checkpoint load
import numpy as np
data = np.arange(10.0)
stage = "loaded"
""",
    ),
    code(
        """
%%checkpoint normalise
data = (data - data.mean()) / data.std()
stage = "normalised"
""",
    ),
    code(
        """
%%checkpoint features
squares = data**2
stage = "features"
""",
    ),
    md("The widget shows the same timeline as the side panel, with restore buttons:"),
    code("from ipy_resume import timeline\ntimeline()"),
    md(
        "Back to the state right after `load`: `data` is raw again, and `squares`, created later, is gone."
    ),
    code("%checkpoint restore load", expect=("removed squares",)),
    code(
        """
assert stage == "loaded" and data[1] == 1.0 and "squares" not in globals()
print(stage, data[:3])
""",
        expect=("loaded",),
    ),
    md("Change an input and ask why the cell executes:"),
    code("data = data * 10"),
    code(
        """
%%checkpoint normalise --explain
data = (data - data.mean()) / data.std()
stage = "normalised"
""",
        expect=("'normalise' executes: input 'data' changed",),
    ),
    code("%checkpoint show normalise", expect=("cell 'normalise'", "input:data")),
]

FIT_DIGITS_CELL = """
%%checkpoint fit-digits --seed 0
import os, signal
import numpy as np
from sklearn.linear_model import SGDClassifier
from ipy_resume import resumable

model = SGDClassifier(loss="log_loss", random_state=0)
curve = []
for epoch in resumable(range(10), state=["model", "curve"], every=1):
    order = np.random.permutation(len(X_train))
    model.partial_fit(X_train[order], y_train[order], classes=np.arange(10))
    curve.append(model.score(X_test, y_test))
    print(f"epoch {epoch}: test accuracy {curve[-1]:.3f}")
    if epoch == 4 and os.path.exists("crash-once"):
        os.remove("crash-once")
        os.kill(os.getpid(), signal.SIGKILL)
"""

DIGITS = [
    md("""
# A real model: digits with scikit-learn

scikit-learn ships the 8×8 digits data set, so this runs offline. A linear
classifier trains epoch by epoch with `partial_fit`; the loop is `resumable`,
the kernel crashes half-way, and training continues after `%resume`.
(`pip install scikit-learn matplotlib` if you don't have them.)
"""),
    code("%load_ext ipy_resume"),
    code(
        """
%%checkpoint digits --seed 0
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
digits = load_digits()
X_train, X_test, y_train, y_test = train_test_split(
    digits.data / 16.0, digits.target, test_size=0.3, random_state=0
)
X_train.shape, X_test.shape
""",
    ),
    code('open("crash-once", "w").close()'),
    code(
        FIT_DIGITS_CELL,
        "expect-crash",
        expect=("epoch 4",),
    ),
    md("The kernel died at epoch 4. Restart it and resume:"),
    code("%load_ext ipy_resume\n%resume", "restart-kernel-before", expect=("restored",)),
    code(
        FIT_DIGITS_CELL,
        expect=("resuming loop 0 of 'fit-digits' at iteration 4 of 10", "epoch 9"),
    ),
    code(
        """
import matplotlib
matplotlib.use("module://matplotlib_inline.backend_inline")
import matplotlib.pyplot as plt
fig, ax = plt.subplots(figsize=(6, 3))
ax.plot(range(4), curve[:4], "o-", label="before the crash")
ax.plot(range(4, 10), curve[4:], "o-", label="after %resume")
ax.set_xlabel("epoch"); ax.set_ylabel("test accuracy"); ax.legend()
plt.show()
assert len(curve) == 10 and curve[-1] > 0.85
print(f"final test accuracy {curve[-1]:.3f}")
""",
        expect=("final test accuracy",),
    ),
]

NOTEBOOKS = {
    "quickstart.ipynb": QUICKSTART,
    "crash_and_resume.ipynb": CRASH_AND_RESUME,
    "timeline.ipynb": TIMELINE,
    "digits_training.ipynb": DIGITS,
}


def main() -> None:
    for name, cells in NOTEBOOKS.items():
        for index, cell in enumerate(cells):
            cell.id = f"cell-{index}"  # stable ids: regenerating leaves the files unchanged
        nb = new_notebook(cells=cells)
        nb.metadata["kernelspec"] = {
            "name": "python3",
            "display_name": "Python 3",
            "language": "python",
        }
        nbformat.write(nb, HERE / name)
        print("wrote", HERE / name)


if __name__ == "__main__":
    main()
