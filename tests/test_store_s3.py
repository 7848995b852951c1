"""A store in a bucket (moto's S3 server on 127.0.0.1): the same contract as a folder."""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from s3_utils import CREDENTIALS

from ipy_resume.frontends import cli
from ipy_resume.store import Store, StoreURLError, Untrusted, location, open_store, signing
from ipy_resume.store.backend import Backend, LocalBackend
from ipy_resume.store.remote import RemoteStore
from ipy_resume.store.remote_backend import FsspecBackend, RemoteError

# ---- one conformance test for every backend ---------------------------------------------------


@pytest.fixture(params=["local", "s3"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    if request.param == "local":
        return LocalBackend(tmp_path / "root")
    url = request.getfixturevalue("s3_url")
    return FsspecBackend(url)


def test_backend_primitives(backend: Backend) -> None:
    backend.put("a/b/one", [b"hello ", memoryview(b"world")])
    assert backend.get("a/b/one") == b"hello world"
    assert backend.get("a/b/one", 6, 11) == b"world"
    out = bytearray(5)
    assert backend.read_into("a/b/one", memoryview(out)) == 5 and out == b"hello"
    info = backend.stat("a/b/one")
    assert info is not None and info.size == 11 and info.age() < 600
    assert backend.stat("a/b/none") is None
    with pytest.raises(FileNotFoundError):
        backend.get("a/b/none")
    assert backend.put_if_absent("a/c", b"first")
    assert not backend.put_if_absent("a/c", b"second")
    assert backend.get("a/c") == b"first"
    assert [o.key for o in backend.list("a")] == ["a/b/one", "a/c"]
    backend.delete("a/c")
    backend.delete("a/c")  # missing is fine
    assert [o.key for o in backend.list("a")] == ["a/b/one"]


def test_put_if_absent_has_exactly_one_winner(backend: Backend) -> None:
    wins: list[int] = []

    def race(i: int) -> None:
        if backend.put_if_absent("manifests/x.json", str(i).encode()):
            wins.append(i)

    threads = [threading.Thread(target=race, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(wins) == 1
    assert backend.get("manifests/x.json") == str(wins[0]).encode()


# ---- locations -------------------------------------------------------------------------------


def test_url_whose_package_is_missing_is_one_line_and_makes_no_folder(
    isolated: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["list", "--store", "gs://bucket/team"]) == 1
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "gcsfs" in err and "pip install" in err
    assert not (isolated / "gs:").exists() and not (isolated / "s3:").exists()
    with pytest.raises(StoreURLError, match="no bucket"):
        location.resolve("s3:///team")


def test_store_from_environment_is_a_bucket(s3_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from ipy_resume.store.location import default_store_dir

    monkeypatch.setenv("IPY_RESUME_DIR", s3_url)
    assert default_store_dir() == s3_url
    assert isinstance(open_store(default_store_dir()), RemoteStore)
    assert not Path("s3:").exists()


def test_key_file_from_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    key_file = tmp_path / "secret" / "key"
    monkeypatch.setenv("IPY_RESUME_KEY_FILE", str(key_file))
    key = signing.load_or_create_key()
    assert key_file.stat().st_mode & 0o077 == 0
    monkeypatch.setenv("JUPYTER_DATA_DIR", str(tmp_path / "elsewhere"))
    assert signing.load_or_create_key() == key


# ---- the store -------------------------------------------------------------------------------


def test_save_restore_and_a_second_restore_from_the_cache(s3_url: str) -> None:
    store = open_store(s3_url)
    assert isinstance(store, RemoteStore)
    big = np.random.default_rng(1).random(3_000_000)
    saved = store.save("train", "k1", {"big": big, "cfg": {"lr": 0.1}, "s": "text"})
    assert saved.manifest.complete
    m = store.find("train", "k1")
    assert m is not None and m.id == saved.manifest.id
    fresh = open_store(s3_url)  # another process would start like this
    values = fresh.load_values(fresh.find("train", "k1"))  # type: ignore[arg-type]
    assert np.array_equal(values["big"], big) and values["cfg"] == {"lr": 0.1}
    backend = fresh.backend
    assert isinstance(backend, FsspecBackend)
    before = backend.requests
    again = fresh.load_values(m)  # type: ignore[arg-type]
    assert np.array_equal(again["big"], big)
    assert backend.requests == before  # every blob came from the verified local cache
    assert fresh.verify() == []
    assert cli.main(["verify", "--store", s3_url]) == 0


def test_a_tampered_cache_file_is_never_used(s3_url: str) -> None:
    store = open_store(s3_url)
    assert isinstance(store, RemoteStore)
    arr = np.arange(100_000.0)
    m = store.save("c", "k", {"a": arr}).manifest
    store.load_values(m)
    cache = store.blobs.cache
    assert cache is not None
    ref = m.values["a"]
    path = cache.path(ref.blob)
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF
    path.write_bytes(bytes(data))
    assert np.array_equal(open_store(s3_url).load_values(m)["a"], arr)


def test_cli_lists_shows_and_gcs_a_bucket(s3_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    store = open_store(s3_url)
    for i in range(3):
        store.save("loop", f"k{i}", {"i": i})
    assert cli.main(["list", "--json", "--store", s3_url]) == 0
    records = json.loads(capsys.readouterr().out)
    assert [r["cell_id"] for r in records] == ["loop"] * 3
    assert cli.main(["gc", "--keep-last", "1", "--store", s3_url]) == 0
    assert "removed 2 checkpoint(s)" in capsys.readouterr().out
    assert [m.info for m in open_store(s3_url).manifests()] == [{}]
    assert cli.main(["show", "loop", "--store", s3_url]) == 0


def test_planted_checkpoint_under_another_key_is_refused_and_never_unpickled(
    s3_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    canary = tmp_path / "planted-pickle-ran"

    class Boom:
        def __reduce__(self) -> Any:
            return (os.system, (f"touch {canary}",))

    stranger = RemoteStore(s3_url, key=b"s" * 32)
    stranger.save("cell", "k", {"x": Boom()})
    mine = open_store(s3_url)
    with pytest.raises(Untrusted, match=f"ipy-resume trust --store {s3_url}"):
        mine.find("cell", "k")
    # the values cannot be reached any other way either: listing skips it, verify names it
    assert mine.manifests() == []
    assert any("another key" in line for line in mine.verify())
    assert not canary.exists()
    # adopting it is an explicit step (and then its author's code runs: that is the trust model)
    assert pickle.dumps(1)  # (nothing above unpickled anything)


def test_journal_shows_every_kernels_events(s3_url: str) -> None:
    from ipy_resume.store.journal import Event

    a, b = open_store(s3_url), open_store(s3_url)
    a.journal().append(Event(cell_id="train", session="A", outcome="executed"))
    b.journal().append(Event(cell_id="train", session="B", outcome="restored"))
    sessions = {e.session for e in open_store(s3_url).journal().events()}
    assert sessions == {"A", "B"}
    b.journal().sync(force=True)
    assert {e.session for e in b.journal().events()} == {"A", "B"}


def test_a_restore_event_reaches_the_bucket_without_the_hit_waiting(
    s3_url: str, tmp_path: Path
) -> None:
    """append_later: in the local index at once, in the bucket by the time the process ends."""
    from ipy_resume.store.journal import Event

    journal = open_store(s3_url).journal()
    journal.append_later(Event(cell_id="warm", session="A", outcome="restored"))  # at once
    event = journal.append_later(Event(cell_id="train", session="A", outcome="restored"))
    assert event.event_id in [e.event_id for e in journal.index.events()]
    assert journal.flush(timeout=60) and journal.deferred_error is None
    assert [e.session for e in open_store(s3_url).journal().events()] == ["A", "A"]

    code = (
        "import sys\n"
        "from ipy_resume.store import open_store\n"
        "from ipy_resume.store.journal import Event\n"
        "j = open_store(sys.argv[1]).journal()\n"
        "j.append_later(Event(cell_id='warm', session='B', outcome='restored'))\n"
        "j.append_later(Event(cell_id='train', session='B', outcome='restored'))\n"
    )  # and exits at once: the upload is finished on the way out
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parent.parent))
    env["IPY_RESUME_CACHE_DIR"] = str(tmp_path / "other-cache")
    out = subprocess.run(
        [sys.executable, "-c", code, s3_url], env=env, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    journal.sync(force=True)
    assert sorted(e.session for e in journal.events()) == ["A", "A", "B", "B"]


def test_a_failed_event_upload_is_kept_for_the_message(s3_server: Any, s3_url: str) -> None:
    from ipy_resume.store.journal import Event

    journal = open_store(s3_url).journal()
    journal.append_later(Event(cell_id="train", session="A", outcome="restored"))  # at once
    assert journal.deferred_error is None
    bucket = s3_url.split("/")[2]
    client = s3_server.client()
    for listed in client.list_objects_v2(Bucket=bucket).get("Contents", []):
        client.delete_object(Bucket=bucket, Key=listed["Key"])
    client.delete_bucket(Bucket=bucket)  # the bucket goes away
    journal.append_later(Event(cell_id="train", session="A", outcome="restored"))
    assert journal.flush(timeout=120)
    assert isinstance(journal.deferred_error, OSError)
    assert "does not exist" in str(journal.deferred_error)


# ---- errors ----------------------------------------------------------------------------------


def test_missing_bucket_is_one_line(s3_server: Any, s3_url: str) -> None:
    store = open_store("s3://no-such-bucket-here/team")
    with pytest.raises(Exception) as info:
        store.save("c", "k", {"a": 1})
    text = str(info.value)
    assert "bucket 'no-such-bucket-here' does not exist" in text and "\n" not in text
    assert "still in memory" in text


def test_wrong_endpoint_is_one_line_without_credentials(
    s3_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from s3_utils import free_port

    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{free_port()}")
    store = RemoteStore(s3_url, backend=FsspecBackend(s3_url, retry_seconds=1.0))
    with pytest.raises(Exception) as info:
        store.save("c", "k", {"a": 1})
    text = str(info.value)
    assert "cannot reach http://127.0.0.1:" in text and "AWS_ENDPOINT_URL" in text
    assert CREDENTIALS["AWS_SECRET_ACCESS_KEY"] not in text
    assert CREDENTIALS["AWS_ACCESS_KEY_ID"] not in text


def test_refused_credentials_and_denied_access_are_one_line(s3_url: str) -> None:
    backend = FsspecBackend(s3_url)
    from botocore.exceptions import ClientError

    def error(code: str, status: int) -> ClientError:
        return ClientError(
            {
                "Error": {"Code": code, "Message": CREDENTIALS["AWS_SECRET_ACCESS_KEY"]},
                "ResponseMetadata": {"HTTPStatusCode": status},
            },
            "PutObject",
        )

    expired = backend.translate(error("ExpiredToken", 400), "writing x")
    denied = backend.translate(error("AccessDenied", 403), "writing x")
    assert expired.kind == "credentials" and "refresh them" in str(expired)
    assert denied.kind == "denied" and "s3:PutObject" in str(denied)
    for exc in (expired, denied):
        assert "\n" not in str(exc) and CREDENTIALS["AWS_SECRET_ACCESS_KEY"] not in str(exc)


def test_a_failed_save_keeps_every_value_in_the_kernel(
    shell: Any, s3_url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("IPY_RESUME_DIR", "s3://no-such-bucket-here/team")
    shell.run_cell("%%checkpoint c\nx = 41 + 1\ny = [x]")
    assert shell.user_ns["x"] == 42 and shell.user_ns["y"] == [42]
    err = capsys.readouterr().err
    assert "bucket 'no-such-bucket-here' does not exist" in err
    assert all(len(line) < 400 for line in err.splitlines())


def test_two_processes_share_a_bucket(s3_url: str, tmp_path: Path) -> None:
    """A checkpoint saved by one process is restored by another with its own cache."""
    key_file = tmp_path / "team.key"
    signing.load_or_create_key(key_file)
    code = (
        "import sys, numpy as np\n"
        "from ipy_resume.store import open_store\n"
        "s = open_store(sys.argv[1])\n"
        "if sys.argv[2] == 'save':\n"
        "    s.save('c', 'k', {'a': np.arange(10.0)})\n"
        "else:\n"
        "    print(open_store(sys.argv[1]).load_values(s.find('c', 'k'))['a'].sum())\n"
    )
    env = dict(os.environ, IPY_RESUME_KEY_FILE=str(key_file), PYTHONPATH=os.getcwd())
    env["PYTHONPATH"] = str(Path(__file__).resolve().parent.parent)
    for step, cache in (("save", "a"), ("load", "b")):
        env["IPY_RESUME_CACHE_DIR"] = str(tmp_path / cache)
        env["JUPYTER_DATA_DIR"] = str(tmp_path / f"jd-{cache}")
        out = subprocess.run(
            [sys.executable, "-c", code, s3_url, step],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "45.0"


def test_store_is_still_a_folder_for_paths(tmp_path: Path) -> None:
    assert type(open_store(tmp_path / "s")) is Store
    assert open_store(tmp_path / "s").location == (tmp_path / "s").resolve()


def test_remote_error_is_an_os_error() -> None:
    assert issubclass(RemoteError, OSError)


def test_requests_per_small_save_and_restore(s3_url: str) -> None:
    """The costs page quotes these counts; a change that adds round trips shows here."""
    open_store(s3_url).save("warm", "k", {"x": 1})  # store.json and the seed exist
    counts = []
    for i in range(2):
        writer = open_store(s3_url)
        before = writer.backend.requests  # type: ignore[attr-defined]
        writer.save("c", f"k{i}", {"a": np.arange(1000.0) + i, "o": {"i": i}})
        saved = writer.backend.requests - before  # type: ignore[attr-defined]
        reader = open_store(s3_url)
        before = reader.backend.requests  # type: ignore[attr-defined]
        found = reader.find("c", f"k{i}")
        assert found is not None and reader.load_values(found)["o"] == {"i": i}
        counts.append((saved, reader.backend.requests - before))  # type: ignore[attr-defined]
    assert counts[0] == counts[1]  # the same work each time, nothing accumulates
    save, restore = counts[0]
    assert save <= 8 and restore <= 3, counts
