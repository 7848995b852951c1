"""Signing key, HMAC signatures and the trust rules of manifests."""

from __future__ import annotations

import json
import multiprocessing
import os
import stat
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ipy_resume.store import (
    FormatTooNew,
    KeyFileError,
    ManifestError,
    Store,
    Untrusted,
    load_or_create_key,
    signing,
)
from ipy_resume.store import manifest as mf
from ipy_resume.store.manifest import FORMAT_VERSION

KEY_A = bytes(range(32))
KEY_B = bytes(range(1, 33))


@pytest.fixture(autouse=True)
def _isolated_data_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    data = tmp_path / "jupyter-data"
    monkeypatch.setenv("JUPYTER_DATA_DIR", str(data))
    return data


def test_sign_and_verify() -> None:
    sig = signing.sign(KEY_A, b"payload")
    assert len(sig) == 64 and int(sig, 16) >= 0
    assert signing.verify(KEY_A, b"payload", sig)
    assert not signing.verify(KEY_A, b"payload", sig.upper())  # exact text only
    assert not signing.verify(KEY_B, b"payload", sig)
    assert not signing.verify(KEY_A, b"payloaD", sig)
    assert not signing.verify(KEY_A, b"payload", None)
    assert not signing.verify(KEY_A, b"payload", "é" * 64)


def test_key_created_under_jupyter_data_dir_with_mode_0600(_isolated_data_dir: Path) -> None:
    key = load_or_create_key()
    path = _isolated_data_dir / "ipy_resume" / "signing.key"
    assert signing.default_key_path() == path
    assert path.is_file()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert len(key) == 32
    assert path.read_text().strip() == key.hex()
    assert load_or_create_key() == key  # stable
    assert sorted(p.name for p in path.parent.iterdir()) == ["signing.key", "signing.key.backup"]
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700


def test_explicit_key_path(tmp_path: Path) -> None:
    path = tmp_path / "k" / "my.key"
    key = load_or_create_key(path)
    assert load_or_create_key(path) == key
    assert load_or_create_key(tmp_path / "other.key") != key


@pytest.mark.parametrize("content", [b"", b"not hex at all", b"abcd", b"\xff\xfe" * 40])
def test_malformed_key_file(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "signing.key"
    path.write_bytes(content)
    path.chmod(0o600)
    with pytest.raises(KeyFileError) as info:
        load_or_create_key(path)
    assert "malformed" in str(info.value) and str(path) in str(info.value)
    assert "\n" not in str(info.value)


def test_group_readable_key_warns(tmp_path: Path) -> None:
    path = tmp_path / "signing.key"
    load_or_create_key(path)
    path.chmod(0o644)
    with pytest.warns(UserWarning, match="readable by other users"):
        load_or_create_key(path)


def _race_worker(path: str, barrier: Any, out: Any) -> None:
    barrier.wait()
    out.put(load_or_create_key(Path(path)).hex())


def test_eight_processes_racing_agree_on_one_key(tmp_path: Path) -> None:
    ctx: Any = multiprocessing.get_context("fork" if hasattr(os, "fork") else "spawn")
    barrier = ctx.Barrier(8)
    out = ctx.Queue()
    path = tmp_path / "race" / "signing.key"
    procs = [ctx.Process(target=_race_worker, args=(str(path), barrier, out)) for _ in range(8)]
    for p in procs:
        p.start()
    keys = [out.get(timeout=60) for _ in procs]
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    assert len(set(keys)) == 1
    assert path.read_text().strip() == keys[0]
    assert sorted(p.name for p in path.parent.iterdir()) == ["signing.key", "signing.key.backup"]


def test_store_default_key_comes_from_jupyter_data_dir(
    tmp_path: Path, _isolated_data_dir: Path
) -> None:
    store = Store(tmp_path / "st")
    assert store.key == load_or_create_key()
    assert (_isolated_data_dir / "ipy_resume" / "signing.key").exists()
    assert not (tmp_path / "st").exists()  # the store folder is created lazily


# ---------------------------------------------------------------------------
# manifests under the wrong key, unsigned, too new, tampered


def _saved(tmp_path: Path, key: bytes = KEY_A) -> tuple[Store, Path]:
    store = Store(tmp_path / "st", key=key)
    result = store.save("train", "abc", {"x": 1})
    assert result.manifest.path is not None
    return store, result.manifest.path


def _rewrite(path: Path, change: dict[str, object], *, drop_signature: bool = False) -> None:
    doc = json.loads(path.read_text())
    doc.update(change)
    if drop_signature:
        del doc["signature"]
    path.write_text(json.dumps(doc))


def test_store_under_another_key_is_untrusted(tmp_path: Path) -> None:
    _, path = _saved(tmp_path, KEY_A)
    other = Store(tmp_path / "st", key=KEY_B)
    with pytest.raises(Untrusted) as info:
        other.find("train", "abc")
    msg = str(info.value)
    assert "another key" in msg and "'train'" in msg
    assert "ipy-resume trust --store" in msg and str(tmp_path / "st") in msg
    assert f" in {path.relative_to(tmp_path / 'st').as_posix()} " in msg  # relative to the root
    assert "\n" not in msg
    assert other.history("train") == [] and other.manifests() == []
    problems = other.verify()
    assert len(problems) == 1 and "another key" in problems[0]


def test_trust_re_signs_a_store(tmp_path: Path) -> None:
    _saved(tmp_path, KEY_A)
    other = Store(tmp_path / "st", key=KEY_B)
    assert other.trust() == 1
    m = other.find("train", "abc")
    assert m is not None and other.load_values(m) == {"x": 1}
    with pytest.raises(Untrusted):  # and the old key no longer verifies
        Store(tmp_path / "st", key=KEY_A).find("train", "abc")


def test_unsigned_manifest_is_untrusted(tmp_path: Path) -> None:
    store, path = _saved(tmp_path)
    _rewrite(path, {}, drop_signature=True)
    with pytest.raises(Untrusted, match="unsigned"):
        store.find("train", "abc")


@pytest.mark.parametrize(
    "change",
    [{"complete": False}, {"key": "abd"}, {"info": {"evil": 1}}, {"signature": "0" * 64}],
)
@pytest.mark.parametrize("rechecked", [False, True])
def test_tampered_manifest_is_refused_as_damaged(
    tmp_path: Path, change: dict[str, object], rechecked: bool
) -> None:
    # Our signer with content that does not verify is damage (healed: quarantined once a
    # sound checkpoint replaces it), whether or not its unkeyed checksum was redone.
    store, path = _saved(tmp_path)
    _rewrite(path, change)
    if rechecked:
        doc = json.loads(path.read_text())
        doc["checksum"] = mf.checksum(doc)
        path.write_text(json.dumps(doc))
    with pytest.raises(ManifestError, match="is damaged"):
        store.find("train", "abc")


def test_tampered_manifest_of_another_signer_is_untrusted(tmp_path: Path) -> None:
    store, path = _saved(tmp_path)
    doc = json.loads(path.read_text())
    doc["complete"] = False
    doc["signer"] = "f" * 16
    doc["checksum"] = mf.checksum(doc)
    path.write_text(json.dumps(doc))
    with pytest.raises(Untrusted, match="another key"):
        store.find("train", "abc")


def test_tampered_blob_reference_is_refused(tmp_path: Path) -> None:
    store, path = _saved(tmp_path)
    doc = json.loads(path.read_text())
    ref = doc["values"]["x"]
    ref["checksum"]["hex"] = ref["blob"] = "0" * 64
    path.write_text(json.dumps(doc))
    with pytest.raises(ManifestError, match="is damaged"):
        store.find("train", "abc")


def test_format_too_new(tmp_path: Path) -> None:
    store, path = _saved(tmp_path)
    _rewrite(path, {"format": 99})
    with pytest.raises(FormatTooNew) as info:
        store.find("train", "abc")
    assert "99" in str(info.value) and f"format {FORMAT_VERSION}" in str(info.value)
    assert info.value.found == 99 and info.value.supported == FORMAT_VERSION


def test_format_checked_before_signature(tmp_path: Path) -> None:
    store, path = _saved(tmp_path)
    _rewrite(path, {"format": FORMAT_VERSION + 1}, drop_signature=True)
    with pytest.raises(FormatTooNew):
        store.find("train", "abc")


@pytest.mark.parametrize("content", [b"{not json", b"[1, 2]", b'{"format": "one"}', b"\xff"])
def test_unreadable_manifest(tmp_path: Path, content: bytes) -> None:
    store, path = _saved(tmp_path)
    path.write_bytes(content)
    with pytest.raises(ManifestError) as info:
        store.find("train", "abc")
    assert "manifests/" in str(info.value)


def test_signed_but_malformed_manifest(tmp_path: Path) -> None:
    store, path = _saved(tmp_path)
    doc = json.loads(path.read_text())
    del doc["signature"]
    doc["values"]["x"]["kind"] = "mystery"
    doc["checksum"] = mf.checksum(doc)
    doc["signature"] = signing.sign(KEY_A, mf.canonical_json(doc))
    path.write_text(json.dumps(doc))
    with pytest.raises(ManifestError, match="malformed"):
        store.find("train", "abc")


def test_manifest_moved_to_another_key_is_not_used(tmp_path: Path) -> None:
    store, path = _saved(tmp_path)
    moved = path.parent.parent / "fff" / path.name
    moved.parent.mkdir()
    path.rename(moved)
    assert store.find("train", "abc") is None
    with pytest.raises(ManifestError, match="wrong cell or key"):
        store.find("train", "fff")


def test_bad_newest_manifest_falls_back_to_an_older_good_one(tmp_path: Path) -> None:
    store, _old = _saved(tmp_path)
    newer = store.save("train", "abc", {"x": 2}).manifest
    assert newer.path is not None
    assert store.find("train", "abc") == newer
    _rewrite(newer.path, {"complete": True, "info": {"tampered": True}})
    found = store.find("train", "abc")
    assert found is not None and store.load_values(found) == {"x": 1}


def test_duplicate_json_keys_are_rejected() -> None:
    with pytest.raises(ManifestError):
        mf.decode(b'{"format": 1, "format": 1}', KEY_A)


_json_leaves = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(),
)
_json_docs = st.recursive(
    _json_leaves,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=40,
)


@settings(max_examples=400, deadline=None)
@given(_json_docs)
def test_the_manifest_layout_is_byte_for_byte_what_json_writes(doc: Any) -> None:
    # Readers insist on the layout byte for byte, and files written by earlier builds
    # used json's own indented writer: the faster writer must never differ from it.
    expected = json.dumps(doc, sort_keys=True, indent=1, ensure_ascii=False).encode() + b"\n"
    assert (
        mf._file_bytes({"doc": doc})
        == json.dumps({"doc": doc}, sort_keys=True, indent=1, ensure_ascii=False).encode() + b"\n"
    )
    if isinstance(doc, dict):
        assert mf._file_bytes(doc) == expected


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_the_manifest_layout_refuses_what_json_refuses(bad: float) -> None:
    with pytest.raises(ValueError):
        mf._file_bytes({"a": [1, {"b": bad}]})


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.text(), _json_docs, max_size=6))
def test_the_canonical_form_joined_from_top_level_pieces_is_the_canonical_form(
    doc: dict[str, Any],
) -> None:
    # encode signs what it joins from each top-level value's encoding: decode checks the
    # signature over canonical_json of the whole document, so the two must never differ
    pieces = {k: mf._CANONICAL.encode(v) for k, v in doc.items()}
    assert mf._joined(pieces).encode("utf-8") == mf.canonical_json(doc)


def test_a_manifest_file_is_its_signed_compact_form_and_any_other_layout_is_refused(
    tmp_path: Path,
) -> None:
    store, path = _saved(tmp_path)
    data = path.read_bytes()
    doc = json.loads(data)
    assert doc["format"] == FORMAT_VERSION >= mf.COMPACT_FORMAT
    assert data == mf.canonical_json(doc) + b"\n"  # one line, what is signed plus the signature
    body = {k: v for k, v in doc.items() if k != "signature"}
    assert signing.verify(KEY_A, mf.canonical_json(body), doc["signature"])
    path.write_bytes(mf._file_bytes(doc))  # the same content, laid out as format 2 was
    fresh = Store(store.root, key=KEY_A)
    with pytest.raises(ManifestError, match="altered"):
        fresh.find("train", "abc")


def test_a_format_2_manifest_signed_again_keeps_the_layout_its_readers_insist_on() -> None:
    m = mf.Manifest(
        id="0123456789abcdef",
        cell_id="c",
        key="k",
        created="2026-01-01T00:00:00.000Z",
        complete=True,
        values={},
        extras={},
        failed={},
        info={"a": [1, "é"]},
        versions={"python": "3.11"},
        bytes=0,
        bytes_written=0,
        format=2,
    )
    data = mf.encode(m, KEY_A)
    doc = json.loads(data)
    assert data == mf._file_bytes(doc)  # indented, byte for byte as json writes it
    assert mf.decode(data, KEY_A).format == 2
    m.format = 3
    assert mf.decode(mf.encode(m, KEY_A), KEY_A).info == {"a": [1, "é"]}


# ---------------------------------------------------------------------------
# the key and its backup damaged together


def _flip_two(path: Path, at: int) -> None:
    data = bytearray(path.read_bytes())
    for i in (at, at + 37):
        data[i % len(data)] ^= 0x41
    path.write_bytes(bytes(data))


def test_key_and_backup_both_flipped_keep_the_key(tmp_path: Path) -> None:
    path = tmp_path / "ipy_resume" / "signing.key"
    key = load_or_create_key(path)
    backup = signing.backup_path(path)
    good = backup.read_bytes()
    for at in (0, 5, 70, 90, 200, 260):  # the key, and each of the backup's copies
        _flip_two(path, 3)
        _flip_two(backup, at)
        notes: list[str] = []
        assert load_or_create_key(path, notes=notes) == key
        assert path.read_text() == key.hex() + "\n" and backup.read_bytes() == good
        (note,) = notes
        assert str(path) in note and "rebuilt from" in note and "\n" not in note
    assert load_or_create_key(path, notes=notes) == key and len(notes) == 1  # said once


def test_backup_damaged_alone_is_rebuilt_from_the_key(tmp_path: Path) -> None:
    path = tmp_path / "signing.key"
    key = load_or_create_key(path)
    backup = signing.backup_path(path)
    backup.write_bytes(b"garbage")
    notes: list[str] = []
    assert load_or_create_key(path, notes=notes) == key
    assert notes == [f"the signing key's backup {backup} was damaged: rebuilt from the key"]


def test_key_and_backup_beyond_reading_are_set_aside_and_a_new_key_made(tmp_path: Path) -> None:
    path = tmp_path / "ipy_resume" / "signing.key"
    old = load_or_create_key(path)
    backup = signing.backup_path(path)
    path.write_bytes(b"garbage in the key")
    backup.write_bytes(b"garbage in the backup")
    notes: list[str] = []
    new = load_or_create_key(path, notes=notes)
    assert new != old and load_or_create_key(path) == new
    (note,) = notes
    assert "signing.key" in note and "backup" in note and "a new key was made" in note
    aside = sorted(p.name.split(".damaged-")[0] for p in path.parent.glob("*.damaged-*"))
    assert aside == ["signing.key", "signing.key.backup"]
    kept = {p.read_bytes() for p in path.parent.glob("*.damaged-*")}
    assert kept == {b"garbage in the key", b"garbage in the backup"}  # never deleted


def test_backups_of_both_layouts_read(tmp_path: Path) -> None:
    path = tmp_path / "signing.key"
    key = load_or_create_key(path)
    backup = signing.backup_path(path)
    # versions before the spare copies read the first 192 bytes and want two words there
    words = backup.read_bytes()[:192].split()
    assert len(words) == 2 and bytes.fromhex(words[0].decode()) == key
    older = b"\n".join(words) + b"\n"
    backup.write_bytes(older)
    path.unlink()
    assert load_or_create_key(path) == key
    assert backup.read_bytes() == older  # a sound backup of the older layout is left alone


@pytest.mark.parametrize(
    "env",
    [
        {},
        {"XDG_DATA_HOME": "/xdg/data"},
        {"XDG_DATA_HOME": ""},
        {"JUPYTER_DATA_DIR": "/jd"},
        {"JUPYTER_PLATFORM_DIRS": "1"},
        {"JUPYTER_PLATFORM_DIRS": "0", "XDG_DATA_HOME": "/xdg/data"},
    ],
)
def test_key_folder_is_jupyter_cores_without_importing_it(
    env: dict[str, str], tmp_path: Path
) -> None:
    # A fresh process each: whether jupyter_core is imported is what the fast path asks.
    import subprocess
    import sys

    script = (
        "import json, sys\n"
        "from ipy_resume.store import signing\n"
        "ours = signing.jupyter_data_dir()\n"
        "imported = 'jupyter_core.paths' in sys.modules\n"
        "from jupyter_core.paths import jupyter_data_dir\n"
        "print(json.dumps([ours, jupyter_data_dir(), imported]))\n"
    )
    base = {k: v for k, v in os.environ.items() if not k.startswith(("JUPYTER_", "XDG_"))}
    home = tmp_path / "home"
    (tmp_path / "real-home").mkdir()
    home.symlink_to(tmp_path / "real-home")  # jupyter_core resolves the home folder
    out = subprocess.run(
        [sys.executable, "-c", script],
        env={**base, "HOME": str(home), **env},
        capture_output=True,
        text=True,
        check=True,
    )
    ours, theirs, imported = json.loads(out.stdout)
    assert ours == theirs
    assert imported == ("JUPYTER_PLATFORM_DIRS" in env)
