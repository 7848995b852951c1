"""Never lose the user's work: damaged stores fall back to executing, failed saves keep values."""

from __future__ import annotations

import errno
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from IPython.core.interactiveshell import InteractiveShell

from ipy_resume.store import fsio

CELL = (
    "%%checkpoint work --ignore runs\n"
    "runs.append(1)\n"
    "big = np.arange(200_000, dtype=np.float64) * factor\n"  # an HDF5 blob
    "meta = {'factor': factor, 'inner': np.ones(20_000)}\n"  # pickle + raw buffer blob
    "small = [factor, 'text']\n"  # packed pickle blob
)


@pytest.fixture
def worked(shell: InteractiveShell) -> InteractiveShell:
    shell.run_cell("import numpy as np\nfactor = 3\nruns = []")
    result = shell.run_cell(CELL)
    assert result.success
    return shell


def blobs(root: Path) -> list[Path]:
    return sorted(p for p in (root / "objects").rglob("*") if p.is_file())


def rerun(shell: InteractiveShell) -> int:
    for name in ("big", "meta", "small"):
        shell.user_ns.pop(name, None)
    before = len(shell.user_ns["runs"])
    assert shell.run_cell(CELL).success
    np.testing.assert_array_equal(shell.user_ns["big"], np.arange(200_000) * 3.0)
    assert shell.user_ns["small"] == [3, "text"]
    np.testing.assert_array_equal(shell.user_ns["meta"]["inner"], np.ones(20_000))
    return len(shell.user_ns["runs"]) - before


def flip(path: Path, where: float) -> None:
    data = bytearray(path.read_bytes())
    position = min(int(len(data) * where), len(data) - 1)
    data[position] ^= 0xFF
    path.write_bytes(bytes(data))


def truncate(path: Path, where: float = 0.5) -> None:
    path.write_bytes(path.read_bytes()[: int(path.stat().st_size * where)])


DAMAGE: dict[str, Callable[[Path], None]] = {
    "flip-start": lambda p: flip(p, 0.0),
    "flip-middle": lambda p: flip(p, 0.5),
    "flip-end": lambda p: flip(p, 1.0),
    "truncate": truncate,
    "delete": lambda p: p.unlink(),
}


@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_every_damaged_blob_reexecutes_then_heals(
    worked: InteractiveShell, isolated: Path, damage: str, capsys: pytest.CaptureFixture[str]
) -> None:
    root = isolated / "store"
    files = blobs(root)
    assert len(files) >= 3  # hdf5, raw buffer, pack (+ extras)
    for blob in files:
        capsys.readouterr()
        DAMAGE[damage](blob)
        assert rerun(worked) == 1, f"{damage} of {blob.name} was not detected"
        err = capsys.readouterr().err
        assert "will be executed instead" in err, err
        assert rerun(worked) == 0, f"store did not heal after {damage} of {blob.name}"


def test_tampered_manifest_reexecutes(
    worked: InteractiveShell, isolated: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    manifest = next((isolated / "store" / "manifests").rglob("*.json"))
    manifest.write_text(manifest.read_text().replace('"factor"', '"factar"', 1))
    capsys.readouterr()
    assert rerun(worked) == 1
    assert "ipy_resume:" in capsys.readouterr().err


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EIO, errno.EACCES])
def test_failed_save_keeps_values_and_says_so(
    shell: InteractiveShell,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    code: int,
) -> None:
    def broken(*args: object, **kwargs: object) -> None:
        raise OSError(code, "injected failure")

    shell.run_cell("%%checkpoint warmup\nw = 1")  # key and store exist; the save itself fails
    # (durable before the fault is injected; on a loaded machine its line may come apart
    # from the cell's, "saving" then "saved", when the write outlasts the cell's wait)
    shell.run_line_magic("checkpoint", "wait")
    capsys.readouterr()
    monkeypatch.setattr(fsio, "_fsync", broken)
    result = shell.run_cell("%%checkpoint full\nimport numpy as np\nkept = np.arange(100_000)\n")
    assert result.success
    assert shell.user_ns["kept"].sum() == sum(range(100_000))
    err = capsys.readouterr().err
    assert "could not save checkpoint 'full'" in err and "kept" in err.lower()
    assert err.count("could not save") == 1
    assert err.count("\n") <= 2


def test_unusable_store_still_runs_the_cell(
    shell: InteractiveShell,
    isolated: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    blocker = isolated / "not-a-folder"
    blocker.write_text("a file where the store should be")
    monkeypatch.setenv("IPY_RESUME_DIR", str(blocker / "store"))
    result = shell.run_cell("%%checkpoint nowhere\nvalue = 41 + 1\nvalue")
    assert result.success and result.result == 42 and shell.user_ns["value"] == 42
    err = capsys.readouterr().err
    assert "'nowhere'" in err and "cannot be used" in err
