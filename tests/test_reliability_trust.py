"""Trust: foreign, unsigned and malicious checkpoints are refused; adoption verifies first.

The malicious payload is a real pickle whose loading creates a file; every
test asserts that file never appears, whatever reads the store (a
``%%checkpoint`` hit, ``verify``, ``list``, ``gc``, ``trust``).
"""

from __future__ import annotations

import hashlib
import json
import os
import pathlib
import pickle
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import reliability_report
from deadlines import wait_until
from IPython.core.interactiveshell import InteractiveShell

from ipy_resume.store import Store, Untrusted, signing
from ipy_resume.store import manifest as mf

OTHER_KEY = bytes(range(100, 132))


class _Payload:
    """Pickles to a call of ``Path.touch(target)``: loading it creates *target*."""

    def __init__(self, target: Path) -> None:
        self.target = target

    def __reduce__(self) -> tuple[object, tuple[object, ...]]:
        return (pathlib.Path.touch, (pathlib.Path(self.target),))


def _payload_bytes(target: Path) -> bytes:
    data = pickle.dumps(_Payload(target), protocol=5)
    probe = target.with_name("probe-" + target.name)
    pickle.loads(pickle.dumps(_Payload(probe), protocol=5))  # the payload really works
    assert probe.exists()
    probe.unlink()
    return data


def _plant(root: Path, cell_id: str, key: str, stream: bytes, *, sign_with: bytes | None) -> Path:
    """Write a blob and a manifest pointing at it, as an attacker sharing the folder could."""
    address = hashlib.sha256(stream).hexdigest()
    blob = root / "objects" / address[:2] / address[2:]
    blob.parent.mkdir(parents=True, exist_ok=True)
    blob.write_bytes(stream)
    ref = mf.BlobRef("pickle", address, "sha256", address, len(stream), 0, len(stream))
    m = mf.Manifest(
        id="ffffffffffffffff",  # newer than anything: tried first
        cell_id=cell_id,
        key=key,
        created=mf.now_iso(),
        complete=True,
        values={"model": ref},
        extras={},
        failed={},
        info={},
        versions={},
        bytes=len(stream),
        bytes_written=len(stream),
    )
    folder = root / "manifests" / mf.cell_dir(cell_id) / key
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{m.id}.json"
    if sign_with is None:
        path.write_text(json.dumps(m.to_json(), indent=1, sort_keys=True) + "\n")
    else:
        path.write_bytes(mf.encode(m, sign_with))
    return path


def _key_of(root: Path, cell_id: str) -> str:
    (folder,) = (root / "manifests" / mf.cell_dir(cell_id)).iterdir()
    return folder.name


@pytest.mark.parametrize("how", ["other-key", "unsigned", "forged-signature", "blob-replaced"])
def test_malicious_pickle_is_never_loaded(
    shell: InteractiveShell,
    isolated: Path,
    capsys: pytest.CaptureFixture[str],
    how: str,
) -> None:
    root = isolated / "store"
    target = isolated / "pwned"
    shell.run_cell("runs = []")
    cell = "%%checkpoint train --ignore runs\nruns.append(1)\nmodel = 'honest'\n"
    assert shell.run_cell(cell).success
    key = _key_of(root, "train")
    stream = _payload_bytes(target)
    if how == "other-key":
        planted = _plant(root, "train", key, stream, sign_with=OTHER_KEY)
    elif how == "unsigned":
        planted = _plant(root, "train", key, stream, sign_with=None)
    elif how == "forged-signature":
        planted = _plant(root, "train", key, stream, sign_with=OTHER_KEY)
        doc = json.loads(planted.read_text())
        doc["signature"] = "0" * 64
        planted.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    else:  # overwrite the honest checkpoint's pack with the payload
        (honest,) = Store(root).manifests()
        pack = Store(root).blob_path(honest.values["model"].blob)
        pack.write_bytes(stream)
        planted = pack
    capsys.readouterr()

    shell.user_ns.pop("model")
    assert shell.run_cell(cell).success
    err = capsys.readouterr().err
    assert not target.exists(), "the planted pickle was loaded"
    assert shell.user_ns["model"] == "honest"
    if how == "blob-replaced":
        assert "failed its checksum" in err or "truncated" in err or "wrong size" in err, err
        assert len(shell.user_ns["runs"]) == 2  # executed again
    else:
        # the older honest checkpoint is used; the planted one is skipped, never read
        assert len(shell.user_ns["runs"]) == 1

    store = Store(root)
    problems = store.verify()
    if how == "blob-replaced":
        # detected, quarantined, and rewritten by the re-execution: the store healed
        assert problems == []
        assert [p.read_bytes() for p in (root / "quarantine").iterdir()] == [stream]
    else:
        assert any(planted.relative_to(root).as_posix() in p for p in problems), problems
    store.manifests()
    store.gc(keep_last=1)
    assert not target.exists()
    if how != "blob-replaced":
        assert planted.exists()  # gc keeps what it may not judge: the user may trust it


def test_only_a_foreign_checkpoint_means_execute_with_the_trust_hint(
    shell: InteractiveShell, isolated: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = isolated / "store"
    target = isolated / "pwned"
    shell.run_cell("runs = []")
    cell = "%%checkpoint train --ignore runs\nruns.append(1)\nmodel = 'honest'\n"
    assert shell.run_cell(cell).success
    key = _key_of(root, "train")
    for m in (root / "manifests").rglob("*.json"):
        m.unlink()  # only the planted one is left
    _plant(root, "train", key, _payload_bytes(target), sign_with=OTHER_KEY)
    capsys.readouterr()
    assert shell.run_cell(cell).success
    err = capsys.readouterr().err
    assert not target.exists()
    assert len(shell.user_ns["runs"]) == 2
    assert "another key" in err and f"ipy-resume trust --store {root}" in err, err
    assert "will be executed instead" in err or "execute again" in err


def test_trust_command_adopts_only_what_passes_its_checksums(tmp_path: Path) -> None:
    root = tmp_path / "store"
    foreign = Store(root, key=OTHER_KEY)
    good = foreign.save("good", "k1", {"a": [1, 2, 3]}).manifest
    bad = foreign.save("bad", "k2", {"b": "x" * 100, "c": bytes(70_000)}).manifest
    ref = bad.values["c"]
    blob = foreign.blob_path(ref.blob)
    damaged = bytearray(blob.read_bytes())
    damaged[-1] ^= 0x40
    blob.write_bytes(bytes(damaged))

    data_dir = tmp_path / "jupyter-data"
    env = dict(os.environ, JUPYTER_DATA_DIR=str(data_dir))
    mine = Store(root, key=signing.load_or_create_key(data_dir / "ipy_resume" / "signing.key"))
    with pytest.raises(Untrusted, match="ipy-resume trust --store"):
        mine.find("good", "k1")

    listed = subprocess.run(  # not "no checkpoints yet" alone: the store is not empty
        [sys.executable, "-m", "ipy_resume.frontends.cli", "list", "--store", str(root)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert listed.returncode == 0, listed
    assert "2 more checkpoint(s)" in listed.stderr and "ipy-resume trust" in listed.stderr

    proc = subprocess.run(
        [sys.executable, "-m", "ipy_resume.frontends.cli", "trust", "--store", str(root)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert proc.returncode == 1, proc  # one checkpoint could not be adopted
    assert "re-signed 1 checkpoint(s)" in proc.stdout
    assert "not adopted" in proc.stdout and blob.relative_to(root).as_posix() in proc.stdout
    found = mine.find("good", "k1")
    assert found is not None and found.id == good.id
    assert mine.load_values(found) == {"a": [1, 2, 3]}
    with pytest.raises(Untrusted):  # never re-signed over a bad blob
        mine.find("bad", "k2")
    assert bad.path is not None and json.loads(bad.path.read_text())["signature"] == (bad.signature)


def test_key_file_is_private_and_racing_creators_agree(tmp_path: Path) -> None:
    """Six processes released together, three times over: one key each time, mode 0600."""
    script = (
        "import sys, time\n"
        "from pathlib import Path\n"
        "from ipy_resume.store import signing\n"
        "go = Path(sys.argv[2])\n"
        "Path(sys.argv[3]).touch()\n"
        "while not go.exists():\n"
        "    time.sleep(0.001)\n"
        "print(signing.load_or_create_key(Path(sys.argv[1])).hex())\n"
    )
    for round_ in range(3):
        key_path = tmp_path / f"data{round_}" / "ipy_resume" / "signing.key"
        go = tmp_path / f"go{round_}"
        ready = [tmp_path / f"ready{round_}-{i}" for i in range(6)]
        procs = [
            subprocess.Popen(
                [sys.executable, "-c", script, str(key_path), str(go), str(flag)],
                stdout=subprocess.PIPE,
                text=True,
            )
            for flag in ready
        ]
        wait_until(
            lambda: all(flag.exists() for flag in ready),  # noqa: B023 - called at once
            120,
            what="all six creators to import and wait at the barrier",
        )
        go.touch()
        keys = {p.communicate(timeout=60)[0].strip() for p in procs}
        assert all(p.returncode == 0 for p in procs)
        assert len(keys) == 1 and len(next(iter(keys))) == 64
        assert key_path.read_text().strip() == next(iter(keys))
        assert stat.S_IMODE(key_path.stat().st_mode) == 0o600
        assert stat.S_IMODE(key_path.parent.stat().st_mode) == 0o700
        assert sorted(p.name for p in key_path.parent.iterdir()) == [
            "signing.key",
            "signing.key.backup",
        ]  # no temp left
    reliability_report.record(
        "trust",
        "planted pickles (other key, unsigned, forged, replaced blob) never loaded; "
        "3 rounds of 6 racing key creators each ended with one 0600 key",
    )
