"""Workload 13: PyTorch state, against ``torch.save``/``torch.load`` and safetensors.

Three cases, each written once and then restored in fresh processes:

* ``big``: the cell of the issue, a ``Sequential`` of four ``Linear(w, w)`` plus one Adam
  step; ``w = 4096`` at ``--scale 1`` gives 67 M parameters, 805 MB of state with Adam's
  moments;
* ``small``: 1,000 ``Linear(32, 32)`` layers, 2,000 small tensors (a big model's many
  layers);
* ``loop``: a ``resumable`` training loop (model with dropout, Adam, a step scheduler, a
  shuffling ``DataLoader`` over a synthetic dataset, five epochs).

Per case, in one fresh process: the cell run plainly (``cell_s``, after an untimed run that
pays torch's once-per-process costs), then as a
``%%checkpoint`` miss (``miss_s``; its excess over ``cell_s`` is the critical path,
``critical_s``), then ``%checkpoint wait`` (``background_s``), then ``torch.save`` of the
model's and optimizer's state dicts (``torch_save_s``) and safetensors' ``save_file`` of
the same tensors (``safetensors_save_s``).  Then, alternating the order per repetition,
each in a new process that has imported torch already (a notebook's first cell): the
``%%checkpoint`` hit (``restore_s``), ``torch.load`` (``torch_load_s``) and ``load_file``
(``safetensors_load_s``).  Every restore checks a digest of the weights against the run's,
and times it (``*_touch_s``): the first read of every byte, where a map and safetensors'
lazy load pay their page faults.

Targets (the issue's): the ``big`` restore at least 3x faster than ``torch.load`` and no
slower than ``load_file``; the ``big`` critical path at most 0.5x ``torch.save``; the
``small`` restore no slower than ``torch.load``.

``python -m benchmarks.torch_bench first|restore|torchload|safeload ...`` is one process.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from benchmarks.harness import child_json, log, median

if TYPE_CHECKING:
    from benchmarks.workloads import Ctx

WORKLOAD = "13"
CASES = ("big", "small", "loop")
SYSTEMS = ("ipy_resume", "torch", "safetensors")


def width(scale: float) -> int:
    """The ``big`` case's layer width: 4096 at scale 1, the state's bytes linear in scale."""
    return max(64, int(4096 * math.sqrt(scale)) // 64 * 64)


def body(case: str, scale: float) -> str:
    """The cell of *case* (``torch`` is imported by the notebook's first cell)."""
    if case == "big":
        w = width(scale)
        return (
            "torch.manual_seed(0)\n"
            f"m = torch.nn.Sequential(torch.nn.Linear({w}, {w}), torch.nn.ReLU(), "
            f"*[torch.nn.Linear({w}, {w}) for _ in range(3)])\n"
            "opt = torch.optim.Adam(m.parameters())\n"
            f"loss = m(torch.randn(8, {w})).sum(); loss.backward(); opt.step()"
        )
    if case == "small":
        return (
            "torch.manual_seed(0)\n"
            "m = torch.nn.Sequential(*[torch.nn.Linear(32, 32) for _ in range(1000)])\n"
            "opt = None"
        )
    return LOOP


LOOP = """\
torch.manual_seed(0)
data = torch.utils.data.TensorDataset(torch.randn(2048, 64), torch.randn(2048, 1))
loader = torch.utils.data.DataLoader(data, batch_size=64, shuffle=True)
m = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Dropout(0.2),
                        torch.nn.Linear(256, 1))
opt = torch.optim.Adam(m.parameters(), lr=1e-3)
sched = torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
for epoch in resumable(range(5), state=["m", "opt", "sched"], every=1):
    for x, y in loader:
        opt.zero_grad()
        torch.nn.functional.mse_loss(m(x), y).backward()
        opt.step()
    sched.step()
"""

PREAMBLE = "import torch\nfrom ipy_resume import resumable"


def cell(case: str, scale: float) -> str:
    return f"%%checkpoint torch_{case} --quiet\n{body(case, scale)}"


def tensors(ns: dict[str, Any]) -> dict[str, Any]:
    """The model's and optimizer's tensors by a flat name (what safetensors stores)."""
    out = {f"model.{k}": v for k, v in ns["m"].state_dict().items()}
    opt = ns.get("opt")
    if opt is not None:
        for pid, state in opt.state_dict()["state"].items():
            for key, value in state.items():
                out[f"opt.{pid}.{key}"] = value.reshape(-1) if value.dim() == 0 else value
    return {k: v.contiguous() for k, v in out.items()}


def state_dicts(ns: dict[str, Any]) -> dict[str, Any]:
    """What a user hands ``torch.save``: the state dicts of model, optimizer, scheduler."""
    out = {"model": ns["m"].state_dict()}
    for name in ("opt", "sched"):
        if ns.get(name) is not None:
            out[name] = ns[name].state_dict()
    return out


def digest(named: dict[str, Any]) -> str:
    """A digest of tensors' bytes by name (checks that every system restored the same)."""
    import xxhash

    h = xxhash.xxh3_128()
    for name in sorted(named):
        t = named[name].detach().contiguous()
        h.update(name.encode())
        h.update(t.reshape(-1).view(-1).numpy().view("uint8").data)
    return h.hexdigest()


def run_child(args: list[str], env: dict[str, str]) -> dict[str, Any]:
    """One process of this workload (``first``, ``restore``, ...): what it printed, as JSON."""
    result: dict[str, Any] = child_json("benchmarks.torch_bench", args, env, timeout=1800)
    return result


def workload(ctx: Ctx) -> None:
    """All three cases, their first runs and their fresh-process restores."""
    from benchmarks.workloads import has

    if not has("torch"):
        ctx.rec.note(
            "ipy_resume", "torch is not installed: W13 skipped (pip install -e '.[bench]')"
        )
        return
    rec = ctx.rec
    scale = ctx.sizes.scale
    for case in CASES:
        folder = ctx.folder("torch", case)
        env = dict(os.environ, IPY_RESUME_DIR=str(folder / "store"))
        common = ["--case", case, "--scale", str(scale), "--dir", str(folder)]
        first = run_child(["first", *common], env)
        for metric in ("cell_s", "miss_s", "critical_s", "background_s", "state_bytes"):
            rec.add("ipy_resume", f"{case}_{metric}", first[metric])
        rec.add("torch", f"{case}_save_s", first["torch_save_s"])
        if "safetensors_save_s" in first:
            rec.add("safetensors", f"{case}_save_s", first["safetensors_save_s"])
        kinds = ["restore", "torchload"] + (["safeload"] if "safetensors_save_s" in first else [])
        for r in range(max(ctx.repeat, 3)):
            shift = r % len(kinds)
            for kind in kinds[shift:] + kinds[:shift]:
                got = run_child([kind, *common], env)
                if got["check"] != first["check"]:
                    raise RuntimeError(f"{case} {kind}: the restored weights differ")
                system = {"restore": "ipy_resume", "torchload": "torch"}.get(kind, "safetensors")
                metric = "restore_s" if kind == "restore" else "load_s"
                rec.add(system, f"{case}_{metric}", got["seconds"])
                rec.add(system, f"{case}_touch_s", got["touch_s"])
                if kind == "restore" and got.get("outcome") != "restored":
                    rec.note("ipy_resume", f"{case}: the hit was a {got.get('outcome')!r}")
            log(f"  workload 13 [{case}: repetition {r + 1}] done")


# ---- the processes ---------------------------------------------------------------------------


def _shell() -> Any:
    from benchmarks.harness import new_shell, run

    shell = new_shell()
    shell.run_line_magic("load_ext", "ipy_resume")
    run(shell, PREAMBLE, "preamble")
    return shell


def _first(case: str, scale: float, folder: Path) -> dict[str, Any]:
    import torch

    from benchmarks.harness import run

    shell = _shell()
    run(shell, body(case, scale), "warm-up")  # (torch's first calls cost extra: not the cell's)
    plain = run(shell, body(case, scale), "plain cell")
    run(shell, "del m, opt" + (", sched, data, loader" if case == "loop" else ""))
    # ipy_resume's store exists long before a notebook's big cell
    run(shell, "%%checkpoint torch_init --quiet\n_init = 0", "store init")
    miss = run(shell, cell(case, scale), "miss")
    background = run(shell, "%checkpoint wait", "wait")
    ns = shell.user_ns
    named = tensors(ns)
    out: dict[str, Any] = {
        "cell_s": plain,
        "miss_s": miss,
        "critical_s": miss - plain,
        "background_s": background,
        "state_bytes": float(sum(t.numel() * t.element_size() for t in named.values())),
        "check": digest(named),
    }
    started = time.perf_counter()
    torch.save(state_dicts(ns), folder / "state.pt")
    out["torch_save_s"] = time.perf_counter() - started
    try:
        from safetensors.torch import save_file
    except ImportError:
        return out
    started = time.perf_counter()
    save_file(named, str(folder / "state.safetensors"))
    out["safetensors_save_s"] = time.perf_counter() - started
    return out


def _restore(case: str, scale: float) -> dict[str, Any]:
    from benchmarks.harness import run

    shell = _shell()
    seconds = run(shell, cell(case, scale), "restore")
    from ipy_resume.store import open_store

    events = open_store(os.environ["IPY_RESUME_DIR"]).journal().events()
    outcome = events[-1].outcome if events else None
    return {"seconds": seconds, **_touched(tensors(shell.user_ns)), "outcome": outcome}


def _touched(named: dict[str, Any]) -> dict[str, Any]:
    """The digest of the restored tensors and the time it took: the first read of every
    byte (a map, or safetensors' lazy load, pays its page faults there)."""
    started = time.perf_counter()
    check = digest(named)
    return {"check": check, "touch_s": time.perf_counter() - started}


def _torch_load(folder: Path) -> dict[str, Any]:
    import torch

    started = time.perf_counter()
    state = torch.load(folder / "state.pt")
    seconds = time.perf_counter() - started
    named = {f"model.{k}": v for k, v in state["model"].items()}
    for pid, items in state.get("opt", {}).get("state", {}).items():
        for key, value in items.items():
            named[f"opt.{pid}.{key}"] = value.reshape(-1) if value.dim() == 0 else value
    return {"seconds": seconds, **_touched(named)}


def _safe_load(folder: Path) -> dict[str, Any]:
    import torch  # noqa: F401  (imported before timing, as for the others)
    from safetensors.torch import load_file

    started = time.perf_counter()
    named = load_file(str(folder / "state.safetensors"))
    seconds = time.perf_counter() - started
    return {"seconds": seconds, **_touched(named)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="one process of workload 13")
    parser.add_argument("kind", choices=["first", "restore", "torchload", "safeload"])
    parser.add_argument("--case", choices=CASES, required=True)
    parser.add_argument("--scale", type=float, default=1.0)
    parser.add_argument("--dir", type=Path, required=True)
    args = parser.parse_args(argv)
    if args.kind == "first":
        out = _first(args.case, args.scale, args.dir)
    elif args.kind == "restore":
        out = _restore(args.case, args.scale)
    elif args.kind == "torchload":
        out = _torch_load(args.dir)
    else:
        out = _safe_load(args.dir)
    print(json.dumps(out))
    return 0


# ---- summary and table -----------------------------------------------------------------------


def summary(samples: dict[str, Any]) -> dict[str, Any]:
    """Medians per case and system, and the ratios of the targets (peer / ipy_resume)."""
    by = samples.get(WORKLOAD, {})
    if not by.get("ipy_resume"):
        return {}

    def med(system: str, metric: str) -> float:
        values = by.get(system, {}).get(metric, [])
        return median(values) if values else math.nan

    out: dict[str, Any] = {}
    for case in CASES:
        row = {
            "cell_s": med("ipy_resume", f"{case}_cell_s"),
            "critical_s": med("ipy_resume", f"{case}_critical_s"),
            "background_s": med("ipy_resume", f"{case}_background_s"),
            "restore_s": med("ipy_resume", f"{case}_restore_s"),
            "torch_save_s": med("torch", f"{case}_save_s"),
            "torch_load_s": med("torch", f"{case}_load_s"),
            "safetensors_save_s": med("safetensors", f"{case}_save_s"),
            "safetensors_load_s": med("safetensors", f"{case}_load_s"),
            "state_bytes": med("ipy_resume", f"{case}_state_bytes"),
            "restore_touch_s": med("ipy_resume", f"{case}_touch_s"),
            "torch_touch_s": med("torch", f"{case}_touch_s"),
            "safetensors_touch_s": med("safetensors", f"{case}_touch_s"),
        }
        row["torch_load_ratio"] = _ratio(row["torch_load_s"], row["restore_s"])
        row["safetensors_load_ratio"] = _ratio(row["safetensors_load_s"], row["restore_s"])
        row["critical_over_save"] = _ratio(row["critical_s"], row["torch_save_s"])
        out[case] = row
    return out


def table(data: dict[str, Any]) -> str:
    from benchmarks.report import fmt, fmt_ratio

    def met(value: float, ok: bool) -> str:
        return "n/a" if math.isnan(value) else ("yes" if ok else "**no**")

    lines = [
        "## W13 PyTorch state (fresh-process restores; medians; ratio = peer / ipy_resume)",
        "",
        "| case | state | cell | critical path | torch.save | restore | torch.load | "
        "load_file | torch.load ÷ restore | load_file ÷ restore |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for case in CASES:
        row = data.get(case)
        if not row:
            continue
        lines.append(
            f"| {case} | {fmt(row['state_bytes'], 'bytes')} | {fmt(row['cell_s'], 's')} | "
            f"{fmt(row['critical_s'], 's')} | {fmt(row['torch_save_s'], 's')} | "
            f"{fmt(row['restore_s'], 's')} | {fmt(row['torch_load_s'], 's')} | "
            f"{fmt(row['safetensors_load_s'], 's')} | {fmt_ratio(row['torch_load_ratio'])} | "
            f"{fmt_ratio(row['safetensors_load_ratio'])} |"
        )
    big, small = data.get("big", {}), data.get("small", {})
    if big:
        r1, r2, r3 = (
            big["torch_load_ratio"],
            big["safetensors_load_ratio"],
            big["critical_over_save"],
        )
        lines += [
            "",
            f"Targets: big restore ≥ 3x faster than torch.load: {met(r1, r1 >= 3)}; "
            f"no slower than load_file: {met(r2, r2 >= 1)}; critical path ≤ 0.5x torch.save: "
            f"{met(r3, r3 <= 0.5)}"
            + (
                f"; small restore no slower than torch.load: "
                f"{met(small['torch_load_ratio'], small['torch_load_ratio'] >= 1)}"
                if small
                else ""
            ),
        ]
    return "\n".join(lines)


def _ratio(a: float, b: float) -> float:
    return a / b if b > 0 and not (math.isnan(a) or math.isnan(b)) else math.nan


if __name__ == "__main__":
    raise SystemExit(main())
