"""The checkpoint key stays byte-for-byte what it was: existing stores keep hitting.

The golden values below were observed with the engine before the key's assembly moved
into ``ipy_resume/fingerprint/key.py`` (``Engine.plan`` built the parts inline).  They pin
the parts of a fixed cell and inputs and the digest taken over them; a change to either
turns every checkpoint of every store into a miss, so it must be deliberate (and bump the
key's schema, which says so in ``--explain``).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from ipy_resume.engine.core import CheckpointOptions, Engine
from ipy_resume.fingerprint import digest_bytes
from ipy_resume.fingerprint.key import KEY_SCHEMA, cell_key, describe_differences, digest_parts
from ipy_resume.runtime.analysis import analyze
from ipy_resume.store import Store

PYTHON = f"{sys.version_info.major}.{sys.version_info.minor}"

SOURCE = (
    "import golden_helper\nimport json\n"
    "y = golden_helper.scale(x) + len(rows)  # a comment\nprint(name, table, grid, missing)\n"
)

# Observed before the move (Python 3.11, numpy arrays and built-in values, whose
# fingerprints do not depend on the interpreter's bytecode).
GOLDEN_PARTS = {
    "deps:gone.txt": "missing",
    "deps:params.txt": "d54cae92712e8e4d05ba64b2c2e897c6",
    "format": "1",
    "import:golden_helper": "local:ac09d459f6c1e94ae16282ae4fc14f49",
    "input:extra": "absent",
    "input:grid": "7ab101abaf967f5c1d32c7e30b0f04ab",
    "input:missing": "absent",
    "input:rows": "d6454c56911111e5556945fe39b2f8fb",
    # (its tuple of ints digests packed after 0.1.0, see docs/keys.md: before, this was
    # 6c4d62bee2abd7e3c289c7d96d789fa1, and the key 6336b095b581f55230b7946d5c3634d9)
    "input:table": "95df576237b9d750c51c811db11fed14",
    "input:x": "9b3f8f1fcd64b8a5b9e1e2375aacd958",
    "python": "3.11",
    "salt": "s1",
    "seed": "7",
    "source": "157c0772821e121689922ec4b2e34ca9",
}
GOLDEN_KEY = "e9b829494e5f9b847a35f128cb7a7510"  # the key of GOLDEN_PARTS, as observed

# The same cell with no seed, no options, and ``x`` given by a Run All plan (``known``).
GOLDEN_KNOWN_PARTS = {
    "format": "1",
    "import:golden_helper": "local:ac09d459f6c1e94ae16282ae4fc14f49",
    "input:grid": "7ab101abaf967f5c1d32c7e30b0f04ab",
    "input:missing": "absent",
    "input:name": "ebe077398ce5d77c21b81742a5416163",
    "input:rows": "d6454c56911111e5556945fe39b2f8fb",
    "input:table": "95df576237b9d750c51c811db11fed14",
    "input:x": "000102030405060708090a0b0c0d0e0f",
    "python": "3.11",
    "salt": "",
    "seed": "none",
    "source": "157c0772821e121689922ec4b2e34ca9",
}
GOLDEN_KNOWN_KEY = "673ba0948014c7abc3ded866ea70ff32"  # the key of GOLDEN_KNOWN_PARTS, observed

# A cell that reads a notebook function and class (their code is part of their
# fingerprint, so these were observed on Python 3.11 and hold there only).
REACHED_SOURCE = "out = Box().area() + helper(1)\n"
REACHED_KEY_311 = "72ca640cedf841a24ffec6a33927f520"


def _digest_of(parts: dict[str, str]) -> str:
    """The digest over the parts exactly as the engine took it before the move."""
    return digest_bytes(*(f"{k}={v}".encode() for k, v in sorted(parts.items()))).hex()


@pytest.fixture
def engine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Engine:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "params.txt").write_text("lr=0.1\n")
    (tmp_path / "golden_helper.py").write_text("def scale(v):\n    return v * 3\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    return Engine(Store(tmp_path / "store"))


def _namespace() -> dict[str, object]:
    return {
        "x": 3,
        "name": "abc",
        "rows": [1, 2.5, None, b"b"],
        "table": {"a": (1, 2), "b": {3}},
        "grid": np.arange(6, dtype=np.int32).reshape(2, 3),
    }


def test_the_digest_over_the_parts_is_the_golden_one() -> None:
    assert _digest_of(GOLDEN_PARTS) == GOLDEN_KEY
    assert _digest_of(GOLDEN_KNOWN_PARTS) == GOLDEN_KNOWN_KEY
    assert digest_parts(GOLDEN_PARTS) == GOLDEN_KEY
    assert digest_parts(GOLDEN_KNOWN_PARTS) == GOLDEN_KNOWN_KEY
    assert GOLDEN_PARTS["format"] == KEY_SCHEMA


def test_the_key_module_takes_the_parts_the_engine_took(engine: Engine) -> None:
    made = cell_key(
        analyze(SOURCE),
        _namespace(),
        seed=7,
        salt="s1",
        inputs=["extra"],
        ignore=["name"],
        deps=["params.txt", "gone.txt"],
    )
    assert made.parts == dict(GOLDEN_PARTS, python=PYTHON)
    assert made.key == digest_parts(made.parts) and made.problem is None
    assert sorted(made.digests) == ["grid", "rows", "table", "x"]


def test_an_input_that_cannot_be_fingerprinted_leaves_no_key(engine: Engine) -> None:
    with open("params.txt") as handle:  # an open file is a handle, not a value
        made = cell_key(analyze("y = handle.read()"), {"handle": handle}, seed=None)
    assert made.key is None
    assert made.problem is not None and "'handle' cannot be fingerprinted" in made.problem


def test_the_differences_are_said_in_words() -> None:
    new = dict(GOLDEN_PARTS, **{"input:x": "00", "input:grid": "absent", "format": "2"})
    del new["input:rows"]
    assert describe_differences(GOLDEN_PARTS, new) == [
        "the checkpoint format changed",
        "input 'grid' is not defined now",
        "'rows' is no longer an input",
        "input 'x' changed",
    ]


def test_a_fixed_cell_has_the_golden_parts_and_key(engine: Engine) -> None:
    opts = CheckpointOptions(
        "golden",
        seed=7,
        salt="s1",
        deps=["params.txt", "gone.txt"],
        inputs=["extra"],
        ignore=["name"],
    )
    plan = engine.plan(_namespace(), SOURCE, opts)
    assert plan.parts == dict(GOLDEN_PARTS, python=PYTHON)
    assert plan.key == _digest_of(plan.parts)
    if PYTHON == "3.11":
        assert plan.key == GOLDEN_KEY
    assert sorted(plan.input_digests) == ["grid", "rows", "table", "x"]
    assert plan.input_digests["x"].hex() == GOLDEN_PARTS["input:x"]


def test_a_planned_cell_takes_known_digests_into_the_golden_key(engine: Engine) -> None:
    known = {"x": bytes(range(16))}
    opts = CheckpointOptions("golden", no_seed=True)
    plan = engine.plan(_namespace(), SOURCE, opts, known=known)
    assert plan.parts == dict(GOLDEN_KNOWN_PARTS, python=PYTHON)
    assert plan.key == _digest_of(plan.parts)
    if PYTHON == "3.11":
        assert plan.key == GOLDEN_KNOWN_KEY


@pytest.mark.skipif(PYTHON != "3.11", reason="function fingerprints hold bytecode: 3.11's")
def test_functions_and_classes_reached_keep_their_golden_key(engine: Engine) -> None:
    namespace: dict[str, object] = {"__name__": "__main__"}
    code = (
        "K = 2\ndef helper(v):\n    return v * K\nclass Box:\n    size = 4\n"
        "    def area(self):\n        return helper(self.size)\n"
    )
    # (compiled without this file's ``from __future__`` flags, which are part of the code)
    exec(compile(code, "<notebook>", "exec", dont_inherit=True), namespace)
    plan = engine.plan(namespace, REACHED_SOURCE, CheckpointOptions("reached", seed=1))
    assert sorted(p for p in plan.parts if p.startswith("input:")) == ["input:Box", "input:helper"]
    assert plan.key == REACHED_KEY_311
