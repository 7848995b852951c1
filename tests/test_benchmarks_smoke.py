"""The benchmark harness at tiny sizes, so it cannot rot between real runs.

Runs ``python -m benchmarks`` end to end (workers, the fresh-process notebook
runs, the table, the JSON) with arrays of 32 KB. Peers that are not installed
(they come with the ``bench`` extra) are skipped by the harness itself.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def run_benchmarks(
    tmp_path: Path, scale: str, only: str, *flags: str, **env_extra: str
) -> subprocess.CompletedProcess[str]:
    """``python -m benchmarks`` at *scale* on workloads *only*, results and work in *tmp_path*."""
    env = dict(os.environ)
    env["JUPYTER_DATA_DIR"] = str(tmp_path / "jupyter-data")
    env.update(env_extra)
    env.pop("IPY_RESUME_DIR", None)
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "benchmarks",
            "--scale",
            scale,
            "--repeat",
            "1",
            "--only",
            only,
            *flags,
            "--no-chart",
            "--results",
            str(tmp_path / "results"),
            "--workdir",
            str(tmp_path / "work"),
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=280,
    )


@pytest.mark.timeout(300)
def test_benchmarks_run_end_to_end_at_tiny_scale(tmp_path: Path) -> None:
    proc = run_benchmarks(tmp_path, "0.0001", "1,2,3,5,6", "--no-kishu")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "## Targets" in proc.stdout and "## Against the peers" in proc.stdout
    results = tmp_path / "results"
    # one file per workload, named by it; its samples are that workload's alone
    assert sorted(p.name for p in results.glob("*.json")) == sorted(
        f"w{w}.json" for w in ("1", "2", "3", "5", "6")
    )
    samples = {
        w: json.loads((results / f"w{w}.json").read_text())["samples"][w]
        for w in ("1", "3", "5", "6")
    }
    result = json.loads((results / "w6.json").read_text())
    ours = samples["1"]["ipy_resume"]
    assert ours["miss_s"] and ours["hit_s"] and ours["written_bytes"][0] > 0
    # re-checkpointing unchanged data writes only the manifest
    assert ours["recheckpoint_written_bytes"][0] < ours["written_bytes"][0]
    assert samples["3"]["ipy_resume"]["key_s"][0] > 0
    assert len(samples["5"]["ipy_resume"]["hit_overhead_s"]) == 20
    assert samples["6"]["ipy_resume"]["again_s"] and samples["6"]["plain"]["again_s"]
    assert not result["notes"]["6"].get("ipy_resume"), result["notes"]["6"]
    assert result["argv"][:2] == ["--scale", "0.0001"]
    w1 = json.loads((results / "w1.json").read_text())
    names = {t["name"] for t in w1["summary"]["targets"]}
    assert any(name.startswith("W1 save") for name in names)
    # a run written elsewhere renders its page there, never over docs/performance.md
    page = (results / "performance.md").read_text()
    assert "## W1: " in page and "save of a 1 GB array" in page
    assert 'No result yet: `make bench BENCH_ARGS="--only 4"`' in page
    assert 'BENCH_ARGS="--scale 0.0001 --repeat 1' in page


@pytest.mark.timeout(300)
def test_restore_after_a_crash_runs_in_fresh_processes_at_tiny_scale(tmp_path: Path) -> None:
    # 4 MiB: mapped (below 2 MiB it would be read)
    proc = run_benchmarks(tmp_path, "0.004", "12", IPY_RESUME_BENCH_CRASH_REPEAT="2")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "## W12 restore as after a crash" in proc.stdout
    result = json.loads((tmp_path / "results" / "w12.json").read_text())
    samples = result["samples"]["12"]
    assert len(samples["ipy_resume"]["restore_s"]) == len(samples["baseline"]["np_load_s"]) == 2
    assert not result["notes"]["12"], result["notes"]["12"]  # each restore hit, and was mapped
    crash = result["summary"]["crash"]
    assert crash["runs"] == 2 and crash["restore_range"][0] <= crash["restore_range"][1]


def test_results_a_peer_gets_by_not_answering_are_not_ranked() -> None:
    # ipycache's "hit" of a changed input is fast because it returns the stale result; the
    # table and the chart must not count it as a win or a loss.
    from benchmarks import report

    samples = {
        "3": {
            "ipy_resume": {"hit_s": [0.04, 0.05]},
            "ipycache": {"hit_s": [0.001]},
            "joblib": {"hit_s": [1.4]},
        }
    }
    notes = {
        "3": {"ipycache": ["hit without any key: it never looks at the input (not comparable)"]}
    }
    (row,) = report.peer_rows(samples, notes)
    assert row.not_comparable.keys() == {"ipycache"}
    assert row.ratio("joblib") == pytest.approx(1.4 / 0.045)
    text = report.table(report.summarize(samples, notes))
    line = next(x for x in text.splitlines() if x.startswith("| W3 1 GB input"))
    assert "not comparable" in line and "0.02x" not in line and "(31.1x)" in line
    unflagged = report.table(report.summarize(samples))
    assert "not comparable" not in unflagged


@pytest.mark.timeout(300)
def test_sklearn_models_run_in_fresh_processes_at_tiny_scale(tmp_path: Path) -> None:
    pytest.importorskip("sklearn")
    # 200 rows, 500 sentences, 10 trees
    proc = run_benchmarks(tmp_path, "0.0001", "13b", IPY_RESUME_BENCH_SKLEARN_REPEAT="1")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "## W13b scikit-learn models" in proc.stdout
    result = json.loads((tmp_path / "results" / "w13b.json").read_text())
    assert not result["notes"]["13b"], result["notes"]["13b"]  # each miss ran, each hit hit
    ours = result["samples"]["13b"]["ipy_resume"]
    for case in ("forest", "boosting", "text"):
        assert len(ours[f"{case}_miss_s"]) == len(ours[f"{case}_restore_s"]) == 1
        assert ours[f"{case}_phase_cell_s"][0] > 0 and f"{case}_phase_snapshot_s" in ours
    row = result["summary"]["sklearn"]["forest"]
    assert row["first_ratio"] > 0 and row["restore_ratio"] > 0 and "cell" in row["phases"]
    page = (tmp_path / "results" / "performance.md").read_text()
    assert "## W13b: scikit-learn ensembles and pipelines" in page
    assert "Where the first run's time goes" in page
