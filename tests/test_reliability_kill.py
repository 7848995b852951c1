"""Kill fuzzer in ``make test``: a writer SIGKILLed at every I/O step and at random instants.

The harness is ``tests/fuzz/kill_fuzzer.py`` (run it alone for long runs with
``IPY_RESUME_FUZZ_KILLS=5000``); this test runs it in a subprocess with the
default of 300 kills, asserts its figures, and checks the final store with the
real ``ipy-resume verify``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import reliability_report

from ipy_resume.store import Store, signing

HERE = Path(__file__).parent
KILLS = int(os.environ.get("IPY_RESUME_FUZZ_KILLS", "300"))
KEY = bytes(range(32))  # the fuzzer's key


def test_kill_fuzzer(tmp_path: Path) -> None:
    root = tmp_path / "store"
    proc = subprocess.run(
        [sys.executable, str(HERE / "fuzz" / "kill_fuzzer.py"), "--store", str(root)],
        capture_output=True,
        text=True,
        env=dict(os.environ, IPY_RESUME_FUZZ_KILLS=str(KILLS)),
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    counts = json.loads(proc.stdout.strip().splitlines()[-1])
    assert counts["failures"] == [], counts["failures"]
    assert counts["kills"] >= KILLS
    assert counts["hook_kills"] > 0 and counts["timer_kills"] > 0
    points = counts["kill_points"]
    for op in ("write", "fsync", "replace", "link", "mkdir", "unlink"):
        for phase in ("before", "after"):
            assert points.get(f"{op} {phase}", 0) > 0, f"no kill {phase} {op}: {points}"
    # the background writer: killed before, during and after each of its steps
    assert counts["background_kills"] > 0 and counts["background_durable"] > 0
    bg_points = counts["background_kill_points"]
    for op in ("write", "fsync", "replace", "link"):
        for phase in ("before", "after"):
            assert bg_points.get(f"{op} {phase}", 0) > 0, f"no background kill {phase} {op}"
    assert counts["lost"] == 0
    assert counts["half_written_restored"] == 0
    assert counts["verify_problems"] == 0 and counts["verify_runs"] >= KILLS // 10
    assert counts["writer_errors"] == 0
    assert counts["committed_checked"] > 0 and counts["saves_committed"] > 0
    assert counts["leftovers_after_gc"] == 0
    found = counts["leftover_temp_found"] + counts["leftover_blobs_found"]
    removed = counts["leftover_temp_removed"] + counts["leftover_blobs_removed"]
    assert removed == found

    # the final store, through the real command line
    data_dir = tmp_path / "jupyter-data"
    env = dict(os.environ, JUPYTER_DATA_DIR=str(data_dir))
    key_path = data_dir / "ipy_resume" / "signing.key"
    key_path.parent.mkdir(parents=True)
    key_path.write_text(KEY.hex() + "\n")
    key_path.chmod(0o600)
    verify = subprocess.run(
        [sys.executable, "-m", "ipy_resume.frontends.cli", "verify", "--store", str(root)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert verify.returncode == 0 and "is sound" in verify.stdout, verify
    assert not list(root.rglob(".tmp-*"))

    reliability_report.record(
        "kill fuzzer",
        f"{counts['kills']} SIGKILLs ({counts['hook_kills']} at injected I/O points over "
        f"{len(points)} kinds of point, {counts['timer_kills']} at random instants); "
        f"{counts['saves_committed']} committed saves checked "
        f"({counts['background_kills']} kills and {counts['background_durable']} saves through "
        f"the background writer), lost {counts['lost']}, "
        f"half-written restored {counts['half_written_restored']}, verify problems "
        f"{counts['verify_problems']} in {counts['verify_runs']} runs; gc removed "
        f"{counts['leftover_temp_removed']} temp files and {counts['leftover_blobs_removed']} "
        f"orphan blobs, leftovers after gc {counts['leftovers_after_gc']} "
        f"({counts['seconds']} s)",
    )


def test_key_creation_killed_at_every_step_leaves_no_key_or_a_whole_one(tmp_path: Path) -> None:
    """The key is written to a temp file and published with link: a kill never leaves half a key."""
    script = r"""
import os, signal, sys
from ipy_resume.store import fsio, signing
target, phase = int(sys.argv[2]), sys.argv[3]
count = 0
for name in ("_open", "_write", "_fsync", "_replace", "_link", "_mkdir", "_unlink"):
    real = getattr(fsio, name)
    def hooked(*a, _real=real, **k):
        global count
        count += 1
        if count == target and phase == "before":
            os.kill(os.getpid(), signal.SIGKILL)
        result = _real(*a, **k)
        if count == target and phase == "after":
            os.kill(os.getpid(), signal.SIGKILL)
        return result
    setattr(fsio, name, hooked)
print(signing.load_or_create_key(sys.argv[1]).hex())
"""
    kills = 0
    target = 1
    while True:
        outcomes = []
        for phase in ("before", "after"):
            key_path = tmp_path / f"k{target}{phase}" / "ipy_resume" / "signing.key"
            proc = subprocess.run(
                [sys.executable, "-c", script, str(key_path), str(target), phase],
                capture_output=True,
                text=True,
                timeout=60,
            )
            killed = proc.returncode == -signal.SIGKILL
            kills += killed
            outcomes.append(killed)
            if key_path.exists():
                # published: whole, private, and the key every later reader gets
                assert oct(key_path.stat().st_mode & 0o777) == "0o600"
                key = signing.load_or_create_key(key_path)
                assert len(key) == signing.KEY_BYTES
                if not killed:
                    assert proc.stdout.strip() == key.hex()
            else:
                assert killed
                signing.load_or_create_key(key_path)  # a later process simply creates it
        if not any(outcomes):
            break
        target += 1
    assert kills >= 10
    reliability_report.record(
        "key creation kills", f"{kills} SIGKILLs: never a partial or unreadable key file"
    )


def test_store_object_sees_key_of_fuzzer() -> None:
    # guards the constant shared with the harness
    assert Store("/nonexistent-ipy-resume", key=KEY).key == KEY
