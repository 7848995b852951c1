"""The journal, ``%checkpoint restore``, ``list``/``show``/``stats`` and the CLI views."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import subprocess_env
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell

from ipy_resume.store import Store
from ipy_resume.store import manifest as mf
from ipy_resume.store.journal import Journal

STEPS = [
    "%%checkpoint load\nimport numpy as np\ndata = np.random.rand(5)\nscale = 1",
    "%%checkpoint fit\nmodel = data * 2\nscale = 2\nnote = 'fit'",
    "%%checkpoint tune\nmodel = model + 1\nextra = [1, 2]\ndel note",
]


def run(shell: InteractiveShell, source: str) -> None:
    result = shell.run_cell(source)
    assert result.success, result.error_in_exec or result.error_before_exec


@pytest.fixture
def history(shell: InteractiveShell) -> dict[str, dict[str, object]]:
    """Run the three steps; return the namespace values after each step."""
    seen: dict[str, dict[str, object]] = {}
    for step in STEPS:
        run(shell, step)
        cell_id = step.split()[1]
        ns = shell.user_ns
        seen[cell_id] = {
            name: (ns[name].copy() if isinstance(ns[name], np.ndarray) else ns[name])
            for name in ("data", "model", "scale", "note", "extra")
            if name in ns
        }
        seen[cell_id]["__draw__"] = np.random.get_state(legacy=False)["state"]["pos"]
    return seen


def journal(isolated: Path) -> Journal:
    return Journal(isolated / "store")


def test_every_run_is_an_event_with_its_parent(shell: InteractiveShell, isolated: Path) -> None:
    for step in STEPS:
        run(shell, step)
    run(shell, STEPS[0])  # a hit
    events = journal(isolated).events()
    assert [e.outcome for e in events] == ["executed", "executed", "executed", "restored"]
    assert [e.cell_id for e in events] == ["load", "fit", "tune", "load"]
    assert events[0].parent is None
    assert [e.parent for e in events[1:]] == [e.event_id for e in events[:-1]]
    assert len({e.session for e in events}) == 1
    assert events[1].names == ["model", "note", "scale"]
    assert events[0].bytes > 0 and events[3].bytes == 0 and events[3].saved >= 0


@pytest.mark.parametrize("how", ["id", "prefix", "cell_id"])
def test_restore_to_an_earlier_checkpoint(
    shell: InteractiveShell,
    isolated: Path,
    history: dict[str, dict[str, object]],
    how: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    manifests = Store(isolated / "store").manifests()
    fit = next(m for m in manifests if m.cell_id == "fit")
    target = {"id": fit.id, "prefix": fit.id[:13], "cell_id": "fit"}[how]
    shell.user_ns["untouched"] = "mine"
    np.random.rand(7)  # move the generator away from where 'fit' left it
    capsys.readouterr()
    shell.run_line_magic("checkpoint", f"restore {target}")
    ns = shell.user_ns
    expected = history["fit"]
    np.testing.assert_array_equal(ns["data"], expected["data"])
    np.testing.assert_array_equal(ns["model"], expected["model"])
    assert ns["scale"] == 2 and ns["note"] == "fit"
    assert "extra" not in ns  # first created after 'fit'
    assert ns["untouched"] == "mine"
    out = capsys.readouterr().out
    assert "removed extra" in out and fit.id[:8] in out  # its displayed prefix
    # The draws that follow are the ones that followed 'fit' originally.
    run(shell, "after_restore = np.random.rand(3)")
    restored_draw = shell.user_ns["after_restore"]
    shell.run_line_magic("checkpoint", f"restore {fit.id}")
    run(shell, "again = np.random.rand(3)")
    np.testing.assert_array_equal(shell.user_ns["again"], restored_draw)


def test_restore_then_continue_keeps_lineage(
    shell: InteractiveShell, isolated: Path, history: dict[str, dict[str, object]]
) -> None:
    shell.run_line_magic("checkpoint", "restore load")
    assert "model" not in shell.user_ns and "note" not in shell.user_ns
    events = journal(isolated).events()
    assert events[-1].outcome == "resumed"
    load_event = next(e for e in events if e.cell_id == "load")
    assert events[-1].parent == load_event.event_id
    # Restoring 'tune' again brings back the newest state, including the deletion of note.
    shell.user_ns["note"] = "stale"
    shell.run_line_magic("checkpoint", "restore tune")
    assert "note" not in shell.user_ns and shell.user_ns["extra"] == [1, 2]


def test_unknown_and_ambiguous_targets_are_one_line_errors(
    shell: InteractiveShell, history: dict[str, dict[str, object]]
) -> None:
    with pytest.raises(UsageError, match=r"no checkpoint matches 'nope'.*load") as unknown:
        shell.run_line_magic("checkpoint", "restore nope")
    assert "\n" not in str(unknown.value)
    # ids are random; two made with one prefix stand for the rare pair that shares one
    twins = iter(["abcdef0123456789", "abcdef01fedcba98"])
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(mf, "new_checkpoint_id", lambda: next(twins))
        shell.run_cell("%%checkpoint twin1\nt1 = 1")
        shell.run_cell("%%checkpoint twin2\nt2 = 2")
    with pytest.raises(UsageError, match="ambiguous") as ambiguous:
        shell.run_line_magic("checkpoint", "restore abcdef01")
    assert "abcdef0123456789" in str(ambiguous.value)
    assert "abcdef01fedcba98" in str(ambiguous.value)
    shell.run_line_magic("checkpoint", "restore abcdef012")  # one more character: unique


def test_list_show_and_stats_in_the_notebook(
    shell: InteractiveShell,
    history: dict[str, dict[str, object]],
    capsys: pytest.CaptureFixture[str],
) -> None:
    run(shell, STEPS[0])  # one restore
    capsys.readouterr()
    shell.run_line_magic("checkpoint", "list")
    listing = capsys.readouterr().out.splitlines()
    assert listing[0].split()[:3] == ["id", "cell", "created"]
    assert [line.split()[1] for line in listing[1:]] == ["load", "fit", "tune"]
    assert "restored 1x" in listing[1]
    shell.run_line_magic("checkpoint", "show fit")
    shown = capsys.readouterr().out
    assert "ndarray float64 shape (5,)" in shown and "input:data" in shown
    shell.run_line_magic("checkpoint", "stats")
    stats = capsys.readouterr().out
    assert "3 executed, 1 restored (hit rate 25%)" in stats
    assert "save latency  p50" in stats


def cli(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "ipy_resume.frontends.cli",
            *args,
            "--store",
            str(tmp_path / "store"),
        ],
        capture_output=True,
        text=True,
        env=subprocess_env(tmp_path),
        timeout=120,
    )


def test_cli_list_show_stats(
    shell: InteractiveShell, isolated: Path, history: dict[str, dict[str, object]]
) -> None:
    records = json.loads(cli(isolated, "list", "--json").stdout)
    assert [r["cell_id"] for r in records] == ["load", "fit", "tune"]
    assert all({"id", "cell_id", "created", "bytes"} <= set(r) for r in records)
    assert records[0]["created"].endswith("Z") or "+00:00" in records[0]["created"]
    shown = json.loads(cli(isolated, "show", records[1]["id"], "--json").stdout)
    assert shown["cell_id"] == "fit" and set(shown["names"]) == {"model", "note", "scale"}
    text = cli(isolated, "show", "fit").stdout
    assert "cell 'fit'" in text
    stats = json.loads(cli(isolated, "stats", "--json").stdout)
    assert stats["checkpoints"] == 3 and stats["executed"] == 3
    assert stats["save_latency"]["n"] == 3
    missing = cli(isolated, "show", "nothing")
    assert missing.returncode == 2 and "no checkpoint matches" in missing.stderr


def test_resume_with_no_store_says_so(
    shell: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    shell.run_line_magic("resume", "")
    out = capsys.readouterr().out.strip()
    assert out.startswith("ipy_resume: nothing to resume") and "\n" not in out


def test_resumable_outside_a_checkpoint_is_a_plain_loop() -> None:
    from ipy_resume import resumable

    assert list(resumable(range(4), state=["x"], every=2)) == [0, 1, 2, 3]


@pytest.mark.parametrize("every", [0, "often", "5 parsecs", True])
def test_resumable_rejects_bad_every(every: object) -> None:
    from ipy_resume import resumable

    with pytest.raises(ValueError, match="every"):
        list(resumable(range(2), every=every))  # type: ignore[arg-type]


def test_restore_loads_each_blob_once(shell: InteractiveShell, isolated: Path) -> None:
    # Two checkpoints hold the same 1 MB array (stored once); restoring the later one
    # needs both, and must read that blob a single time.
    run(shell, "%%checkpoint a\nimport numpy as np\nbig = np.ones(131072)\nx = 1")
    run(shell, "%%checkpoint b\nsame = big.copy()\ny = 2")
    store = Store(isolated / "store")
    reads: list[str] = []
    original = store.blobs.read

    def counting(address: str, *args: object, **kwargs: object) -> object:
        reads.append(address)
        return original(address, *args, **kwargs)

    store.blobs.read = counting  # type: ignore[method-assign]
    from ipy_resume import timeline

    namespace: dict[str, object] = {}
    report = timeline.restore(namespace, isolated / "store", "b", store)
    assert set(report["restored"]) == {"np", "big", "x", "same", "y"}
    np.testing.assert_array_equal(namespace["same"], np.ones(131072))
    assert len(reads) == len(set(reads)), reads


def test_restore_of_a_collected_checkpoint_says_so(
    shell: InteractiveShell,
    history: dict[str, dict[str, object]],
    capsys: pytest.CaptureFixture[str],
) -> None:
    old = next(m for m in Store(Path("store")).manifests() if m.cell_id == "load")
    run(shell, STEPS[0].replace("scale = 1", "scale = 10"))  # a newer checkpoint of 'load'
    shell.run_line_magic("checkpoint", "gc --keep-last 1")
    assert old.id not in {m.id for m in Store(Path("store")).manifests()}
    capsys.readouterr()
    with pytest.raises(UsageError, match="no longer in the store"):
        shell.run_line_magic("checkpoint", f"restore {old.id}")


def test_snapshot_marks_checkpoints_gc_removed(
    shell: InteractiveShell, history: dict[str, dict[str, object]]
) -> None:
    from ipy_resume.timeline import snapshot

    root = Path("store")
    before = snapshot(root)
    assert before["unavailable"] == []
    old = next(m for m in Store(root).manifests() if m.cell_id == "load")
    run(shell, STEPS[0].replace("scale = 1", "scale = 10"))
    shell.run_line_magic("checkpoint", "gc --keep-last 1")
    after = snapshot(root)
    assert after["unavailable"] == [old.id]
    # its event stays on the timeline (the panel greys it out), the others are restorable
    rows = [e for e in after["events"] if e["checkpoint_id"] == old.id]
    assert rows and all(e["cell_id"] == "load" for e in rows)
    assert after["summary"]["checkpoints"] == before["summary"]["checkpoints"]
    # an incremental snapshot (what pushes send) carries the whole list too
    assert snapshot(root, after=after["last_seq"])["unavailable"] == [old.id]


def test_a_restore_from_the_panel_joins_the_timeline(
    shell: InteractiveShell, isolated: Path, history: dict[str, dict[str, object]]
) -> None:
    from ipy_resume.frontends.comm import handle_request

    reply = handle_request(
        {"id": 7, "request": "restore", "target": "fit"}, shell.user_ns, isolated / "store"
    )
    assert reply["id"] == 7 and "error" not in reply, reply
    assert "extra" not in shell.user_ns and shell.user_ns["scale"] == 2
    last = journal(isolated).events()[-1]
    fit_event = next(e for e in journal(isolated).events() if e.cell_id == "fit")
    assert last.outcome == "resumed" and last.parent == fit_event.event_id
