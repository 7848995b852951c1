"""Acceptance of stores in a bucket, against moto's S3 server on 127.0.0.1 (no mocks).

Two real kernels share one bucket; a kernel is killed mid multipart upload; faults are
injected by a proxy between client and server; gc runs while another process saves.
Figures go to the "ipy_resume reliability figures" section.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import reliability_report
from deadlines import wait_until
from kernel_utils import Kernel, kernel_env
from s3_utils import FaultProxy, apply_env, s3_env

from ipy_resume.store import StoreError, open_store, signing
from ipy_resume.store import remote_backend as rb

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parent.parent


def _kernel_env(server: Any, where: Path, url: str, key_file: Path) -> dict[str, str]:
    where.mkdir(parents=True, exist_ok=True)
    env = kernel_env(where)
    env.update(s3_env(server, where))
    env.update(IPY_RESUME_DIR=url, IPY_RESUME_KEY_FILE=str(key_file))
    env["PYTHONPATH"] = str(ROOT)
    return env


def _use(monkeypatch: pytest.MonkeyPatch, server: Any, tmp_path: Path, key_file: Path) -> None:
    apply_env(monkeypatch, s3_env(server, tmp_path / "here"))
    monkeypatch.setenv("IPY_RESUME_KEY_FILE", str(key_file))


DRAW = (
    "%%checkpoint draw\n"
    "import numpy as np, random\n"
    "x = np.random.rand(4)\n"
    "r = random.random()\n"
    "print('drew', round(float(x.sum()), 12))\n"
    "x.sum() + r\n"
)


def test_two_kernels_one_bucket(s3_server: Any, tmp_path: Path) -> None:
    url = f"s3://{s3_server.bucket()}/team"
    key_file = tmp_path / "secrets" / "team.key"
    with Kernel(tmp_path / "a", _kernel_env(s3_server, tmp_path / "a", url, key_file)) as a:
        a.run("%load_ext ipy_resume")
        first = a.run(DRAW)
        assert first.status == "ok" and "drew" in first.stdout
        after_a = a.run("(float(np.random.rand()), random.random())").result
    with Kernel(tmp_path / "b", _kernel_env(s3_server, tmp_path / "b", url, key_file)) as b:
        b.run("%load_ext ipy_resume")
        again = b.run(DRAW)
        assert again.status == "ok"
        assert "restored 'draw'" in again.stderr  # not executed
        assert again.stdout == first.stdout and again.result == first.result
        assert b.run("(float(np.random.rand()), random.random())").result == after_a
        listing = b.run("%checkpoint list").stdout
        assert "draw" in listing and "no checkpoints" not in listing
        snap = b.run(
            "from ipy_resume import timeline as _t\n"
            "_s = _t.snapshot(_t.default_root())\n"
            "sorted(e['outcome'] for e in _s['events']), len({e['session'] for e in _s['events']})"
        ).result
        assert snap is not None
        assert snap["text/plain"] == "(['executed', 'restored'], 2)"
    # separate Jupyter data folders and caches, one key from the key file
    assert not (tmp_path / "a" / "jupyter-data" / "ipy_resume" / "signing.key").exists()
    assert (tmp_path / "b" / "cache" / "blobs").is_dir()
    reliability_report.record(
        "s3 two kernels",
        "kernel B restored kernel A's checkpoint from s3:// without executing: same values, "
        "output and RNG draws; B's list and panel show A's events",
    )


BIG = (
    "%%checkpoint big\n"
    "import numpy as np\n"
    "big = np.random.default_rng(7).integers(0, 255, 200_000_000, dtype=np.uint8)\n"
    "print('executed big')\n"
)


def test_kill_during_multipart_upload(
    s3_server: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bucket = s3_server.bucket()
    url = f"s3://{bucket}/team"
    key_file = tmp_path / "secrets" / "me.key"
    client = s3_server.client()
    env = _kernel_env(s3_server, tmp_path / "k", url, key_file)
    with Kernel(tmp_path / "k", env) as k:
        k.run("%load_ext ipy_resume")
        k.client.execute(BIG)
        _wait_for_an_upload(s3_server, bucket)
        os.kill(k.pid, signal.SIGKILL)
    listed = client.list_objects_v2(Bucket=bucket, Prefix="team/manifests/")
    assert listed.get("KeyCount", 0) == 0  # no checkpoint is visible
    _use(monkeypatch, s3_server, tmp_path, key_file)
    assert open_store(url).manifests() == []
    with Kernel(tmp_path / "k", env) as k:
        k.run("%load_ext ipy_resume")
        first = k.run(BIG)
        assert "executed 'big'" in first.stderr, first
        second = k.run(BIG)  # its recorded output is replayed, the cell is not run
        assert "restored 'big'" in second.stderr and "executed 'big'" not in second.stderr
        assert k.run("int(big[:1000].sum())").result == {
            "text/plain": str(
                int(np.random.default_rng(7).integers(0, 255, 1000, dtype=np.uint8).sum())
            )
        }
    store = open_store(url)
    report = store.gc()
    assert store.verify() == []
    assert not client.list_multipart_uploads(Bucket=bucket).get("Uploads")
    reliability_report.record(
        "s3 kill mid-upload",
        f"SIGKILL during the multipart upload of a 200 MB checkpoint: 0 partial checkpoints "
        f"visible; next run executed once, then restored; gc aborted "
        f"{report.removed_temp} upload(s), verify clean",
    )


def _values(i: int, size: int) -> dict[str, object]:
    rng = np.random.default_rng(i)
    return {"a": rng.random(size // 8), "o": {"i": i, "tag": f"v{i}"}}


def _same(got: dict[str, object], want: dict[str, object]) -> bool:
    return bool(np.array_equal(got["a"], want["a"])) and got["o"] == want["o"]  # type: ignore[arg-type]


def test_faults_are_retried_or_one_line(
    s3_server: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    proxy = FaultProxy(s3_server.port)
    key_file = tmp_path / "secrets" / "me.key"
    bucket = s3_server.bucket()
    url = f"s3://{bucket}/team"
    # small parts, so a multipart upload meets the faults too
    monkeypatch.setattr(rb, "PART_SIZE", 5 << 20)
    monkeypatch.setattr(rb, "MULTIPART_MIN", 10 << 20)
    _use(monkeypatch, s3_server, tmp_path, key_file)
    monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.endpoint)
    monkeypatch.setenv("IPY_RESUME_CACHE_SIZE", "0")  # every load goes to the server
    saved = failed = wrong = lost = 0
    retried = {"reset": 0, "500": 0, "503": 0}
    lines: list[str] = []
    try:
        for fault in ("reset", "500", "503"):
            # resets back to back: HTTP clients retry an idempotent request once on a
            # reused connection (RFC 9112 §9.3.1), so a lone reset never reaches our loop
            proxy.plan, proxy.every = [fault] * 6, 1 if fault == "reset" else 2
            for i in range(3):
                size = (12 << 20) if i == 0 else 200_000
                want = _values(hash((fault, i)) % 1000, size)
                store = open_store(url)
                try:
                    m = store.save("f", f"k-{fault}-{i}", want).manifest
                except StoreError as exc:
                    failed += 1
                    lines.append(str(exc))
                    continue
                finally:
                    retried[fault] += store.backend.retries  # type: ignore[attr-defined]
                saved += 1
                reader = open_store(url)
                found = reader.find("f", f"k-{fault}-{i}")
                if found is None or found.id != m.id:
                    lost += 1
                    continue
                wrong += not _same(reader.load_values(found), want)
                retried[fault] += reader.backend.retries  # type: ignore[attr-defined]
        # the server goes away mid-upload for 3 s and comes back: the save waits for it
        proxy.plan = []
        want = _values(99, 12 << 20)
        store = open_store(url)
        outcome: list[object] = []
        worker = threading.Thread(
            target=lambda: outcome.append(_try(lambda: store.save("f", "pause", want)))
        )
        worker.start()
        _wait_for_an_upload(s3_server, bucket)
        proxy.pause()
        time.sleep(3)  # the length of the outage the save must outlast, not an ordering
        proxy.resume()
        worker.join(120)
        assert outcome and not isinstance(outcome[0], BaseException), outcome
        met_the_outage = store.backend.retries  # type: ignore[attr-defined]
        assert met_the_outage, "the save finished before the server went away"
        paused = open_store(url)
        found = paused.find("f", "pause")
        assert found is not None and _same(paused.load_values(found), want)
    finally:
        proxy.close()
    assert wrong == 0 and lost == 0
    assert all("\n" not in line and "values are still in memory" in line for line in lines)
    injected = proxy.injected
    assert sum(injected.values()) >= 9
    # every HTTP error answered reaches the backoff loop: the client below makes one attempt
    assert retried["500"] >= injected["500"] and retried["503"] >= injected["503"], retried
    assert retried["reset"] >= 1, retried
    retries = sum(retried.values())
    restart = _server_restart(s3_server, tmp_path, monkeypatch)
    reliability_report.record(
        "s3 faults",
        f"{injected['reset']} connection resets, {injected['500']} HTTP 500, "
        f"{injected['503']} HTTP 503 SlowDown injected by a proxy: {retries} retries with "
        f"backoff ({retried['reset']} after resets, {retried['500']} after 500, "
        f"{retried['503']} after 503), "
        f"{saved} saves committed, {failed} one-line failures, 0 wrong values, 0 lost "
        f"results; server unreachable 3 s mid-upload: save retried and committed; {restart}",
    )


def _wait_for_an_upload(s3_server: Any, bucket: str) -> None:
    """Until a multipart upload is under way (asked of the server, not through a proxy)."""
    client = s3_server.client()
    wait_until(
        lambda: client.list_multipart_uploads(Bucket=bucket).get("Uploads"),
        180,
        what="a multipart upload to begin",
        every=0.005,
    )


def _try(fn: Any) -> object:
    try:
        return fn()
    except BaseException as exc:
        return exc


def _server_restart(s3_server: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """moto stopped mid-save and restarted (empty: it keeps nothing): never a wrong value."""
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3_server.endpoint)
    monkeypatch.setattr(rb, "RETRY_SECONDS", 30.0)
    bucket = s3_server.bucket()
    url = f"s3://{bucket}/team"
    want = _values(7, 30 << 20)
    store = open_store(url)
    store.seed_base  # noqa: B018 - the store exists before the save starts
    outcome: list[object] = []
    worker = threading.Thread(
        target=lambda: outcome.append(_try(lambda: store.save("f", "restart", want)))
    )
    worker.start()
    _wait_for_an_upload(s3_server, bucket)
    s3_server.stop()
    time.sleep(1)  # the server stays away a moment: the outage, not an ordering
    s3_server.start()
    s3_server.client().create_bucket(Bucket=bucket)  # the bucket comes back, its data not
    worker.join(120)
    result = outcome[0] if outcome else None
    reader = open_store(url)
    try:
        found = reader.find("f", "restart")
        if found is not None:
            assert _same(reader.load_values(found), want)
            return "moto restarted mid-save: the save completed, restored exactly"
    except StoreError as exc:
        assert "\n" not in str(exc)
        return "moto restarted mid-save (its data lost): the restore refused the lost blobs"
    if isinstance(result, StoreError):
        assert "\n" not in str(result)
        return "moto restarted mid-save (its data lost): the save failed in one line"
    return "moto restarted mid-save (its data lost): nothing committed, the cell executes"


LOAD = """
import os, sys, time, numpy as np
from ipy_resume.store import open_store
url, stop = sys.argv[1], sys.argv[2]
pool = [np.random.default_rng(s).random(20_000) for s in range(3)]
saves = errors = 0
i = 0
while not os.path.exists(stop):
    store = open_store(url)
    try:
        store.save("load", f"k{i % 5}", {"a": pool[i % 3], "i": i})
        saves += 1
        m = store.find("load", f"k{i % 5}")
        v = open_store(url).load_values(m)
        if not (np.array_equal(v["a"], pool[i % 3]) and v["i"] == i):
            errors += 1
            print("WRONG", i, flush=True)
    except Exception as exc:
        errors += 1
        print("ERROR", i, type(exc).__name__, exc, flush=True)
    i += 1
    time.sleep(0.02)
print("saves", saves, "errors", errors, flush=True)
"""


def test_gc_under_load(s3_server: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rounds = int(os.environ.get("IPY_RESUME_S3_GC_ROUNDS", "40"))
    key_file = tmp_path / "secrets" / "me.key"
    signing.load_or_create_key(key_file)
    url = f"s3://{s3_server.bucket()}/team"
    _use(monkeypatch, s3_server, tmp_path, key_file)
    stop = tmp_path / "stop"
    env = dict(os.environ, PYTHONPATH=str(ROOT), IPY_RESUME_CACHE_SIZE="0")
    writer = subprocess.Popen(
        [sys.executable, "-c", LOAD, url, str(stop)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    removed_blobs = removed = 0
    try:
        store = open_store(url)
        # gc starts once the writer commits, so every round races live saves
        wait_until(store.manifests, 120, what="the writer's first checkpoint")
        for _ in range(rounds):
            report = store.gc(keep_last=1, grace=0.0)
            removed_blobs += report.removed_blobs
            removed += len(report.removed_checkpoints)
    finally:
        stop.touch()
        out, _ = writer.communicate(timeout=120)
    last = out.strip().splitlines()[-1]
    assert last.startswith("saves "), out[-2000:]
    saves, errors = int(last.split()[1]), int(last.split()[3])
    assert errors == 0, out[-2000:]
    assert saves > 0
    assert open_store(url).verify() == []
    reliability_report.record(
        "s3 gc under load",
        f"{rounds} rounds of gc --keep-last 1 while another process saved {saves} checkpoints "
        f"(reusing blobs gc had found unreferenced): {errors} load errors; gc removed "
        f"{removed} checkpoints and {removed_blobs} blobs",
    )
