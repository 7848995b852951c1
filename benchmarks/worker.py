"""One workload, one group of systems, in this process: ``python -m benchmarks.worker``.

The orchestrator (``python -m benchmarks``) starts one worker per workload and
group so that memory is returned between workloads and Kishu's instrumented
shell never shares a process with the others. The worker writes its samples
as JSON to ``--out``.
"""

from __future__ import annotations

import argparse
import json
import os
import traceback
from pathlib import Path

from benchmarks.harness import Probe, Recorder, Sizes
from benchmarks.workloads import WORKLOADS, Ctx


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", required=True, choices=sorted(WORKLOADS))
    parser.add_argument("--group", required=True, choices=["main", "kishu"])
    parser.add_argument("--scale", type=float, default=1.0)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--workdir", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    args.workdir.mkdir(parents=True, exist_ok=True)
    os.environ["JUPYTER_DATA_DIR"] = str(args.workdir / "jupyter-data")
    rec = Recorder(args.workload)
    ctx = Ctx(Sizes(args.scale), args.repeat, args.workdir, rec, Probe())
    status = 0
    try:
        WORKLOADS[args.workload][args.group](ctx)
    except Exception as exc:
        status = 1
        rec.note(
            "kishu" if args.group == "kishu" else "error",
            f"workload {args.workload} ({args.group}) failed: {type(exc).__name__}: "
            f"{str(exc)[:1500]}\n{traceback.format_exc(limit=4)[-1500:]}",
        )
    args.out.write_text(json.dumps(rec.to_json()))
    return status


if __name__ == "__main__":
    raise SystemExit(main())
