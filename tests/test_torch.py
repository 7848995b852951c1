"""PyTorch state across processes: tensors keyed by their bytes, restored as maps, shared
storages kept, optimizers stepping the restored parameters, devices, RNG and no noise."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import subprocess_env

torch = pytest.importorskip("torch")

RUNNER = Path(__file__).with_name("shell_runner.py")


def run_process(
    tmp_path: Path, cells: list[str], evals: dict[str, str], raising: int | None = None
) -> dict[str, Any]:
    """*cells* in a fresh IPython process sharing this test's store; its report (every cell
    but the one at index *raising* must run without an error)."""
    tmp_path.mkdir(exist_ok=True)
    job = tmp_path / f"job-{len(list(tmp_path.glob('job-*')))}.json"
    job.write_text(json.dumps({"cells": cells, "eval": evals}))
    proc = subprocess.run(
        [sys.executable, str(RUNNER), str(job)],
        cwd=tmp_path,
        env=subprocess_env(tmp_path, OMP_NUM_THREADS="1"),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    report: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    for index, one in enumerate(report["cells"]):
        assert (one["error"] is not None) == (index == raising), one
    return report


def runs(tmp_path: Path, cell_id: str) -> int:
    path = tmp_path / f"ran-{cell_id}"
    return len(path.read_text()) if path.exists() else 0


def counted(cell_id: str, body: str, options: str = "") -> str:
    """A checkpoint cell that leaves a mark each time it executes (not when it restores)."""
    return f"%%checkpoint {cell_id} {options}\nopen('ran-{cell_id}', 'a').write('x')\n{body}\n"


# ---- fingerprints ---------------------------------------------------------------------------

USE = counted("use", "total = float(t.double().sum())")


@pytest.mark.parametrize(
    ("change", "executes"),
    [
        ("", False),  # the same tensor in a fresh process: a hit
        ("t[1000] += 1", True),  # one element
        ("t = t.double()", True),  # the dtype
        ("t.requires_grad_(True)", True),  # requires_grad
        ("t = t.reshape(2, -1)", True),  # the shape
    ],
)
def test_a_tensor_input_is_keyed_by_its_bytes_dtype_and_flags(
    tmp_path: Path, change: str, executes: bool
) -> None:
    make = "import torch\nt = torch.arange(100_000, dtype=torch.float32)"
    run_process(tmp_path, [make, USE], {})
    assert runs(tmp_path, "use") == 1
    run_process(tmp_path, [make, change, USE], {"total": "total"})
    assert runs(tmp_path, "use") == (2 if executes else 1)


def test_fingerprints_are_equal_across_processes_and_storages_are_hashed_once(
    tmp_path: Path,
) -> None:
    code = (
        "import torch\n"
        "from ipy_resume.fingerprint import fingerprint_hex\n"
        "torch.manual_seed(0)\n"
        "m = torch.nn.Linear(64, 64)\n"
        "print(fingerprint_hex([m, m.weight[1:], torch.Generator().manual_seed(5)]))\n"
    )
    outputs = {
        seed: subprocess.run(
            [sys.executable, "-c", code],
            env=subprocess_env(tmp_path, PYTHONHASHSEED=seed),
            capture_output=True,
            text=True,
            timeout=120,
            check=True,
        ).stdout
        for seed in ("1", "2")
    }
    assert outputs["1"] == outputs["2"] and len(outputs["1"].strip()) == 32


def test_a_generator_the_notebook_holds_is_state() -> None:
    from ipy_resume.fingerprint import fingerprint

    g = torch.Generator().manual_seed(3)
    before = fingerprint(g)
    torch.rand(1, generator=g)
    assert fingerprint(g) != before
    assert fingerprint(torch.Generator().manual_seed(3)) == before


# ---- the store ------------------------------------------------------------------------------

MODEL = counted(
    "model",
    "import torch\n"
    "torch.manual_seed(0)\n"
    "m = torch.nn.Sequential(torch.nn.Linear(1024, 1024), torch.nn.ReLU(),\n"
    "                        torch.nn.Linear(1024, 1024))\n"
    "m[2].weight = m[0].weight  # tied\n"
    "opt = torch.optim.Adam(m.parameters(), lr=1e-2)\n"
    "sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)\n"
    "loss = m(torch.randn(8, 1024)).sum(); loss.backward(); opt.step(); sched.step()\n"
    "rows = m[0].weight[1:3]  # a view\n"
    "g = torch.Generator().manual_seed(7)",
)
STEP = (
    "import xxhash\n"
    "m(torch.randn(8, 1024)).pow(2).sum().backward(); opt.step(); sched.step()\n"
    "after = xxhash.xxh3_64_hexdigest(b''.join(p.detach().numpy().tobytes() "
    "for p in m.parameters()))\n"
    "nxt = torch.rand(2).tolist()\n"
    "drawn = torch.rand(2, generator=g).tolist()"
)


def test_model_optimizer_and_views_come_back_shared_and_the_optimizer_steps_them(
    tmp_path: Path,
) -> None:
    evals = {
        "after": "after",
        "nxt": "nxt",
        "drawn": "drawn",
        "lr": "opt.param_groups[0]['lr']",
    }
    first = run_process(tmp_path, [MODEL, STEP], evals)
    shared = {
        "params": "all(p is q for p, q in zip(m.parameters(), opt.param_groups[0]['params']))",
        "state": "set(map(id, opt.state)) == set(map(id, m.parameters()))",
        "tied": "m[0].weight is m[2].weight",
        "view": "rows.untyped_storage().data_ptr() == m[0].weight.untyped_storage().data_ptr()",
        "sched": "sched.optimizer is opt",
        "kind": "(type(m[0].weight).__name__, m[0].weight.requires_grad, m[0].weight.grad is None)",
    }
    write = "with torch.no_grad():\n    rows[0, 0] = 5.0\nwritten = float(m[0].weight[1, 0])"
    probes = "\n".join(f"{k} = {v}" for k, v in shared.items())
    second = run_process(tmp_path, [MODEL, probes, write], {k: k for k in [*shared, "written"]})
    assert runs(tmp_path, "model") == 1  # restored, not executed
    assert second["eval"] == {
        **{k: "True" for k in ("params", "state", "tied", "view", "sched")},
        "kind": "('Parameter', True, False)",
        "written": "5.0",
    }
    third = run_process(tmp_path, [MODEL, STEP], evals)
    assert runs(tmp_path, "model") == 1
    # a step after the restore, the global RNG and the notebook's generator: as uninterrupted
    assert third["eval"] == first["eval"]


def test_an_optimizer_checkpointed_apart_from_its_model_still_holds_its_parameters(
    tmp_path: Path,
) -> None:
    cells = [
        "import torch",
        counted("model", "m = torch.nn.Linear(512, 512)"),
        counted(
            "train",
            "opt = torch.optim.Adam(m.parameters())\nm(torch.ones(512)).sum().backward()\nopt.step()",
        ),
        "same = opt.param_groups[0]['params'][0] is m.weight\nkeyed = set(opt.state) == set(m.parameters())",
    ]
    evals = {"same": "same", "keyed": "keyed"}
    assert run_process(tmp_path, cells, evals)["eval"] == {"same": "True", "keyed": "True"}
    again = run_process(tmp_path, cells, evals)
    assert (runs(tmp_path, "model"), runs(tmp_path, "train")) == (1, 1)  # both restored
    assert again["eval"] == {"same": "True", "keyed": "True"}


def test_large_storages_are_raw_blobs_mapped_copy_on_write(tmp_path: Path) -> None:
    cell = counted("big", "import torch\nw = torch.arange(2_000_000, dtype=torch.float32)")
    run_process(tmp_path, [cell], {})
    blobs = [p for p in (tmp_path / "store" / "objects").rglob("*") if p.is_file()]
    assert max(p.stat().st_size for p in blobs) == 8_000_000  # the bytes, nothing around them
    probe = (
        "from ipy_resume.store import open_store\n"
        "import os\n"
        "how = open_store(os.environ['IPY_RESUME_DIR']).journal().events()[-1].detail\n"
        "w[0] = -1.0"
    )
    report = run_process(tmp_path, [cell, probe], {"how": "how", "first": "float(w[0])"})
    assert runs(tmp_path, "big") == 1
    assert "buffers mapped: w" in report["eval"]["how"], report["eval"]
    assert report["eval"]["first"] == "-1.0"
    again = run_process(
        tmp_path, [cell], {"first": "float(w[0])", "sum": "float(w.double().sum())"}
    )
    assert again["eval"]["first"] == "0.0"  # the write stayed in that process's memory
    assert float(again["eval"]["sum"]) == float(sum(range(2_000_000)))


def test_a_restored_storage_keys_the_cells_after_it_without_being_hashed_again(
    tmp_path: Path,
) -> None:
    big = counted("big", "import torch\nw = torch.arange(2_000_000, dtype=torch.float32)")
    use = counted("use", "total = float(w.double().sum())")
    run_process(tmp_path, [big, use], {})
    probe = (
        "from ipy_resume import pages\n"
        "s = w.untyped_storage()\n"
        "known = pages.digest(s.data_ptr(), s.nbytes(), pages.RAW_TAG, lambda: b'?' * 16)"
    )
    report = run_process(tmp_path, [big, probe, use], {"known": "known != b'?' * 16"})
    assert (runs(tmp_path, "big"), runs(tmp_path, "use")) == (1, 1)  # both restored
    assert report["eval"]["known"] == "True"  # the blob's verified checksum stood for it


@pytest.mark.parametrize("size", [1_000, 100_000])  # pickled with the group, or its own blob
def test_a_tensor_over_a_numpy_array_still_shares_its_memory(tmp_path: Path, size: int) -> None:
    cell = counted(
        f"numpy{size}",
        f"import numpy as np, torch\na = np.arange({size}.0)\nt = torch.from_numpy(a)",
    )
    write = "t[0] = 7.0\nseen = float(a[0])"
    run_process(tmp_path, [cell], {})
    report = run_process(tmp_path, [cell, write], {"seen": "seen", "kind": "t.dtype"})
    assert runs(tmp_path, f"numpy{size}") == 1
    assert report["eval"] == {"seen": "7.0", "kind": "torch.float64"}


def test_tensors_outside_the_raw_path_still_round_trip() -> None:
    from ipy_resume.store import codecs

    values = {
        "sparse": torch.ones(3).to_sparse(),
        "conj": torch.tensor([1 + 2j]).conj(),
        "empty": torch.empty(0),
        "bf16": torch.arange(4, dtype=torch.bfloat16),
        "strided": torch.arange(12.0).reshape(3, 4).t(),
    }
    group = codecs.pickle_group(values)
    back = codecs.unpickle_group(group.stream, group.buffers, lambda tok: None)
    for name, value in values.items():
        restored = back[name]
        assert restored.dtype == value.dtype and restored.shape == value.shape, name
        assert torch.equal(restored.to_dense().resolve_conj(), value.to_dense().resolve_conj())
    assert back["strided"].stride() == (1, 4)


# ---- devices --------------------------------------------------------------------------------

CUDA_SAVE = (
    "import pickle, torch\n"
    "from ipy_resume import torch_support\n"
    "from ipy_resume.store import tensor_codec\n"
    "# a CPU-only machine records its storages as a GPU's would: saved on cuda:0\n"
    "tensor_codec.reducers()[torch.UntypedStorage] = lambda s, p: (tensor_codec.rebuild_storage,\n"
    "    (pickle.PickleBuffer(torch_support.storage_bytes(s)), 'cuda:0'))"
)
ON_GPU = counted("gpu", "import torch\nw = torch.arange(300_000, dtype=torch.float32)")


@pytest.mark.skipif(torch.cuda.is_available(), reason="simulates a machine without CUDA")
def test_a_cuda_checkpoint_on_a_cpu_only_machine(tmp_path: Path) -> None:
    run_process(tmp_path, [CUDA_SAVE, ON_GPU], {})
    assert runs(tmp_path, "gpu") == 1
    mapped = ON_GPU.replace("%%checkpoint gpu ", "%%checkpoint gpu --map-location cpu")
    report = run_process(tmp_path, [mapped], {"device": "str(w.device)", "sum": "float(w.sum())"})
    assert runs(tmp_path, "gpu") == 1  # restored on the CPU, as asked
    assert report["eval"]["device"] == "'cpu'"
    report = run_process(tmp_path, [ON_GPU], {"sum": "float(w.sum())"})
    assert runs(tmp_path, "gpu") == 2  # no such device: the cell executed
    said = [line for line in report["cells"][0]["stderr"].splitlines() if "cuda:0" in line]
    assert len(said) == 1, report["cells"][0]["stderr"]
    assert "--map-location cpu" in said[0]


@pytest.mark.skipif(torch.cuda.is_available(), reason="simulates a machine without CUDA")
def test_resume_and_restore_take_a_map_location(tmp_path: Path) -> None:
    run_process(tmp_path, [CUDA_SAVE, ON_GPU], {})
    plain = run_process(
        tmp_path, ["%load_ext ipy_resume", "%resume"], {"has": "'w' in dir()"}, raising=1
    )
    assert plain["eval"]["has"] == "False"
    said = plain["cells"][1]["stderr"] + str(plain["cells"][1]["error"])
    assert "cuda:0" in said and "--map-location cpu" in said, said
    mapped = run_process(
        tmp_path,
        ["%load_ext ipy_resume", "%resume --map-location cpu"],
        {"device": "str(w.device)", "sum": "float(w.sum())"},
    )
    restored = run_process(
        tmp_path,
        ["%load_ext ipy_resume", "%checkpoint restore gpu --map-location=cpu"],
        {"device": "str(w.device)"},
    )
    assert restored["eval"] == {"device": "'cpu'"}
    want = float(torch.arange(300_000, dtype=torch.float32).sum())
    assert mapped["eval"] == {"device": "'cpu'", "sum": str(want)}
    assert runs(tmp_path, "gpu") == 1
    bad = run_process(tmp_path, ["%load_ext ipy_resume", "%resume --map-location"], {}, raising=1)
    assert "--map-location needs a device" in str(bad["cells"][1]["error"])


def test_the_device_digest_sees_every_word_and_the_tail() -> None:
    # written for GPU memory; the same torch operations run here on the CPU
    from ipy_resume.runtime.torch_support import device_digest

    base = torch.arange(1001, dtype=torch.float32)  # 4004 bytes: 500 words and a tail of 4
    digest = device_digest(base.untyped_storage())
    assert digest == device_digest(base.clone().untyped_storage())
    for index in (0, 500, 1000):
        changed = base.clone()
        changed[index] += 1
        assert device_digest(changed.untyped_storage()) != digest, index
    top = torch.zeros(4, dtype=torch.int64)
    flipped = top.clone()
    flipped[2] = -(2**63)  # only the highest bit of one word
    assert device_digest(top.untyped_storage()) != device_digest(flipped.untyped_storage())
    assert device_digest(torch.zeros(2).untyped_storage()) != device_digest(
        torch.zeros(3).untyped_storage()
    )


# ---- no noise -------------------------------------------------------------------------------


def test_a_notebook_importing_torch_sees_no_deprecation_warning_of_ours(tmp_path: Path) -> None:
    # walking torch's modules read torch.distributed.reduce_op, which warns when read
    cells = [
        "import warnings\nwarnings.simplefilter('always')\nimport torch, torch.distributed",
        counted("quiet", "w = torch.ones(10)\nlr = 0.1"),
        counted("again", "v = w * lr"),
    ]
    report = run_process(tmp_path, cells, {})
    for one in report["cells"]:
        assert "FutureWarning" not in one["stderr"] and "deprecated" not in one["stderr"], one


# ---- random numbers -------------------------------------------------------------------------


def test_a_seeded_cell_that_imports_torch_draws_the_same_numbers_in_every_store(
    tmp_path: Path,
) -> None:
    cell = "%%checkpoint draw --seed 5\nimport torch\nv = torch.rand(3).tolist()"
    after = "w = torch.rand(3).tolist()"  # not seeded again: the stream goes on
    one = run_process(tmp_path / "a", [cell, after], {"v": "v", "w": "w"})
    two = run_process(tmp_path / "b", [cell, after], {"v": "v", "w": "w"})
    assert one["eval"] == two["eval"] and one["eval"]["v"] != one["eval"]["w"]
    plain = run_process(tmp_path / "c", ["import torch\nv = torch.rand(3).tolist()"], {"v": "v"})
    assert plain["eval"]["v"] != one["eval"]["v"]


def test_a_seeded_cell_that_raises_leaves_a_later_import_of_torch_unseeded(
    tmp_path: Path,
) -> None:
    boom = "%%checkpoint boom --seed 5\nraise ValueError('before torch')"
    draw = "import torch\nv = torch.rand(3).tolist()"
    after = run_process(tmp_path / "a", [boom, draw], {"v": "v"}, raising=0)
    # (torch's own default seed differs in every process: what must not be seen is seed 5)
    seeded = run_process(
        tmp_path / "b", [f"{draw}\ntorch.manual_seed(5)", "v = torch.rand(3).tolist()"], {"v": "v"}
    )
    assert after["eval"]["v"] != seeded["eval"]["v"]


def test_ipy_resume_never_imports_torch_itself(tmp_path: Path) -> None:
    cells = [
        counted("arrays", "import numpy as np\na = np.ones(100_000)\nb = [a, {'x': 1}]"),
        "import sys\nloaded = 'torch' in sys.modules",
    ]
    first = run_process(tmp_path, cells, {"loaded": "loaded"})
    again = run_process(tmp_path, cells, {"loaded": "loaded"})  # restored this time
    assert runs(tmp_path, "arrays") == 1
    assert first["eval"]["loaded"] == again["eval"]["loaded"] == "False"


def test_a_grad_scaler_comes_back_with_its_state() -> None:
    from ipy_resume.store import codecs

    scaler = torch.amp.GradScaler("cpu", init_scale=1024.0, growth_interval=1)
    m = torch.nn.Linear(4, 4)
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    scaler.scale(m(torch.ones(4)).sum()).backward()
    scaler.step(opt)
    scaler.update()  # (growth_interval 1: the scale doubles)
    group = codecs.pickle_group({"scaler": scaler, "opt": opt})
    back = codecs.unpickle_group(group.stream, group.buffers, lambda tok: None)
    assert back["scaler"].state_dict() == scaler.state_dict()
    assert back["scaler"].get_scale() == 2048.0
