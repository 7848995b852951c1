"""Ids people can type: random ids, shown by the shortest prefix (≥ 8) unique in the store."""

from __future__ import annotations

import dataclasses
import io
import json
import shutil
import time
from contextlib import redirect_stdout
from pathlib import Path

import pytest
import reliability_report

from ipy_resume import timeline
from ipy_resume.engine import reports
from ipy_resume.frontends import cli
from ipy_resume.store import Store, fsio, signing
from ipy_resume.store import manifest as mf

KEY = bytes(range(32))
GOLDEN = Path(__file__).parent / "golden"


def test_unique_prefixes_grow_only_where_needed() -> None:
    ids = ["1a22f22d0000aaaa", "1a22f22d0001bbbb", "1a22f22e00000000", "ffffffff00000000"]
    short = mf.unique_prefixes(ids)
    assert short == {
        "1a22f22d0000aaaa": "1a22f22d0000",
        "1a22f22d0001bbbb": "1a22f22d0001",
        "1a22f22e00000000": "1a22f22e",
        "ffffffff00000000": "ffffffff",
    }
    assert mf.unique_prefixes([]) == {}
    assert mf.unique_prefixes(["abc"]) == {"abc": "abc"}  # never longer than the id


def _many(tmp_path: Path, n: int) -> tuple[Store, mf.Manifest, list[str]]:
    """A store holding one real checkpoint and *n* - 1 more whose ids were made in one second."""
    store = Store(tmp_path / "store", key=KEY)
    real = store.save("real", "k0", {"x": [1, 2, 3]}, extras={"rng": {}}).manifest
    started = time.monotonic()
    ids = [mf.new_checkpoint_id() for _ in range(n - 1)]
    assert time.monotonic() - started < 1.0  # "created in one second"
    folder = store.root / "manifests" / mf.cell_dir("many")
    for i, ident in enumerate(ids):
        m = dataclasses.replace(real, id=ident, cell_id="many", key=f"k{i % 50}")
        path = folder / m.key / f"{ident}.json"
        if i < 50:
            fsio.makedirs(path.parent)
        path.write_bytes(mf.encode(m, KEY))
    return store, real, [real.id, *ids]


def test_ten_thousand_checkpoints_made_in_one_second_show_unique_prefixes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("JUPYTER_DATA_DIR", str(tmp_path / "jd"))
    key_file = signing.default_key_path()  # the CLI reads the store with this key
    key_file.parent.mkdir(parents=True)
    key_file.write_text(KEY.hex() + "\n")
    key_file.chmod(0o600)
    store, real, ids = _many(tmp_path, 10_000)
    assert store.ids() == set(ids)
    short = store.short_ids()
    shown = list(short.values())
    assert len(set(shown)) == len(ids)  # unique
    assert all(len(s) >= mf.SHORT_ID for s in shown)
    # longer than 8 only where two ids share their first 8 characters
    first8 = [i[:8] for i in ids]
    longer = [i for i, s in short.items() if len(s) > mf.SHORT_ID]
    assert all(first8.count(i[:8]) > 1 for i in longer)
    ordered = sorted(ids)  # each prefix starts exactly its own id: its neighbours don't share it
    for at, ident in enumerate(ordered):
        prefix = short[ident]
        neighbours = ordered[max(at - 1, 0) : at] + ordered[at + 1 : at + 2]
        assert ident.startswith(prefix) and not any(n.startswith(prefix) for n in neighbours)
    # `list` shows exactly these prefixes
    out = io.StringIO()
    with redirect_stdout(out):
        assert cli.main(["list", "--store", str(store.root), "--json"]) == 0
    records = json.loads(out.getvalue())
    assert {r["id"]: r["short_id"] for r in records} == short
    # a displayed prefix is a valid TARGET; the status line shows the same prefix
    manifests = store.manifests()
    assert reports.resolve(manifests, short[real.id]).id == real.id
    assert store.short_id(real.id) == short[real.id]
    ns: dict[str, object] = {}
    result = timeline.restore(ns, store.root, short[real.id], store=store)
    assert ns["x"] == [1, 2, 3] and short[real.id] in result["message"]
    # a prefix two ids share is refused, naming both
    a, b = sorted(ids)[:2]
    common = mf._common(a, b)
    with pytest.raises(reports.TargetError, match="ambiguous"):
        reports.resolve(manifests, a[: max(common, 1)])
    reliability_report.record(
        "ids",
        f"{len(ids)} checkpoints made within one second: {len(set(shown))} distinct displayed "
        f"prefixes, {len(shown) - len(longer)} of 8 characters, {len(longer)} longer "
        "(their first 8 characters are shared)",
    )


def test_status_lines_and_show_use_the_displayed_prefix(tmp_path: Path) -> None:
    store = Store(tmp_path / "store", key=KEY)
    twins = iter(["abcdef0123456789", "abcdef01fedcba98"])
    real = mf.new_checkpoint_id
    mf.new_checkpoint_id = lambda: next(twins)  # type: ignore[assignment]
    try:
        a = store.save("a", "k", {"x": 1}).manifest
        b = store.save("b", "k", {"y": 2}).manifest
    finally:
        mf.new_checkpoint_id = real  # type: ignore[assignment]
    assert store.short_id(a.id) == "abcdef012" and store.short_id(b.id) == "abcdef01f"
    details = reports.describe(a, store.short_id(a.id))
    text = reports.details_text(details)
    assert text.startswith("checkpoint abcdef012 ") and "full id: abcdef0123456789" in text
    table = reports.table(store.manifests(), (), store.short_ids())
    assert "abcdef012 " in table and "abcdef01f " in table


def test_format_1_golden_store_shows_prefixes_of_its_time_ordered_ids(tmp_path: Path) -> None:
    root = tmp_path / "format1"
    shutil.copytree(GOLDEN / "format1", root)
    key = bytes.fromhex((GOLDEN / "format1.key").read_text().strip())
    store = Store(root, key=key)
    manifests = store.manifests()
    assert len(manifests) == 3
    short = store.short_ids()
    # made within milliseconds with time-prefixed ids: the prefixes grow past 8 as needed
    assert len(set(short.values())) == 3 and all(len(s) > mf.SHORT_ID for s in short.values())
    for m in manifests:
        assert reports.resolve(manifests, short[m.id]).id == m.id
        assert store.load_values(m)  # still readable
    assert [m.id for m in manifests] == sorted(m.id for m in manifests)  # created order
