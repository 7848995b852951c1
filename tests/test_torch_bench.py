"""W13's processes at a tiny scale: every system restores the weights the first run made."""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks import torch_bench  # noqa: E402


@pytest.mark.slow
def test_w13_restores_the_first_runs_weights_in_fresh_processes(tmp_path: Path) -> None:
    env = dict(
        os.environ,
        IPY_RESUME_DIR=str(tmp_path / "store"),
        JUPYTER_DATA_DIR=str(tmp_path / "jupyter-data"),
        PYTHONPATH=str(ROOT),
        OMP_NUM_THREADS="1",
    )
    common = ["--case", "big", "--scale", "0.0001", "--dir", str(tmp_path)]
    first = torch_bench.run_child(["first", *common], env)
    assert first["state_bytes"] > 0 and first["torch_save_s"] > 0
    kinds = ["restore", "torchload"]
    if importlib.util.find_spec("safetensors") is not None:
        kinds.append("safeload")
    samples: dict[str, dict[str, list[float]]] = {"ipy_resume": {}, "torch": {}}
    for kind in kinds:
        got = torch_bench.run_child([kind, *common], env)
        assert got["check"] == first["check"], kind
        if kind == "restore":
            assert got["outcome"] == "restored"
            samples["ipy_resume"]["big_restore_s"] = [got["seconds"]]
        elif kind == "torchload":
            samples["torch"]["big_load_s"] = [got["seconds"]]
    samples["ipy_resume"]["big_critical_s"] = [first["critical_s"]]
    samples["torch"]["big_save_s"] = [first["torch_save_s"]]
    summary = torch_bench.summary({"13": samples})
    assert summary["big"]["torch_load_ratio"] > 0
    assert "## W13 PyTorch state" in torch_bench.table(summary)
