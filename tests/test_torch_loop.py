"""A torch training loop SIGKILLed in epoch 3 of 5 resumes to bit-identical weights."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from kernel_utils import Kernel, kernel_env
from test_crash_recovery import kill_during

pytest.importorskip("torch")
pytestmark = pytest.mark.slow

TRAIN = """%%checkpoint train --seed 0
import hashlib, json, os, time
import torch
from torch import nn, optim
from torch.utils.data import DataLoader, TensorDataset
from ipy_resume import resumable
loader = DataLoader(TensorDataset(torch.randn(512, 16), torch.randn(512, 1)), 32, shuffle=True)
m = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Dropout(0.3), nn.Linear(64, 1))
opt = optim.Adam(m.parameters(), lr=1e-2)
sched = optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
for epoch in resumable(range(5), state=["m", "opt", "sched"], every=1):
    batches = []
    for i, (x, y) in enumerate(loader):
        if epoch == 2 and i == 3 and os.path.exists("hang-in-epoch-3"):
            open("in-epoch-3", "w").close()
            time.sleep(120)
        batches.append(float(x[0, 0]))  # which rows came first: the shuffling order
        opt.zero_grad()
        nn.functional.mse_loss(m(x), y).backward()
        opt.step()
    sched.step()
    with open(f"epoch-{epoch}.json", "w") as fh:
        json.dump({"batches": batches, "lr": sched.get_last_lr()}, fh)
weights = hashlib.sha256(b"".join(p.detach().numpy().tobytes() for p in m.parameters()))
weights = weights.hexdigest()
"""


def train(folder: Path, kill_in_epoch_3: bool) -> tuple[dict[int, str], str, str]:
    """Run TRAIN in a kernel of its own: (each epoch's log, the final weights, the stderr)."""
    folder.mkdir()
    env = {**kernel_env(folder), "OMP_NUM_THREADS": "1"}
    with Kernel(folder, env) as kernel:
        kernel.run("%load_ext ipy_resume")
        if kill_in_epoch_3:
            (folder / "hang-in-epoch-3").touch()
            kill_during(kernel, TRAIN, folder / "in-epoch-3")
            (folder / "hang-in-epoch-3").unlink()
            for log in folder.glob("epoch-*.json"):
                log.unlink()
            kernel.restart()
            kernel.run("%load_ext ipy_resume")
        out = kernel.run(TRAIN)
        assert out.status == "ok", out.error
        weights = kernel.run("print(weights)").stdout.strip()
    logs = {int(p.stem.split("-")[1]): p.read_text() for p in folder.glob("epoch-*.json")}
    return logs, weights, out.stderr


def test_a_training_loop_killed_in_epoch_3_ends_with_the_uninterrupted_weights(
    tmp_path: Path,
) -> None:
    crashed_logs, crashed, said = train(tmp_path / "crashed", kill_in_epoch_3=True)
    clean_logs, clean, _ = train(tmp_path / "clean", kill_in_epoch_3=False)
    assert "resuming loop 0 of 'train' at iteration 2 of 5" in said, said
    assert sorted(crashed_logs) == [2, 3, 4]  # epochs 1 and 2 were not run again
    for epoch in (2, 3, 4):  # the same batches in the same order, the same learning rate
        assert crashed_logs[epoch] == clean_logs[epoch]
        assert json.loads(clean_logs[epoch])["batches"]
    assert len(clean) == 64 and crashed == clean  # bit for bit
