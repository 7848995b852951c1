"""The backend's capabilities, and the store written on them by key (a folder and moto's S3).

What only a folder can do (a file's identity, temp files beside a key, the SQLite journal)
is asked of the backend; the store never works out a path to a file of its own.
"""

from __future__ import annotations

import ast
import inspect
import json
import re
import time
from pathlib import Path

import pytest

from ipy_resume.store import Store, pending
from ipy_resume.store import store as store_module
from ipy_resume.store.backend import Backend, LocalBackend
from ipy_resume.store.journal import Journal
from ipy_resume.store.remote import RemoteStore
from ipy_resume.store.remote_backend import FsspecBackend
from ipy_resume.store.remote_journal import RemoteJournal

KEY = bytes(range(100, 132))
STORE = Path(store_module.__file__).parent


@pytest.fixture(params=["local", "s3"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    if request.param == "local":
        return LocalBackend(tmp_path / "root")
    return FsspecBackend(request.getfixturevalue("s3_url"))


def test_identity_stands_for_the_bytes(backend: Backend) -> None:
    backend.put("m/a.json", [b"one"])
    backend.keys("m", 1)  # (a bucket's identity is what its last listing said)
    first = backend.identity("m/a.json")
    data, read = backend.read_identified("m/a.json")
    assert data == b"one" and first is not None and read is not None
    assert read[0] == first[0]
    time.sleep(0.05)  # a later tick of the folder's clock
    backend.put("m/a.json", [b"two"])
    backend.keys("m", 1)
    again = backend.identity("m/a.json")
    assert again is not None and again[0] != first[0]


def test_a_folders_identity_follows_its_entries(tmp_path: Path) -> None:
    backend = LocalBackend(tmp_path / "root")
    backend.put("m/k/a.json", [b"x"])
    before = backend.identity("m/k")
    time.sleep(0.05)  # a later tick of the folder's clock
    backend.put("m/k/b.json", [b"y"])
    after = backend.identity("m/k")
    assert before is not None and after is not None and before[0] != after[0]
    with pytest.raises(FileNotFoundError):
        backend.identity("m/none")
    with pytest.raises(ValueError):
        backend.identity("m/../outside")


def test_temp_keys_lie_beside_their_key_and_are_never_listed(tmp_path: Path) -> None:
    backend = LocalBackend(tmp_path / "root")
    temp = backend.temp_key("objects/ab/cdef")
    assert temp.startswith("objects/ab/.tmp-cdef-") and temp != backend.temp_key("objects/ab/cdef")
    backend.make_parents(temp)
    backend.local_path(temp).write_bytes(b"staged")
    assert [o.key for o in backend.list("objects")] == []
    assert [o.key for o in backend.leftovers()] == [temp]


def test_a_bucket_has_no_local_files(s3_url: str) -> None:
    backend = FsspecBackend(s3_url)
    assert not backend.local_files
    with pytest.raises(NotImplementedError):
        backend.local_path("objects/ab/cd")
    with pytest.raises(NotImplementedError):
        backend.temp_key("objects/ab/cd")


def test_a_save_on_a_bucket_holds_a_lease_and_drops_it(s3_url: str) -> None:
    store = RemoteStore(s3_url, key=KEY)
    seen: list[list[str]] = []
    real = store.blobs.ready

    def ready() -> None:  # called inside the save's shared lock
        seen.append([o.key for o in store.backend.list("leases")])
        real()

    store.blobs.ready = ready  # type: ignore[method-assign]
    store.save("c", "k1", {"x": 1})
    assert len(seen) == 1 and len(seen[0]) == 1 and seen[0][0].startswith("leases/")
    assert list(store.backend.list("leases")) == []


def test_the_journal_is_chosen_by_capability(tmp_path: Path, s3_url: str) -> None:
    local = Store(tmp_path / "st", key=KEY)
    journal = local.journal()
    assert isinstance(journal, Journal)
    assert journal.path == local.backend.local_path("journal.sqlite")
    assert isinstance(RemoteStore(s3_url, key=KEY).journal(), RemoteJournal)


def test_a_bucket_store_reuses_a_verified_manifest_while_its_tag_stands(s3_url: str) -> None:
    store_module.forget_verified()
    store = RemoteStore(s3_url, key=KEY)
    saved = store.save("c", "k1", {"x": 1}).manifest
    gets: list[str] = []
    real = store.backend.get

    def get(key: str, start: int | None = None, end: int | None = None) -> bytes:
        gets.append(key)
        return real(key, start, end)

    store.backend.get = get  # type: ignore[method-assign]
    for _ in range(3):
        found = store.find("c", "k1")
        assert found is not None and found.id == saved.id
    manifests = [k for k in gets if k.startswith("manifests/")]
    assert len(manifests) == 1  # the first lookup reads it; the listing's tag stands after


def test_remote_store_overrides_only_gc() -> None:
    own = {
        name
        for name, value in vars(RemoteStore).items()
        if callable(value) or isinstance(value, property)
    }
    assert own - {"__init__"} == {"gc"}


def test_pending_records_name_staged_blobs_by_key(tmp_path: Path) -> None:
    store = Store(tmp_path / "st", key=KEY)
    snap = store.snapshot("c", "k1", {"big": bytes(range(256)) * 8192})
    snap.stage()
    try:
        (record,) = pending.records(store.backend)
        entries = json.loads(record.read_bytes())["blobs"]
        assert entries and all(
            re.fullmatch(r"objects/[0-9a-f]{2}/\.tmp-[^/]+", e[0]) for e in entries
        )
        assert all(store.backend.local_path(e[0]).exists() for e in entries)
    finally:
        snap.commit()
    assert pending.records(store.backend) == []


_PATH_JOIN = re.compile(r"(\broot\s*/|os\.path\.join\(|\.relative_to\()")
# the folder's own file layer: where keys become files
_FILE_LAYER = {"backend.py", "fsio.py", "lock.py"}
# user folders, never a store's: the signing key, the blob cache, the default store
_USER_FOLDERS = {"signing.py", "blobcache.py", "location.py", "remote_journal.py"}


def _segment(lines: list[str], node: ast.stmt) -> str:
    """The source of *node* (``ast.get_source_segment`` splits the whole file each call)."""
    end = node.end_lineno or node.lineno
    chunk = lines[node.lineno - 1 : end]
    if not chunk:
        return ""
    if len(chunk) == 1:
        return chunk[0].encode()[node.col_offset : node.end_col_offset].decode()
    first = chunk[0].encode()[node.col_offset :].decode()
    last = chunk[-1].encode()[: node.end_col_offset].decode()
    return "".join([first, *chunk[1:-1], last])


def test_no_module_joins_a_path_to_a_store_folder() -> None:
    found = []
    for path in sorted(STORE.glob("*.py")):
        if path.name in _FILE_LAYER | _USER_FOLDERS:
            continue
        source = path.read_text()
        lines = source.splitlines(keepends=True)
        tree = ast.parse(source)
        for node in ast.walk(tree):
            if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
                continue  # docstrings (their examples)
            if not isinstance(node, ast.stmt) or isinstance(
                node, (ast.FunctionDef, ast.ClassDef, ast.If, ast.For, ast.While, ast.With, ast.Try)
            ):
                continue
            text = _segment(lines, node)
            if _PATH_JOIN.search(text):
                found.append(f"{path.name}:{node.lineno}: {text.strip()[:80]}")
    assert found == []


def test_the_store_opens_no_file_by_name() -> None:
    source = inspect.getsource(store_module)
    assert "os.stat(" not in source and "os.open(" not in source and "os.listdir(" not in source
