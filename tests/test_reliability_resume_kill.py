"""``%resume`` kill fuzzer in ``make test``: real kernels SIGKILLed at random moments.

The harness is ``tests/fuzz/resume_fuzzer.py`` (run it alone for long runs with
``--rounds 500``, or set ``IPY_RESUME_RESUME_FUZZ_ROUNDS``); this test runs it in a
subprocess with 12 rounds by default (two of them with a 200 MB cell) and asserts
that every round resumed exactly the state after the last cell that returned.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import reliability_report

HERE = Path(__file__).parent
ROUNDS = int(os.environ.get("IPY_RESUME_RESUME_FUZZ_ROUNDS", "12"))
MODES = ("in-cell", "sleeper", "between", "after-reply")  # the fuzzer's kill moments


@pytest.mark.slow
def test_resume_fuzzer(tmp_path: Path) -> None:
    proc = subprocess.run(
        [
            sys.executable,
            str(HERE / "fuzz" / "resume_fuzzer.py"),
            "--rounds",
            str(ROUNDS),
            "--work",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=580,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    counts = json.loads(proc.stdout.strip().splitlines()[-1])
    sizes = counts["returned_by_size"]
    # recorded before the checks, so a failing run still shows its figures
    modes = ", ".join(f"{n} {m}" for m, n in sorted(counts["modes"].items()))
    returned = ", ".join(f"{n} {s}" for s, n in sorted(sizes.items()))
    reliability_report.record(
        "%resume kill fuzzer",
        f"{counts['rounds']} kernels SIGKILLed ({modes}); %resume short {counts['short']}, "
        f"wrong {counts['wrong']}, errors {counts['errors']}; {sum(sizes.values())} cells "
        f"returned before a kill ({returned}), {counts['running_at_kill']} killed while running "
        f"({counts['running_restored']} of those restored: they had returned); "
        f"median {counts['seconds_per_round']} s a round",
    )
    failures = "\n".join(counts["failures"])
    assert counts["errors"] == 0, failures
    assert counts["short"] == 0, f"{counts['short']} of {ROUNDS} rounds short:\n{failures}"
    assert counts["wrong"] == 0, f"{counts['wrong']} of {ROUNDS} rounds wrong:\n{failures}"
    assert counts["rounds"] == counts["passed"] == ROUNDS
    # what the rounds covered: every kill moment, every size returned before a kill
    if len(MODES) <= ROUNDS:
        assert set(counts["modes"]) == set(MODES), counts["modes"]
    if ROUNDS >= 8:
        assert sizes.get("small", 0) > 0 and sizes.get("8MB", 0) > 0, sizes
    if ROUNDS >= 3:  # round 2 runs its 200 MB cell and kills after it
        assert sizes.get("200MB", 0) > 0, sizes
