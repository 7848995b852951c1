"""store.json and its backup: spare copies inside each file, quarantine and rebuild, and
messages that name the damage (and permissions only when permissions were the cause)."""

from __future__ import annotations

import hashlib
import io
import json
import os
import random
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from contextlib import redirect_stderr
from pathlib import Path

import pytest
from IPython.core.interactiveshell import InteractiveShell

from ipy_resume.store import Store, info
from ipy_resume.store.fsio import ManifestError

KEY = bytes(range(32))
NOBODY = 65534


def as_plain_user(check: Callable[[Path], None]) -> None:
    """Run *check* on a fresh folder as a user whom permissions bind.

    As root (for whom chmod denies nothing) it runs in a forked child that has become
    ``nobody``; without the privilege to do that, the test is skipped.
    """
    base = Path(tempfile.mkdtemp(prefix="ipy-resume-perm-"))
    try:
        if not (hasattr(os, "geteuid") and os.geteuid() == 0):
            check(base / "w")
            return
        os.chmod(base, 0o755)
        (base / "w").mkdir()
        os.chown(base / "w", NOBODY, NOBODY)
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: never returns
            code, text = 0, b""
            try:
                os.close(read)
                os.setgroups([])
                os.setgid(NOBODY)
                os.setuid(NOBODY)
                check(base / "w")
            except BaseException as exc:
                code, text = 1, f"{type(exc).__name__}: {exc}".encode()
            os.write(write, text)
            os._exit(code)
        os.close(write)
        with os.fdopen(read, "rb") as src:
            failure = src.read().decode()
        _, status = os.waitpid(pid, 0)
        if failure.startswith("PermissionError: [Errno 1] Operation not permitted"):
            pytest.skip("root without the privilege to become another user")
        assert status == 0, failure
    finally:
        subprocess.run(["chmod", "-R", "u+rwx", str(base)], check=False)
        shutil.rmtree(base, ignore_errors=True)


def _flip(data: bytes, rng: random.Random, n: int) -> bytes:
    damaged = bytearray(data)
    for _ in range(n):
        damaged[rng.randrange(len(damaged))] ^= rng.randrange(1, 256)
    return bytes(damaged)


def _old_reader(data: bytes) -> dict[str, object]:
    """How versions before the spare copies read a copy: one JSON object and its check."""
    doc = json.loads(data)
    body = {k: v for k, v in doc.items() if k != "check"}
    text = json.dumps(body, sort_keys=True, separators=(",", ":"))
    assert doc["check"] == hashlib.sha256(text.encode()).hexdigest()[:16]
    return doc


def _damage_every_manifest(root: Path, rng: random.Random) -> None:
    for path in (root / "manifests").rglob("*.json"):
        path.write_bytes(_flip(path.read_bytes(), rng, 2))


def test_each_file_holds_spare_copies_and_older_versions_still_read_it() -> None:
    doc = info.new("2026-01-01T00:00:00.000Z")
    data = info.encode(doc)
    assert data.count(f'"seed_base": {doc["seed_base"]}'.encode()) == 1 + info.COPIES
    old = _old_reader(data)
    assert (old["format"], old["seed_base"]) == (doc["format"], doc["seed_base"])
    copy = info.decode_copy(info.FILE, data)
    assert copy.state == "ok" and copy.doc == doc


def test_two_flipped_bytes_anywhere_in_a_file_still_give_the_seed() -> None:
    doc = info.new("2026-01-01T00:00:00.000Z")
    data = info.encode(doc)
    rng = random.Random(33)
    states = set()
    for _ in range(2000):
        copy = info.decode_copy(info.FILE, _flip(data, rng, 2))
        assert copy.usable and copy.doc == doc
        states.add(copy.state)
    assert "mended" in states
    mended = info.decode_copy(info.FILE, data.replace(b'"format": 1,\n', b'"format": 1;\n'))
    assert mended.state == "mended" and "spare copy" in mended.problem


def test_files_of_earlier_layouts_still_read() -> None:
    body = {"created": "2025-01-01T00:00:00.000Z", "format": 1, "seed_base": 42}
    legacy = json.dumps(body).encode()
    assert info.decode_copy(info.FILE, legacy).state == "legacy"
    text = json.dumps(body, sort_keys=True, separators=(",", ":"))
    single = {**body, "check": hashlib.sha256(text.encode()).hexdigest()[:16]}
    copy = info.decode_copy(info.FILE, json.dumps(single, indent=1).encode())
    assert copy.state == "ok" and copy.doc == body
    # a damaged single document has no spare copy to fall back on
    flipped = json.dumps({**single, "seed_base": 43}).encode()
    assert info.decode_copy(info.FILE, flipped).state == "damaged"


def test_a_store_of_the_single_document_layout_gets_its_spare_copies(tmp_path: Path) -> None:
    store = Store(tmp_path / "s", key=KEY)
    seed = store.seed_base
    body = {k: v for k, v in json.loads((store.root / info.FILE).read_text()).items()}
    body.pop("copies")
    body.pop("check")
    text = json.dumps(body, sort_keys=True, separators=(",", ":"))
    single = json.dumps({**body, "check": hashlib.sha256(text.encode()).hexdigest()[:16]})
    for name in (info.FILE, info.BACKUP):
        (store.root / name).write_text(single)
    again = Store(store.root, key=KEY)
    assert again.seed_base == seed and again.take_repairs() == []  # an upgrade, no damage
    for name in (info.FILE, info.BACKUP):
        assert (store.root / name).read_bytes() == info.encode(body)


def test_every_file_flipped_keeps_the_seed_and_says_so_in_one_line(tmp_path: Path) -> None:
    store = Store(tmp_path / "s", key=KEY)
    seed = store.seed_base
    store.save("c", "k", {"x": 1})
    rng = random.Random(5)
    _damage_every_manifest(store.root, rng)
    for name in (info.FILE, info.BACKUP):
        path = store.root / name
        path.write_bytes(_flip(path.read_bytes(), rng, 2))
    again = Store(store.root, key=KEY)
    assert again.seed_base == seed
    (line,) = again.take_repairs()
    assert info.FILE in line and info.BACKUP in line and "base seed is unchanged" in line
    assert "permission" not in line and "\n" not in line
    assert [p.state for p in again.info_copies()] == ["ok", "ok"]


def test_both_copies_unreadable_and_no_manifest_verifies_quarantines_and_rebuilds(
    tmp_path: Path,
) -> None:
    store = Store(tmp_path / "s", key=KEY)
    old_seed = store.seed_base
    store.save("c", "k", {"x": 1})
    _damage_every_manifest(store.root, random.Random(6))
    garbage = {info.FILE: b"\x00not json", info.BACKUP: b"{broken"}
    for name, data in garbage.items():
        (store.root / name).write_bytes(data)
    again = Store(store.root, key=KEY)
    seed = again.seed_base  # the run goes on
    assert seed != old_seed  # nothing was left of the old one
    (line,) = again.take_repairs()
    assert "store.json is not valid JSON" in line and "store.backup.json" in line
    assert "new one was made" in line and "quarantine/" in line
    assert "permission" not in line
    # the user's bytes are set aside, never deleted
    kept = {p.read_bytes() for p in (store.root / "quarantine").glob("store*.json.*")}
    assert kept == set(garbage.values())
    assert Store(store.root, key=KEY).seed_base == seed  # and the new seed stays
    assert [c.state for c in again.info_copies()] == ["ok", "ok"]
    assert not [p for p in again.audit().problems if p.kind == "store-info"]


def test_a_damaged_copy_is_named_by_verify_until_it_is_rebuilt(tmp_path: Path) -> None:
    store = Store(tmp_path / "s", key=KEY)
    _ = store.seed_base
    path = store.root / info.BACKUP
    path.write_bytes(path.read_bytes().replace(b"{\n", b"[\n", 1))
    lines = Store(store.root, key=KEY).audit().lines
    assert any(line.startswith(f"{info.BACKUP} is not valid JSON") for line in lines)
    Store(store.root, key=KEY).heal_info()
    assert Store(store.root, key=KEY).audit().lines == []


def _read_only_folder(base: Path) -> None:
    folder = base / "ro"
    folder.mkdir()
    folder.chmod(0o555)
    with pytest.raises(PermissionError):  # (a new store: a save says "make it writable")
        _ = Store(folder / "store", key=KEY).seed_base
    # a store whose copies are damaged, in a folder that became read-only
    store = Store(base / "s", key=KEY)
    _ = store.seed_base
    for name in (info.FILE, info.BACKUP):
        (store.root / name).write_bytes(b"garbage")
    store.root.chmod(0o555)
    with pytest.raises(ManifestError) as raised:
        _ = Store(store.root, key=KEY).seed_base
    text = str(raised.value)
    assert "store.json is not valid JSON" in text and "check the folder's permissions" in text


def test_a_read_only_folder_is_the_one_case_that_speaks_of_permissions() -> None:
    as_plain_user(_read_only_folder)


def _unreadable_copies(base: Path) -> None:
    store = Store(base / "s", key=KEY)
    seed = store.seed_base
    for name in (info.FILE, info.BACKUP):
        (store.root / name).chmod(0o000)
    copies = Store(store.root, key=KEY).info_copies()
    assert [c.state for c in copies] == ["denied", "denied"]
    with pytest.raises(ManifestError, match="check the folder's permissions"):
        _ = Store(store.root, key=KEY).seed_base
    assert not (store.root / "quarantine").exists()  # nothing was moved or replaced
    for name in (info.FILE, info.BACKUP):
        (store.root / name).chmod(0o644)
    assert Store(store.root, key=KEY).seed_base == seed


def test_a_copy_that_may_not_be_read_is_not_taken_for_damage() -> None:
    as_plain_user(_unreadable_copies)


def test_the_repair_is_said_once_in_the_cell_that_found_it(
    shell: InteractiveShell, isolated: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    shell.run_cell("%%checkpoint r\nimport random\nx = random.random()")
    first = shell.user_ns["x"]
    for name in (info.FILE, info.BACKUP):
        (isolated / "store" / name).write_bytes(b"\xffgarbage")
    capsys.readouterr()
    InteractiveShell.clear_instance()
    fresh = InteractiveShell.instance()
    fresh.run_line_magic("load_ext", "ipy_resume")
    try:
        fresh.run_cell("%%checkpoint r\nimport random\nx = random.random()")
        err = capsys.readouterr().err
        assert fresh.user_ns["x"] == first and "restored 'r'" in err
        lines = [line for line in err.splitlines() if "store.backup.json" in line]
        assert len(lines) == 1 and "rebuilt from the manifests" in lines[0], err
        assert "permission" not in err
        fresh.run_cell("%%checkpoint r\nimport random\nx = random.random()")
        assert "store.json" not in capsys.readouterr().err
    finally:
        fresh.history_manager.end_session()
        InteractiveShell.clear_instance()


def _message_in_a_cell(base: Path) -> None:
    os.environ.update(
        IPY_RESUME_DIR=str(base / "store"), JUPYTER_DATA_DIR=str(base / "jupyter-data")
    )
    os.chdir(base)
    store = Store(base / "store", key=KEY)
    _ = store.seed_base
    for name in (info.FILE, info.BACKUP):
        (store.root / name).write_bytes(b"garbage")
    store.root.chmod(0o555)
    InteractiveShell.clear_instance()
    sh = InteractiveShell.instance()
    sh.run_line_magic("load_ext", "ipy_resume")
    err = io.StringIO()
    with redirect_stderr(err):
        sh.run_cell("%%checkpoint p\ny = 2")
    assert sh.user_ns["y"] == 2
    text = err.getvalue()
    assert "cannot be used" in text and "store.json is not valid JSON" in text, text
    assert "check the folder's permissions" in text, text


def test_the_permission_message_reaches_the_cell() -> None:
    as_plain_user(_message_in_a_cell)
