"""Workload 11: a checkpoint through ``s3://`` against s3fs moving the same bytes.

A real S3-compatible server (moto, as in the tests) runs on 127.0.0.1 for the
workload. Per repetition, with one array of 1 GiB at ``--scale 1``:

* ``save_s``: ``Store.save`` of the array to ``s3://bucket/bench`` (upload, manifest
  commit), against ``s3fs_put_s``: ``pipe_file`` of the array's bytes;
* ``restore_s``: a first restore in a new store object with an empty blob cache
  (download, verification), against ``s3fs_get_s``: ``cat_file`` of those bytes;
* ``cached_restore_s``: the second restore, from the verified local blob cache,
  against ``np_load_s``: ``np.load`` of the same array from a local file;
* ``save_requests`` and ``restore_requests``: HTTP requests made by each.

Targets: save and restore at most 1.3x s3fs; the cached restore at most 1.5x
``np.load``. The server is moto's, in memory on the same machine, so the figures
measure the client's work and protocol overhead, not a network.
"""

from __future__ import annotations

import math
import os
import shutil
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from benchmarks.harness import log, median

if TYPE_CHECKING:
    from benchmarks.workloads import Ctx

WORKLOAD = "11"
ROOT = Path(__file__).resolve().parent.parent
TARGETS = {"save": 1.3, "restore": 1.3, "cached": 1.5}


def _s3_utils() -> Any:
    tests = str(ROOT / "tests")
    if tests not in sys.path:
        sys.path.insert(0, tests)
    import s3_utils

    return s3_utils


def workload(ctx: Ctx) -> None:
    import numpy as np
    import s3fs

    from ipy_resume.store import open_store
    from ipy_resume.store.remote_backend import FsspecBackend

    utils = _s3_utils()
    n = max(1 << 16, int((1 << 27) * min(ctx.sizes.scale, 1.0)))  # float64s: 1 GiB at 1
    array = np.random.default_rng(0).random(n)
    local = ctx.folder("s3-local") / "array.npy"
    np.save(local, array)
    rec = ctx.rec
    with utils.moto_server(ctx.folder("s3-moto") / "moto.log") as server:
        os.environ.update(server.env())
        for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL_S3"):
            os.environ.pop(name, None)
        fs = s3fs.S3FileSystem()
        for r in range(ctx.repeat):
            bucket = server.bucket()
            cache = ctx.folder(f"s3-cache-{r}")
            os.environ["IPY_RESUME_CACHE_DIR"] = str(cache)
            url = f"s3://{bucket}/bench"

            payload = array.tobytes()
            started = time.perf_counter()
            fs.pipe_file(f"{bucket}/raw/array.bin", payload)
            rec.add("s3", "s3fs_put_s", time.perf_counter() - started)
            started = time.perf_counter()
            got = fs.cat_file(f"{bucket}/raw/array.bin")
            rec.add("s3", "s3fs_get_s", time.perf_counter() - started)
            assert len(got) == len(payload)
            del payload, got

            store = open_store(url)
            backend: Any = store.backend
            before = backend.requests if isinstance(backend, FsspecBackend) else math.nan
            started = time.perf_counter()
            saved = store.save("big", f"{r:032x}", {"a": array}, extras={}, info={})
            rec.add("s3", "save_s", time.perf_counter() - started)
            rec.add("s3", "save_requests", backend.requests - before)

            shutil.rmtree(cache, ignore_errors=True)
            fresh = open_store(url)
            backend = fresh.backend
            before = backend.requests
            started = time.perf_counter()
            manifest = fresh.find("big", f"{r:032x}")
            assert manifest is not None and manifest.id == saved.manifest.id
            values = fresh.load_values(manifest)
            rec.add("s3", "restore_s", time.perf_counter() - started)
            rec.add("s3", "restore_requests", backend.requests - before)
            assert np.array_equal(values["a"], array)  # type: ignore[arg-type]
            del values

            started = time.perf_counter()
            again = fresh.load_values(manifest)
            rec.add("s3", "cached_restore_s", time.perf_counter() - started)
            del again
            started = time.perf_counter()
            np.load(local)
            rec.add("s3", "np_load_s", time.perf_counter() - started)
            log(f"  workload 11 [repetition {r + 1}] done")


# ---- summary and table (used by benchmarks.report) ------------------------------------------


def summary(samples: dict[str, Any]) -> dict[str, Any]:
    metrics = samples.get(WORKLOAD, {}).get("s3", {})
    if not metrics:
        return {}

    def m(name: str) -> float:
        return median(metrics.get(name, []))

    def ratio(a: float, b: float) -> float:
        return a / b if b > 0 and not (math.isnan(a) or math.isnan(b)) else math.nan

    rows = {
        "save": (m("save_s"), m("s3fs_put_s"), "s3fs put"),
        "restore": (m("restore_s"), m("s3fs_get_s"), "s3fs get"),
        "cached": (m("cached_restore_s"), m("np_load_s"), "np.load"),
    }
    return {
        "rows": {
            k: {"ours": a, "base": b, "baseline": label, "ratio": ratio(a, b)}
            for k, (a, b, label) in rows.items()
        },
        "save_requests": m("save_requests"),
        "restore_requests": m("restore_requests"),
    }


def table(data: dict[str, Any]) -> str:
    from benchmarks.report import fmt, fmt_ratio

    labels = {
        "save": "save through s3://",
        "restore": "first restore (empty cache)",
        "cached": "second restore (local cache)",
    }
    lines = [
        "## W11 a checkpoint in a bucket (moto on 127.0.0.1; medians)",
        "",
        "| operation | ipy_resume | baseline | ratio | target |",
        "|---|---|---|---|---|",
    ]
    for key, row in data["rows"].items():
        ratio = row["ratio"]
        met = "n/a" if math.isnan(ratio) else ("yes" if ratio <= TARGETS[key] else "**no**")
        lines.append(
            f"| {labels[key]} | {fmt(row['ours'], 's')} | {row['baseline']} "
            f"{fmt(row['base'], 's')} | {fmt_ratio(ratio)} | ≤ {TARGETS[key]:g}x: {met} |"
        )
    lines.append(
        f"\nRequests: {data['save_requests']:.0f} per save, "
        f"{data['restore_requests']:.0f} per first restore."
    )
    return "\n".join(lines)
