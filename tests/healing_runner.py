"""Run the fault matrix's notebook in a forked child: a fresh process for every run.

The parent imports everything once; each run forks, builds a fresh IPython shell with
ipy_resume loaded (no engine, linker or cache of an earlier run exists in the child),
runs the cells and sends back, per checkpointed cell, whether it hit and a digest of
every value it left (arrays bit for bit, default-seeded draws, the ``--files`` output,
the generators' states).  Forking costs milliseconds where a new interpreter costs a
second and a half, which is what lets ``make test`` run a hundred trials.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import pickle
import random
import sys
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path
from typing import Any

import numpy as np

# Three checkpointed cells run for two values of P: 'data' and 'feats' depend on P (two
# keys each), 'draw' does not (one key, hit again in the second pass): 5 checkpoints.
# Arrays go to HDF5 blobs, small values to packs, the numpy generator's state and the
# big pickled dict to blobs of their own, and 'feats' stores a file it writes.
CELLS = {
    "data": "%%checkpoint data\nraw = np.random.rand(20_000) + P\nlabel = f'run {P}'",
    "feats": (
        "%%checkpoint feats --files out.txt\n"
        "feats = {'mean': float(raw.mean()), 'head': raw[:5].tolist(), 'label': label}\n"
        "scaled = raw * 2\n"
        "blob = {'big': list(range(60_000)), 'tag': label}\n"
        "with open('out.txt', 'w') as fh:\n"
        "    fh.write(repr(feats['mean']))"
    ),
    "draw": (
        "%%checkpoint draw\nimport random\nnoise = np.random.rand(3_000)\n"
        "pick = random.random()\nsteps = [random.randint(0, 9) for _ in range(5)]"
    ),
}
NAMES = {
    "data": ["raw", "label"],
    "feats": ["feats", "scaled", "blob"],
    "draw": ["noise", "pick", "steps"],
}
PASSES = (0, 1)


def _digest(value: Any) -> str:
    if isinstance(value, np.ndarray):
        data = value.dtype.str.encode() + repr(value.shape).encode() + value.tobytes()
    else:
        data = pickle.dumps(value, protocol=5)
    return hashlib.sha256(data).hexdigest()[:16]


def _rng_digest() -> str:
    state = np.random.get_state()
    data = pickle.dumps((random.getstate(), state[1].tobytes(), state[2:]), protocol=5)
    return hashlib.sha256(data).hexdigest()[:16]


def run_notebook(workdir: Path, passes: tuple[int, ...] = PASSES) -> dict[str, Any]:
    """Run *passes* of the notebook in this process; the figures of each checkpointed cell.

    Each pass makes a checkpoint of every cell, except 'draw' after the first.
    """
    from IPython.core.interactiveshell import InteractiveShell
    from traitlets.config import Config

    from ipy_resume.store import background

    os.chdir(workdir)
    config = Config()
    config.HistoryManager.hist_file = ":memory:"
    config.InteractiveShell.colors = "nocolor"
    shell = InteractiveShell.instance(config=config)
    shell.run_line_magic("load_ext", "ipy_resume")
    # Saves are written in the background; these tests look at the store (files,
    # stderr) right after each cell, so each cell ends once its save is durable.
    shell.events.register("post_run_cell", lambda *_: background.flush())
    shell.run_cell("import numpy as np")
    cells: dict[str, Any] = {}
    for p in passes:
        shell.run_cell(f"P = {p}")
        for cell_id, source in CELLS.items():
            Path("out.txt").unlink(missing_ok=True)  # a hit must put it back
            err = io.StringIO()
            with redirect_stdout(io.StringIO()), redirect_stderr(err):
                result = shell.run_cell(source)
            text = err.getvalue()
            ns = shell.user_ns
            values = {n: _digest(ns[n]) for n in NAMES[cell_id] if n in ns}
            if cell_id == "feats":
                out = Path("out.txt")
                values["out.txt"] = out.read_text() if out.exists() else "(missing)"
            cells[f"{cell_id}/{p}"] = {
                "hit": f"restored '{cell_id}'" in text,
                "executed": f"executed '{cell_id}'" in text,
                "ok": bool(result.success),
                "values": values,
                "rng": _rng_digest(),
                "messages": text[-2000:],
            }
    return cells


def warm() -> None:
    """Import in the parent what every run needs, so each forked child starts at once.

    Only modules: no shell, engine, store or journal exists in the parent, so nothing of
    one run can leak into the next.
    """
    import cloudpickle  # noqa: F401
    import h5py  # noqa: F401
    from IPython.core.interactiveshell import InteractiveShell  # noqa: F401

    import ipy_resume.frontends.comm
    import ipy_resume.frontends.magics
    import ipy_resume.timeline  # noqa: F401


def forked_run(
    workdir: Path, env: dict[str, str], passes: tuple[int, ...] = PASSES
) -> dict[str, Any]:
    """:func:`run_notebook` in a forked child; raises when the child fails."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns
        code = 0
        try:
            os.close(read)
            os.environ.update(env)
            payload = json.dumps(run_notebook(workdir, passes)).encode()
        except BaseException as exc:
            payload = json.dumps({"error": f"{type(exc).__name__}: {exc}"}).encode()
            code = 1
        with os.fdopen(write, "wb") as out:
            out.write(payload)
        # like a kernel that is shut down without closing anything: journal WAL included
        os._exit(code)
    os.close(write)
    with os.fdopen(read, "rb") as src:
        data = src.read()
    _, status = os.waitpid(pid, 0)
    result: dict[str, Any] = json.loads(data.decode() or '{"error": "no output"}')
    if "error" in result or status != 0:
        raise RuntimeError(f"run failed (status {status}): {result.get('error')}")
    return result


if __name__ == "__main__":  # pragma: no cover - for a look by hand
    print(json.dumps(run_notebook(Path(sys.argv[1])), indent=1))
