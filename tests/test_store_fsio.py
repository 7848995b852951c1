"""fsio: atomic, durable writes and their fault-injection hooks."""

from __future__ import annotations

import errno
import os
import stat
import threading
from pathlib import Path
from typing import Any

import pytest

from ipy_resume.store import fsio


def _temp_files(folder: Path) -> list[str]:
    return [p.name for p in folder.rglob("*") if fsio.is_temp_name(p.name)]


def test_atomic_write_creates_file_and_leaves_no_temp(tmp_path: Path) -> None:
    target = tmp_path / "a.bin"
    with fsio.atomic_write(target) as f:
        assert f.write(b"hello ") == 6
        f.write(memoryview(b"world"))
        assert f.tell() == 11
    assert target.read_bytes() == b"hello world"
    assert _temp_files(tmp_path) == []


def test_atomic_write_accepts_multibyte_buffers(tmp_path: Path) -> None:
    import array

    target = tmp_path / "a.bin"
    data = array.array("d", [1.0, 2.0, 3.0])
    with fsio.atomic_write(target) as f:
        assert f.write(data) == 24
    assert target.read_bytes() == data.tobytes()


@pytest.mark.parametrize("exc", [RuntimeError("boom"), KeyboardInterrupt()])
def test_exception_mid_write_keeps_old_content(tmp_path: Path, exc: BaseException) -> None:
    target = tmp_path / "a.bin"
    target.write_bytes(b"old")
    with pytest.raises(type(exc)), fsio.atomic_write(target) as f:
        f.write(b"new new new")
        raise exc
    assert target.read_bytes() == b"old"
    assert _temp_files(tmp_path) == []


def test_exception_mid_write_of_new_file_leaves_nothing(tmp_path: Path) -> None:
    target = tmp_path / "a.bin"
    with pytest.raises(RuntimeError), fsio.atomic_write(target) as f:
        f.write(b"partial")
        raise RuntimeError
    assert not target.exists()
    assert list(tmp_path.iterdir()) == []


def test_enospc_from_write_hook(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "a.bin"
    target.write_bytes(b"old")
    real_write = fsio._write
    calls = {"n": 0}

    def failing_write(fd: int, data: Any) -> int:
        calls["n"] += 1
        if calls["n"] > 1:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_write(fd, memoryview(data)[:3])  # a short write first

    monkeypatch.setattr(fsio, "_write", failing_write)
    with pytest.raises(OSError) as info, fsio.atomic_write(target) as f:
        f.write(b"0123456789")
    assert info.value.errno == errno.ENOSPC
    assert target.read_bytes() == b"old"
    assert _temp_files(tmp_path) == []


def test_short_writes_are_completed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real_write = fsio._write
    monkeypatch.setattr(fsio, "_write", lambda fd, data: real_write(fd, memoryview(data)[:7]))
    target = tmp_path / "a.bin"
    payload = bytes(range(256)) * 10
    with fsio.atomic_write(target) as f:
        f.write(payload)
    assert target.read_bytes() == payload


def _record_calls(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, Any]]:
    log: list[tuple[str, Any]] = []

    def wrap(name: str) -> None:
        real = getattr(fsio, name)

        def wrapper(*args: Any) -> Any:
            if name == "_fsync":
                kind = "dir" if stat.S_ISDIR(os.fstat(args[0]).st_mode) else "file"
                log.append(("fsync", kind))
            else:
                log.append((name.lstrip("_"), args))
            return real(*args)

        monkeypatch.setattr(fsio, name, wrapper)

    for name in ("_open", "_write", "_fsync", "_replace", "_link", "_unlink", "_mkdir"):
        wrap(name)
    return log


def test_call_order_write_fsync_replace_dir_fsync(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = _record_calls(monkeypatch)
    target = tmp_path / "a.bin"
    with fsio.atomic_write(target) as f:
        f.write(b"abc")
    ops = [entry[0] if entry[0] != "fsync" else f"fsync-{entry[1]}" for entry in log]
    assert ops == ["open", "write", "fsync-file", "replace", "fsync-dir"]
    src, dst = log[3][1]
    assert Path(src).parent == tmp_path and fsio.is_temp_name(Path(src).name)
    assert Path(dst) == target


def test_exclusive_publishes_with_link_and_never_overwrites(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "a.json"
    log = _record_calls(monkeypatch)
    with fsio.atomic_write(target, exclusive=True) as f:
        f.write(b"first")
    ops = [entry[0] for entry in log]
    assert ops == ["open", "write", "fsync", "link", "unlink", "fsync"]
    with pytest.raises(FileExistsError), fsio.atomic_write(target, exclusive=True) as f:
        f.write(b"second")
    assert target.read_bytes() == b"first"
    assert _temp_files(tmp_path) == []


def test_exclusive_race_has_one_winner(tmp_path: Path) -> None:
    target = tmp_path / "store.json"
    barrier = threading.Barrier(8)
    winners: list[int] = []

    def contender(i: int) -> None:
        barrier.wait()
        try:
            with fsio.atomic_write(target, exclusive=True) as f:
                f.write(f"writer {i}".encode())
        except FileExistsError:
            return
        winners.append(i)

    threads = [threading.Thread(target=contender, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(winners) == 1
    assert target.read_text() == f"writer {winners[0]}"
    assert _temp_files(tmp_path) == []


def test_mode_is_applied(tmp_path: Path) -> None:
    target = tmp_path / "secret"
    with fsio.atomic_write(target, mode=0o600) as f:
        f.write(b"x")
    assert stat.S_IMODE(target.stat().st_mode) == 0o600


def test_makedirs_creates_and_fsyncs_parents(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = _record_calls(monkeypatch)
    deep = tmp_path / "a" / "b" / "c"
    fsio.makedirs(deep)
    assert deep.is_dir()
    mkdirs = [Path(args[0]) for op, args in log if op == "mkdir"]
    assert mkdirs == [tmp_path / "a", tmp_path / "a" / "b", deep]
    assert [entry for entry in log if entry[0] == "fsync"] == [("fsync", "dir")] * 3
    log.clear()
    fsio.makedirs(deep)  # idempotent, no work
    assert log == []


def test_makedirs_tolerates_a_concurrent_creator(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_mkdir = fsio._mkdir

    def racing_mkdir(path: Any, mode: int = 0o777) -> None:
        real_mkdir(path, mode)  # "another process" got there first
        raise FileExistsError(errno.EEXIST, "exists", str(path))

    monkeypatch.setattr(fsio, "_mkdir", racing_mkdir)
    fsio.makedirs(tmp_path / "x" / "y")
    assert (tmp_path / "x" / "y").is_dir()


def test_makedirs_refuses_a_file_in_the_way(tmp_path: Path) -> None:
    (tmp_path / "x").write_bytes(b"")
    with pytest.raises(OSError):
        fsio.makedirs(tmp_path / "x" / "y")


def test_move_and_remove(tmp_path: Path) -> None:
    (tmp_path / "q").mkdir()
    src = tmp_path / "a"
    src.write_bytes(b"data")
    fsio.move(src, tmp_path / "q" / "a")
    assert not src.exists() and (tmp_path / "q" / "a").read_bytes() == b"data"
    fsio.remove(tmp_path / "q" / "a")
    assert not (tmp_path / "q" / "a").exists()
    fsio.remove(tmp_path / "q" / "a")  # missing_ok
    with pytest.raises(FileNotFoundError):
        fsio.remove(tmp_path / "q" / "a", missing_ok=False)


def test_errors_are_one_line() -> None:
    err = fsio.CorruptBlob("bad\nthing  here", path="objects/ab/cd", reason="checksum")
    assert str(err) == "bad thing here"
    assert err.path == "objects/ab/cd" and err.reason == "checksum"
    assert isinstance(fsio.MissingBlob("x"), fsio.CorruptBlob)
    for cls in (fsio.CorruptBlob, fsio.Untrusted, fsio.FormatTooNew, fsio.ManifestError):
        assert issubclass(cls, fsio.StoreError)
