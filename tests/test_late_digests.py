"""Large arrays whose digests the forked writer takes after the cell returned.

The kernel returns once it has forked; the child hashes the array (its blob's address and
its fingerprint), writes the completed, signed manifest beside the commit record, then the
blob (ipy_resume/store/late.py).  These tests check the digests against the kernel's own,
kill the kernel and the child at the moments that matter, and link to such an array from
a later cell before its digests are in.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from test_pending import fresh_shell, staged_files

from ipy_resume.fingerprint import Fingerprinter
from ipy_resume.store import Store, blobs, late, pending

KEY = "k" * 32
BIG = 2_000_000  # float64: 16 MB, over late.LATE_MIN


def fingerprint_hex(value: object) -> str:
    return Fingerprinter().digest(value).hex()


def wait_for_writers(root: Path) -> None:
    """Until no process a commit record names is alive (a killed kernel's child finishing)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        owners = [json.loads(p.read_text())["owner"] for p in pending.records(root)]
        if not any(pending.writer_alive(who) for who in owners):
            return
        time.sleep(0.05)
    raise AssertionError("a writer of the store is still running")


def run_and_die(root: Path, fingerprint_code: str) -> None:
    """In a new process: stage a late save of a 16 MB array, then SIGKILL itself at once,
    while its child is still hashing (what a kernel killed right after the cell leaves)."""
    code = (
        "import os, signal, numpy as np\n"
        "from ipy_resume.store import Store\n"
        "from ipy_resume.fingerprint import Fingerprinter\n"
        f"parent = os.getpid()\n"
        f"def fingerprint(value):\n{fingerprint_code}\n"
        f"store = Store({os.fspath(root)!r})\n"
        f"a = np.arange({BIG}.0)\n"
        f"snap = store.snapshot('c', {KEY!r}, {{'a': a}}, late_digests={{'a': fingerprint}})\n"
        "snap.stage()\n"
        "assert snap.child is not None\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, timeout=120)
    assert proc.returncode == -signal.SIGKILL, proc.stderr.decode()


def test_the_child_takes_the_digests_and_they_are_the_kernels(isolated: Path) -> None:
    store = Store(isolated / "store")
    a = np.arange(float(BIG))
    where = isolated / "fingerprinted-in"

    def fingerprint(value: object) -> str:
        where.write_text(str(os.getpid()))
        return fingerprint_hex(value)

    snap = store.snapshot("c", KEY, {"a": a}, late_digests={"a": fingerprint})
    provisional = snap.manifest.values["a"].blob
    snap.stage()
    assert snap.child is not None and provisional == late.placeholder(0)
    assert snap.record is not None and "late" in json.loads(snap.record.read_text())
    a[:] = -1.0  # after the stage: the child still sees the array as it was
    snap.commit()
    assert int(where.read_text()) != os.getpid()  # hashed in the child, not here
    (m,) = store.manifests()
    expected = np.arange(float(BIG))
    assert m.info["output_digests"] == {"a": fingerprint_hex(expected)}
    ref = m.values["a"]
    assert ref.blob != provisional and blobs.valid_address(ref.blob)
    assert blobs.digest(blobs.XXH3, [store.blobs.path(ref.blob).read_bytes()]) == ref.blob
    assert np.array_equal(store.load_values(m)["a"], expected)  # type: ignore[arg-type]
    assert store.verify() == [] and pending.records(isolated / "store") == []
    assert not list((isolated / "store" / "pending").glob("*.late"))


def test_without_a_fork_the_digests_are_taken_before_staging(
    isolated: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("IPY_RESUME_FORK", "0")
    store = Store(isolated / "store")
    a = np.arange(float(BIG))
    snap = store.snapshot("c", KEY, {"a": a}, late_digests={"a": fingerprint_hex})
    snap.stage()
    assert snap.child is None and blobs.valid_address(snap.manifest.values["a"].blob)
    assert snap.manifest.values["a"].blob != late.placeholder(0)
    snap.commit()
    (m,) = store.manifests()
    assert m.info["output_digests"] == {"a": fingerprint_hex(a)} and store.verify() == []


def test_a_kernel_killed_while_its_child_hashes_loses_nothing(isolated: Path) -> None:
    root = isolated / "store"
    run_and_die(root, "    return Fingerprinter().digest(value).hex()")
    wait_for_writers(root)
    store = Store(root)
    (m,) = store.manifests()  # (the read finished the dead kernel's commit)
    expected = np.arange(float(BIG))
    assert m.info["output_digests"] == {"a": fingerprint_hex(expected)}
    assert np.array_equal(store.load_values(m)["a"], expected)  # type: ignore[arg-type]
    assert store.verify() == [] and pending.records(root) == [] and staged_files(root) == []
    assert not list((root / "pending").glob("*.late"))


def test_a_save_whose_child_died_before_its_completion_is_abandoned(isolated: Path) -> None:
    root = isolated / "store"
    # the child kills itself while hashing: no completion, no blob
    run_and_die(root, "    os.kill(os.getpid(), signal.SIGKILL)")
    wait_for_writers(root)
    store = Store(root)
    assert store.manifests() == []
    assert pending.records(root) == [] and staged_files(root) == []


def test_a_completion_naming_damaged_bytes_is_never_committed(isolated: Path) -> None:
    root = isolated / "store"
    code = "    import time; time.sleep(0.5); return Fingerprinter().digest(value).hex()"
    run_and_die(root, code)
    wait_for_writers(root)
    # the child finished: damage its blob before any reader commits it
    (temp,) = staged_files(root)
    with open(temp, "r+b") as f:
        f.seek(4096 + 8)
        f.write(b"\x01" * 8)
    store = Store(root)
    assert store.manifests() == []
    assert pending.records(root) == [] and staged_files(root) == []


def test_a_child_that_fails_to_hash_fails_the_save_and_keeps_the_values(
    isolated: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = Store(isolated / "store")
    parent = os.getpid()

    def broken(value: object) -> str:
        if os.getpid() != parent:
            raise RuntimeError("no digest today")
        return fingerprint_hex(value)

    a = np.arange(float(BIG))
    snap = store.snapshot("c", KEY, {"a": a}, late_digests={"a": broken})
    snap.stage()
    assert snap.child is not None
    with pytest.raises(Exception, match="no digest today"):
        snap.commit()
    assert snap.manifest.late is not None and snap.manifest.late() is False
    assert store.manifests() == [] and pending.records(isolated / "store") == []
    assert staged_files(isolated / "store") == []


SHELL = """
import os, sys
from IPython.core.interactiveshell import InteractiveShell
from traitlets.config import Config
config = Config()
config.HistoryManager.hist_file = ":memory:"
sh = InteractiveShell.instance(config=config)
sh.run_line_magic("load_ext", "ipy_resume")
assert sh.run_cell("import numpy as np").success
"""


def run_script(script: str) -> subprocess.CompletedProcess[str]:
    """*script* in a fresh interpreter (this test's store; saves in the background)."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    env.pop("IPY_RESUME_BACKGROUND", None)
    proc = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    return proc


SAVE = (
    SHELL
    + """
assert sh.run_cell("%%checkpoint big\\nY = np.arange(2_000_000.0)").success
# at once, while the writer's child may still be hashing Y
assert sh.run_cell("%%checkpoint hold\\nholder = {'Y': Y}").success
from ipy_resume.store import background
assert background.flush()
"""
)


def test_a_later_cell_links_to_an_array_whose_digests_are_not_in_yet(isolated: Path) -> None:
    proc = run_script(SAVE)
    assert "saved checkpoint" in proc.stderr
    store = Store(isolated / "store")
    (hold,) = [m for m in store.manifests() if m.cell_id == "hold"]
    (big,) = [m for m in store.manifests() if m.cell_id == "big"]
    assert set(hold.links) == {f"{big.id}/Y"}  # a link, not 16 MB again
    assert hold.links[f"{big.id}/Y"].blob == big.values["Y"].blob
    sh: Any = fresh_shell()
    try:
        assert sh.run_cell("import numpy as np").success
        assert sh.run_cell("%%checkpoint big\nY = np.arange(2_000_000.0)").success
        assert sh.run_cell("%%checkpoint hold\nholder = {'Y': Y}").success
        ns = sh.user_ns
        assert ns["holder"]["Y"] is ns["Y"]
        assert sh.last_execution_result.success
    finally:
        from IPython.core.interactiveshell import InteractiveShell

        InteractiveShell.clear_instance()
    ran = [m for m in store.manifests() if m.cell_id in ("big", "hold")]
    assert len(ran) == 2  # both restored: nothing saved again


NO_H5PY = (
    SHELL
    + """
assert sh.run_cell("%%checkpoint big\\nY = np.arange(2_000_000.0)").success
after_cell = "h5py" in sys.modules
from ipy_resume.store import background
assert background.flush()
print(after_cell, "h5py" in sys.modules)
"""
)


def test_a_kernel_whose_saved_arrays_are_all_late_never_imports_h5py(isolated: Path) -> None:
    # (importing it costs 0.1-0.2 s: the child lays the blob out instead)
    proc = run_script(NO_H5PY)
    assert proc.stdout.split() == ["False", "False"], proc.stdout
    store = Store(isolated / "store")
    (m,) = [m for m in store.manifests() if m.cell_id == "big"]
    import h5py

    assert m.versions.get("h5py") == h5py.__version__  # (laid out by the child's h5py)
    assert np.array_equal(store.load_values(m)["Y"], np.arange(2_000_000.0))  # type: ignore[arg-type]
    assert store.verify() == []
