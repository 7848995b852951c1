"""The store heals itself: every single damaged or lost file costs at most one re-execution.

The fault matrix: a store of 5 checkpoints of 3 cells (arrays, packs, pickles, a
``--files`` output, default-seeded draws) plus its signing key.  For every file of
it, each of flip (one byte), truncate (to half), delete and replace-with-garbage is
applied to a pristine copy; then the notebook runs again, each run in a fresh
process, until every cell hits.  Counted per cell: re-executions (want ≤ 1 for a
cell the fault touched, 0 for the others); checked: every value equals the first
run's bit for bit, default-seeded draws and generator states included; no manual
step; ``verify`` clean after the runs.

``IPY_RESUME_MATRIX_FAULTS`` (default ``flip,truncate,delete,garbage``) chooses the
faults; the default run takes about half a minute here.

Faults together: every subset of the metadata files (``store.json``, its backup, the
journal with its WAL and shared memory, the lock) damaged at once, with each fault of
``IPY_RESUME_SUBSET_FAULTS`` (default ``flip,truncate,delete,garbage``); and two bytes flipped in
every file of a store of 3 checkpoints and its key (an empty file gets garbage), for
``IPY_RESUME_ALL_FILES_TRIALS`` (default 8) choices of the bytes.  The same figures are
counted and checked, and the run after the first must restore every cell.
"""

from __future__ import annotations

import io
import itertools
import os
import random
import shutil
import subprocess
import sys
from collections import Counter
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path
from typing import Any

import healing_runner
import numpy as np
import pytest
import reliability_report

from ipy_resume.frontends import cli
from ipy_resume.store import Store, signing
from ipy_resume.store import manifest as mf
from ipy_resume.store.journal import Journal

EVERY_FAULT = "flip,truncate,delete,garbage"
FAULTS = os.environ.get("IPY_RESUME_MATRIX_FAULTS", EVERY_FAULT).split(",")
SUBSET_FAULTS = os.environ.get("IPY_RESUME_SUBSET_FAULTS", EVERY_FAULT).split(",")
ALL_FILES_TRIALS = int(os.environ.get("IPY_RESUME_ALL_FILES_TRIALS", "8"))
MAX_RUNS = 4
# the store's metadata files, each a unit that is damaged as a whole
METADATA = {
    "store.json": ("store/store.json",),
    "store.backup.json": ("store/store.backup.json",),
    "journal": tuple(f"store/journal.sqlite{s}" for s in ("", "-wal", "-shm")),
    "lock": ("store/lock",),
}


def _damage(path: Path, fault: str, rng: random.Random) -> bool:
    """Apply *fault* to *path*; False when it cannot apply (a byte flip of an empty file)."""
    data = path.read_bytes()
    if fault == "delete":
        path.unlink()
    elif fault == "garbage":
        path.write_bytes(rng.randbytes(max(len(data), 64)))
    elif not data:
        return False
    elif fault == "truncate":
        path.write_bytes(data[: len(data) // 2])
    elif fault in ("flip", "flip2"):
        damaged = bytearray(data)
        for _ in range(2 if fault == "flip2" else 1):
            damaged[rng.randrange(len(data))] ^= rng.randrange(1, 256)
        path.write_bytes(bytes(damaged))
    else:
        raise ValueError(fault)
    return True


class Matrix:
    """A pristine store, its key and workdir, copied afresh into ``trial/`` for each fault."""

    def __init__(self, tmp_path: Path, passes: tuple[int, ...] = healing_runner.PASSES) -> None:
        healing_runner.warm()
        self.passes = passes
        self.base = tmp_path / "pristine"
        self.trial = tmp_path / "trial"
        (self.base / "work").mkdir(parents=True)
        self.reference = self.run(self.base)
        assert not any(c["hit"] for k, c in self.reference.items() if k != "draw/1")
        self.files = sorted(
            p.relative_to(self.base).as_posix()
            for p in self.base.rglob("*")
            if p.is_file() and p.relative_to(self.base).parts[0] != "work"
        )

    @staticmethod
    def env(where: Path) -> dict[str, str]:
        return {"JUPYTER_DATA_DIR": str(where / "jd"), "IPY_RESUME_DIR": str(where / "store")}

    def fresh(self) -> Path:
        shutil.rmtree(self.trial, ignore_errors=True)
        shutil.copytree(self.base, self.trial)
        return self.trial

    def store(self, where: Path) -> Store:
        key = signing.load_or_create_key(where / "jd" / "ipy_resume" / "signing.key")
        return Store(where / "store", key=key)

    def run(self, where: Path) -> dict[str, Any]:
        return healing_runner.forked_run(where / "work", self.env(where), self.passes)

    def check_values(self, run: dict[str, Any], label: str) -> None:
        for cell, got in run.items():
            want = self.reference[cell]
            assert got["ok"], f"{label}: {cell} failed: {got['messages']}"
            assert got["values"] == want["values"], f"{label}: {cell} values differ"
            assert got["rng"] == want["rng"], f"{label}: {cell} left other generator states"

    def trial_of(self, rel: str, fault: str) -> dict[str, Any] | None:
        """Damage one file, run until every cell hits; the figures of the trial."""
        where = self.fresh()
        rng = random.Random(f"{rel}/{fault}")
        if not _damage(where / rel, fault, rng):
            return None
        return self.heal(where, f"{fault} {rel}")

    def heal(self, where: Path, label: str) -> dict[str, Any]:
        """Run the damaged store at *where* until every cell hits; the figures of the trial
        (``messages``: every line of the runs' stderr)."""
        executions: Counter[str] = Counter()
        messages: list[str] = []
        runs = 0
        while True:
            runs += 1
            assert runs <= MAX_RUNS, f"{label}: cells still execute after {MAX_RUNS} runs"
            result = self.run(where)
            self.check_values(result, label)
            messages += [line for c in result.values() for line in c["messages"].splitlines()]
            executed = [cell for cell, c in result.items() if not c["hit"]]
            executions.update(executed)
            if not executed:
                break
        worst = max(executions.values(), default=0)
        assert worst <= 1, f"{label}: re-executions per cell {dict(executions)}"
        found = self.store(where).audit()
        assert not found.problems, f"{label}: verify after healing:\n" + "\n".join(found.lines)
        # the timeline names every checkpoint again (rebuilt where it was lost)
        store = self.store(where)
        named = Journal(where / "store").checkpoint_ids()
        assert store.ids() <= named, f"{label}: checkpoints missing from the timeline"
        return {"affected": len(executions), "worst": worst, "runs": runs, "messages": messages}


@pytest.fixture(scope="module")
def matrix(tmp_path_factory: pytest.TempPathFactory) -> Matrix:
    return Matrix(tmp_path_factory.mktemp("matrix"))


def _kind(rel: str) -> str:
    parts = rel.split("/")
    if parts[0] == "jd":
        return "signing key" + (" backup" if rel.endswith(".backup") else "")
    if parts[1] in ("objects", "manifests"):
        return parts[1][:-1]
    return parts[1]


def test_fault_matrix_every_file_every_fault_heals_in_one_run(matrix: Matrix) -> None:
    kinds = Counter(_kind(r) for r in matrix.files)
    assert kinds["manifest"] == 5 and kinds["object"] >= 8 and kinds["signing key"] == 1
    assert {"store.json", "store.backup.json", "journal.sqlite", "lock"} <= set(kinds)
    trials = skipped = affected = worst = 0
    runs: Counter[int] = Counter()
    by_fault: Counter[str] = Counter()
    per_kind: dict[str, int] = {}  # trials per kind of file
    hit_kind: dict[str, int] = {}  # cells that executed again, per kind of file
    for rel in matrix.files:
        for fault in FAULTS:
            figures = matrix.trial_of(rel, fault)
            if figures is None:
                skipped += 1
                continue
            trials += 1
            by_fault[fault] += 1
            kind = _kind(rel)
            per_kind[kind] = per_kind.get(kind, 0) + 1
            hit_kind[kind] = hit_kind.get(kind, 0) + figures["affected"]
            affected += figures["affected"]
            worst = max(worst, figures["worst"])
            runs[figures["runs"]] += 1
    assert trials >= 80
    reliability_report.record(
        "fault matrix (self-healing)",
        f"{len(matrix.files)} files of a 5-checkpoint, 3-cell store and its key x "
        f"{', '.join(FAULTS)}: {trials} trials ({skipped} n/a: empty file), "
        f"{affected} affected cell-runs, max re-executions per affected cell {worst}, "
        f"runs until every cell hits: "
        + ", ".join(f"{n} run(s) {c}x" for n, c in sorted(runs.items()))
        + "; values and default-seeded draws equal the first run's in every run, "
        "0 manual steps, verify clean after every trial; re-executed cells / trials by file: "
        + ", ".join(f"{k} {hit_kind[k]}/{per_kind[k]}" for k in sorted(per_kind)),
    )


def _metadata_subsets() -> list[tuple[str, ...]]:
    units = sorted(METADATA)
    return [c for n in range(1, len(units) + 1) for c in itertools.combinations(units, n)]


def test_fault_matrix_every_subset_of_the_metadata_files_heals_in_one_run(
    matrix: Matrix,
) -> None:
    """Metadata files damaged together: no cell executes again (the manifests are whole),
    every value and draw is the first run's, the store is sound after one run."""
    subsets = _metadata_subsets()
    assert len(subsets) == 15
    trials = affected = 0
    runs: Counter[int] = Counter()
    for units in subsets:
        for fault in SUBSET_FAULTS:
            where = matrix.fresh()
            label = f"{fault} {' + '.join(units)}"
            rng = random.Random(label)
            for unit in units:
                for rel in METADATA[unit]:
                    path = where / rel
                    if path.exists():
                        # (an empty file, the lock, cannot have a byte flipped: garbage)
                        empty = fault.startswith("flip") and not path.stat().st_size
                        _damage(path, "garbage" if empty else fault, rng)
            figures = matrix.heal(where, label)
            trials += 1
            affected += figures["affected"]
            runs[figures["runs"]] += 1
            assert figures["runs"] <= 2, f"{label}: {figures['runs']} runs until every cell hits"
            text = "\n".join(figures["messages"])
            assert "permission" not in text, f"{label}: {text}"
            if fault != "delete" and {"store.json", "store.backup.json"} <= set(units):
                # both copies unreadable: named, set aside and rebuilt in one line
                line = next(m for m in figures["messages"] if "store.backup.json" in m)
                assert "store.json" in line and "rebuilt" in line, line
                assert "base seed is unchanged" in line, line
    assert affected == 0, f"{affected} cell-runs executed again"
    reliability_report.record(
        "fault matrix (metadata files together)",
        f"every subset of store.json, store.backup.json, journal (+ WAL, shared memory), "
        f"lock ({len(subsets)}) x {', '.join(SUBSET_FAULTS)}: {trials} trials, "
        f"{affected} cells executed again, runs until every cell hits: "
        + ", ".join(f"{n} run(s) {c}x" for n, c in sorted(runs.items()))
        + "; values and default-seeded draws equal the first run's, verify clean after each",
    )


@pytest.fixture(scope="module")
def small_matrix(tmp_path_factory: pytest.TempPathFactory) -> Matrix:
    """A store of 3 checkpoints (one pass of the notebook) and its key."""
    return Matrix(tmp_path_factory.mktemp("small-matrix"), passes=(0,))


def test_every_file_damaged_at_once_heals_in_one_run(small_matrix: Matrix) -> None:
    """The issue's case: two bytes flipped in every file of a store of 3 checkpoints, its
    signing key and the key's backup (in one trial the key files are garbage); each cell
    executes at most once, with the first run's values and default-seeded draws, the next
    run restores everything, verify is clean, and the messages name what was damaged and
    rebuilt, never permissions."""
    matrix = small_matrix
    assert len(matrix.reference) == 3
    files = matrix.files
    assert {"store/store.json", "store/store.backup.json", "store/lock"} <= set(files)
    assert {"jd/ipy_resume/signing.key", "jd/ipy_resume/signing.key.backup"} <= set(files)
    assert sum(r.startswith("store/manifests/") for r in files) == 3
    affected = worst = 0
    runs: Counter[int] = Counter()
    for trial in range(ALL_FILES_TRIALS):
        where = matrix.fresh()
        rng = random.Random(f"every file {trial}")
        # the last trial: the key and its backup beyond reading (a new key is made)
        lost_key = trial == ALL_FILES_TRIALS - 1
        for rel in files:
            path = where / rel
            garbage = not path.stat().st_size or (lost_key and rel.startswith("jd/"))
            _damage(path, "garbage" if garbage else "flip2", rng)
        label = f"every file flipped ({trial}{', key lost' if lost_key else ''})"
        figures = matrix.heal(where, label)
        assert figures["runs"] == 2, f"{label}: {figures['runs']} runs until every cell hits"
        affected += figures["affected"]
        worst = max(worst, figures["worst"])
        runs[figures["runs"]] += 1
        text = figures["messages"]
        assert not [m for m in text if "permission" in m], text
        seeds = [m for m in text if "store.json" in m and "store.backup.json" in m]
        assert len(seeds) == 1 and "the base seed is unchanged" in seeds[0], text
        keys = [m for m in text if "signing key" in m]
        assert len(keys) == 1 and "backup" in keys[0], text
        assert ("a new key was made" if lost_key else "rebuilt from") in keys[0], text
        assert matrix.store(where).verify() == []
    reliability_report.record(
        "fault matrix (every file at once)",
        f"2 bytes flipped in each of the {len(files)} files of a 3-checkpoint store and its "
        f"key, {ALL_FILES_TRIALS} trials (in one the key and its backup are garbage): "
        f"{affected} cells executed again, max "
        f"re-executions per cell {worst}, runs until every cell hits: "
        + ", ".join(f"{n} run(s) {c}x" for n, c in sorted(runs.items()))
        + "; values and default-seeded draws equal the first run's, verify clean after each",
    )


def test_manifest_and_every_blob_damaged_heals_in_exactly_one_re_execution(
    matrix: Matrix,
) -> None:
    """The issue's case: a manifest and all its blobs flipped; three fresh processes."""
    where = matrix.fresh()
    store = matrix.store(where)
    target = next(m for m in store.manifests() if m.cell_id == "feats")
    rng = random.Random(14)
    assert target.path is not None
    damaged = [target.path, *(store.blob_path(r.blob) for r in target.blob_refs())]
    # the manifest, the pickled group and the HDF5 array ('raw' and 'label' come from
    # 'data': a string two values hold has no identity to share, so they are not stored
    # again with 'feats')
    assert len(damaged) >= 3
    for path in damaged:
        _damage(path, "flip", rng)
    first = matrix.run(where)  # a fresh process
    matrix.check_values(first, "first run")
    executed = sorted(c for c, r in first.items() if not r["hit"])
    # the damaged checkpoint and the one that shares its pack or arrays, nothing else
    assert "feats/0" in executed or "feats/1" in executed
    assert all(c.startswith("feats/") for c in executed), executed
    second = matrix.run(where)  # another fresh process: everything hits
    matrix.check_values(second, "second run")
    assert all(r["hit"] for r in second.values()), {c: r["messages"] for c, r in second.items()}
    assert matrix.store(where).verify() == []
    third = matrix.run(where)
    assert all(r["hit"] for r in third.values())


def test_damaged_unreferenced_blobs_fail_verify_and_are_named(
    matrix: Matrix, monkeypatch: pytest.MonkeyPatch
) -> None:
    where = matrix.fresh()
    monkeypatch.setenv("JUPYTER_DATA_DIR", str(where / "jd"))  # the store's key, for the CLI
    store = matrix.store(where)
    orphans = []
    for i, size in enumerate((100, 5_000)):
        good = store.blobs
        data = np.arange(size, dtype=np.int32).tobytes() + bytes([i])
        address = healing_blob(good, data)
        path = store.blob_path(address)
        damaged = bytearray(path.read_bytes())
        damaged[len(damaged) // 3] ^= 0x40
        path.write_bytes(bytes(damaged))
        orphans.append(path.relative_to(store.root).as_posix())
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = cli.main(["verify", "--store", str(store.root)])
    assert code != 0
    text = out.getvalue()
    for rel in orphans:
        line = next(line for line in text.splitlines() if rel in line)
        assert "no checkpoint uses it" in line and "gc" in line
    assert "2 problem(s)" in err.getvalue()
    # gc cleans what verify found; nothing else is touched
    report = store.gc()
    assert report.removed_blobs == 2 and store.verify() == []
    assert all(r["hit"] for r in matrix.run(where).values())


def healing_blob(blobs: Any, data: bytes) -> str:
    """Write *data* as a blob no manifest refers to; its address."""
    from ipy_resume.store import blobs as blob_module

    address = blob_module.digest(blob_module.SHA256, [data])
    blobs.put(address, [data], len(data))
    return address


def test_lost_store_json_and_backup_keep_the_seeds(matrix: Matrix) -> None:
    """Both copies of the base seed lost: the manifests' copy keeps every key and draw."""
    where = matrix.fresh()
    (where / "store" / "store.json").unlink()
    (where / "store" / "store.backup.json").write_bytes(b"\x00garbage")
    run = matrix.run(where)
    matrix.check_values(run, "both store.json copies lost")
    assert all(r["hit"] for r in run.values())
    assert matrix.store(where).verify() == []


def test_lost_journal_is_rebuilt_from_the_manifests(matrix: Matrix) -> None:
    where = matrix.fresh()
    root = where / "store"
    before = Journal(root).events()
    for name in ("journal.sqlite", "journal.sqlite-wal", "journal.sqlite-shm"):
        (root / name).unlink(missing_ok=True)
    store = matrix.store(where)
    events = store.journal().events()
    rebuilt = {e.checkpoint_id for e in events}
    assert rebuilt == store.ids() == {e.checkpoint_id for e in before if e.checkpoint_id}
    assert all(e.outcome == "executed" and "rebuilt" in e.detail for e in events)
    # each session's events are chained again, oldest first
    assert events[0].parent is None and all(e.parent for e in events[1:])
    assert [e.created for e in events] == sorted(e.created for e in events)


def test_cli_list_and_show_use_displayed_prefixes(
    matrix: Matrix, monkeypatch: pytest.MonkeyPatch
) -> None:
    where = matrix.fresh()
    monkeypatch.setenv("JUPYTER_DATA_DIR", str(where / "jd"))
    env = dict(os.environ, **matrix.env(where))
    listing = subprocess.run(
        [sys.executable, "-m", "ipy_resume.frontends.cli", "list", "--store", str(where / "store")],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert listing.returncode == 0, listing.stderr
    store = matrix.store(where)
    short = store.short_ids()
    rows = listing.stdout.splitlines()[1:]
    assert sorted(row.split()[0] for row in rows) == sorted(short.values())
    shown = rows[0].split()[0]
    assert len(shown) >= mf.SHORT_ID
    out = io.StringIO()
    with redirect_stdout(out):
        assert cli.main(["show", shown, "--store", str(where / "store")]) == 0
    assert out.getvalue().startswith(f"checkpoint {shown} ")


def test_key_file_changed_into_other_valid_digits_is_caught_by_the_backup(tmp_path: Path) -> None:
    path = tmp_path / "ipy_resume" / "signing.key"
    key = signing.load_or_create_key(path)
    backup = signing.backup_path(path)
    assert backup.exists()
    text = path.read_text()
    path.write_text(("1" if text[0] != "1" else "2") + text[1:])  # still 64 hex digits
    assert signing.load_or_create_key(path) == key
    assert path.read_text() == text  # written again
    backup.write_text("garbage")
    assert signing.load_or_create_key(path) == key
    assert signing.load_or_create_key(path) == key and backup.read_text() != "garbage"
    path.unlink()
    assert signing.load_or_create_key(path) == key and path.read_text() == text


def test_a_deleted_lock_file_is_locked_again_where_it_now_is(tmp_path: Path) -> None:
    from ipy_resume.store import lock

    root = tmp_path / "store"
    root.mkdir()
    real_try = lock._try
    calls = {"n": 0}

    def delete_while_waiting(fd: int, exclusive: bool) -> bool | None:
        calls["n"] += 1
        if calls["n"] == 1:  # the file is deleted after we opened it, before we lock it
            (root / lock.LOCK_FILE).unlink()
        return real_try(fd, exclusive)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(lock, "_try", delete_while_waiting)
        with lock.hold(root, exclusive=True, timeout=5, purpose="gc") as held:
            assert held and calls["n"] == 2
            # a second holder that opens the lock file now is excluded
            with (
                pytest.raises(lock.StoreLocked),
                lock.hold(root, exclusive=False, timeout=0.2, purpose="save"),
            ):
                pass


def test_damaged_journal_is_quarantined_and_rebuilt(tmp_path: Path) -> None:
    store = Store(tmp_path / "store", key=bytes(32))
    ids = {store.save(f"c{i}", "k", {"x": i}).manifest.id for i in range(3)}
    journal = store.journal()
    assert {e.checkpoint_id for e in journal.events()} == ids  # a missing one is rebuilt
    journal.close()
    path = store.root / "journal.sqlite"
    path.write_bytes(b"garbage" * 100)
    problems = Store(store.root, key=bytes(32)).verify()
    assert len(problems) == 1 and "journal.sqlite" in problems[0]
    fresh = Store(store.root, key=bytes(32))
    events = fresh.journal().events()
    assert {e.checkpoint_id for e in events} == ids
    assert fresh.journal().quarantined and (store.root / "quarantine").is_dir()
    assert fresh.verify() == []


def test_a_damaged_manifest_whose_cell_id_holds_braces_is_reported_as_damaged(
    isolated: Path,
) -> None:
    """The message quotes the damaged cell_id; braces in it must not break its formatting
    (a flipped byte once turned a manifest's cell_id into one holding '{')."""
    store = Store(isolated / "store")
    saved = store.save("a{b}", "0" * 32, {"x": 1})
    path = next((isolated / "store" / "manifests").rglob(f"{saved.manifest.id}*.json"))
    doc = path.read_bytes()
    damaged = doc.replace(b'"duration"', b'"duratioN"', 1) if b'"duration"' in doc else None
    if damaged is None:  # no such field: change one digit of the created time instead
        at = doc.index(b'"created"') + len(b'"created": "2')
        damaged = doc[:at] + (b"1" if doc[at : at + 1] != b"1" else b"2") + doc[at + 1 :]
    path.write_bytes(damaged)
    with pytest.raises(mf.ManifestError, match=r"is damaged \(its checksum does not match\)"):
        mf.decode(damaged, signing.load_or_create_key(), rel="m.json")
