"""Human and JSON views of a store's checkpoints, shared by the magic and the CLI."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from ..runtime import file_deps
from ..runtime.units import format_size, format_timestamp
from ..store import Manifest
from ..store.journal import Event
from ..store.manifest import unique_prefixes


class TargetError(LookupError):
    """A TARGET names no checkpoint, or more than one."""


def resolve(manifests: Sequence[Manifest], target: str) -> Manifest:
    """Find the checkpoint a TARGET names: an id, a unique id prefix, or a CELL_ID (latest).

    >>> resolve(store.manifests(), "train").cell_id  # doctest: +SKIP
    'train'
    """
    exact = [m for m in manifests if m.id == target]
    if exact:
        return exact[0]
    by_cell = [m for m in manifests if m.cell_id == target]
    if by_cell:
        return by_cell[-1]
    prefixed = [m for m in manifests if m.id.startswith(target)]
    if len(prefixed) == 1:
        return prefixed[0]
    if not prefixed:
        cells = sorted({m.cell_id for m in manifests})
        known = ", ".join(cells[:10]) + (" …" if len(cells) > 10 else "")
        raise TargetError(
            f"no checkpoint matches '{target}'; known CELL_IDs: {known or 'none'}. "
            "Run '%checkpoint list' to see ids."
        )
    candidates = ", ".join(f"{m.id} ({m.cell_id})" for m in prefixed[:10])
    raise TargetError(f"'{target}' is ambiguous: it prefixes {candidates}; give more characters.")


def record(manifest: Manifest, short_id: str | None = None) -> dict[str, Any]:
    """The JSON record of one checkpoint (``ipy-resume list --json``).

    ``short_id`` is the prefix shown for it (unique in the store, see
    :meth:`Store.short_ids`); the full id when not given.

    >>> sorted(record(m))[:3]  # doctest: +SKIP
    ['bytes', 'cell_id', 'complete']
    """
    return {
        "id": manifest.id,
        "short_id": short_id or manifest.id,
        "cell_id": manifest.cell_id,
        "created": manifest.created,
        "bytes": manifest.bytes,
        "bytes_written": manifest.bytes_written,
        "complete": manifest.complete,
        "key": manifest.key,
        "duration": manifest.info.get("duration"),
        "names": sorted(manifest.values),
        "session": manifest.info.get("session"),
        "kind": manifest.info.get("kind", "cell"),
    }


def describe(
    manifest: Manifest, short_id: str | None = None, paths: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """Everything ``show`` prints about a checkpoint (``short_id``: see :func:`record`).

    *paths*: how a restore from this store would load each name (``"mapped"``,
    ``"buffers mapped"`` or ``"read"``, :meth:`Store.restore_paths`), shown as ``restore``.

    >>> describe(m)["id"]  # doctest: +SKIP
    '0190ab3f2a9c1d2e'
    """
    summaries = manifest.info.get("names", {})
    names = {
        name: {
            **summaries.get(name, {}),
            "stored_as": ref.kind,
            "stored_bytes": ref.size,
            **({"restore": paths[name]} if paths and name in paths else {}),
        }
        for name, ref in manifest.values.items()
    }
    return {
        **record(manifest, short_id),
        "names": names,
        "failed": manifest.failed,
        "deleted": manifest.info.get("deleted", []),
        "outputs": manifest.info.get("output_summary", {}),
        "key_parts": manifest.info.get("key_parts", {}),
        "file_deps": manifest.info.get("file_deps", {}),
        "versions": manifest.versions,
    }


def outcome_of(manifest: Manifest, events: Sequence[Event] = ()) -> str:
    """The state column of ``list``: what happened to a checkpoint most recently.

    >>> outcome_of(m, [])  # doctest: +SKIP
    'executed'
    """
    loop = manifest.info.get("loop")
    if isinstance(loop, dict):
        total = loop.get("total")
        return f"loop at {loop.get('position')}" + (f"/{total}" if total is not None else "")
    used = [e for e in events if e.checkpoint_id == manifest.id]
    restores = sum(1 for e in used if e.outcome == "restored")
    state = "executed" if manifest.complete else "incomplete"
    return f"{state}, restored {restores}x" if restores else state


def table(
    manifests: Sequence[Manifest],
    events: Sequence[Event] = (),
    short_ids: Mapping[str, str] | None = None,
) -> str:
    """A readable table of checkpoints, most recent last; *events* add restore counts.

    Ids are shown by *short_ids* (default: prefixes unique among *manifests*), so the
    id column can be copied as a TARGET.

    >>> print(table([]))
    no checkpoints yet
    """
    if not manifests:
        return "no checkpoints yet"
    if short_ids is None:
        short_ids = unique_prefixes(m.id for m in manifests)
    rows = [("id", "cell", "created (UTC)", "duration", "size", "outcome")]
    for m in manifests:
        duration = m.info.get("duration")
        rows.append(
            (
                short_ids.get(m.id, m.id),
                m.cell_id,
                format_timestamp(m.created),
                "-" if duration is None else f"{float(duration):.2f} s",
                format_size(m.bytes),
                outcome_of(m, events),
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join(
        "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
        for row in rows
    )


def details_text(details: dict[str, Any]) -> str:
    """``show`` for people: header, names with types/shapes/sizes, outputs, key parts.

    >>> print(details_text(describe(m)))  # doctest: +SKIP
    checkpoint 0190ab3f2a9c1d2e  cell 'train'  ...
    """
    lines = [
        f"checkpoint {details.get('short_id') or details['id']}  cell '{details['cell_id']}'  "
        f"created {str(details['created']).replace('T', ' ')[:19]} UTC",
        f"run took {float(details.get('duration') or 0):.2f} s; "
        f"{format_size(int(details.get('bytes') or 0))} stored; "
        f"{'complete' if details.get('complete') else 'incomplete'}",
        "names:",
    ]
    for name, info in sorted(details.get("names", {}).items()):
        shape = f" shape {tuple(info['shape'])}" if "shape" in info else ""
        dtype = f" {info['dtype']}" if "dtype" in info else ""
        size = info.get("bytes", info.get("stored_bytes", 0))
        how = f"  ({info['restore']})" if "restore" in info else ""
        lines.append(
            f"  {name:<20} {info.get('type', '?')}{dtype}{shape}  {format_size(int(size))}{how}"
        )
    for name in details.get("deleted", []):
        lines.append(f"  {name:<20} (deleted)")
    for name, reason in sorted(details.get("failed", {}).items()):
        lines.append(f"  {name:<20} NOT STORED: {reason}")
    outputs = details.get("outputs") or {}
    if outputs:
        lines.append(
            f"outputs: {outputs.get('stdout_chars', 0)} chars stdout, "
            f"{outputs.get('stderr_chars', 0)} chars stderr, {outputs.get('displays', 0)} displays, "
            f"{'a' if outputs.get('has_result') else 'no'} result value"
        )
    read = file_deps.describe(details.get("file_deps") or {})
    if read:
        lines.append("files read (a change makes the cell execute):")
        lines += [f"  {line}" for line in read]
    lines.append(f"full id: {details['id']}")
    lines.append("key parts:")
    for part, digest in sorted(details.get("key_parts", {}).items()):
        lines.append(f"  {part:<24} {str(digest)[:32]}")
    versions = details.get("versions") or {}
    if versions:
        lines.append("versions: " + ", ".join(f"{k} {v}" for k, v in sorted(versions.items())))
    return "\n".join(lines)


# What a store error says a cell run does next; a restore runs no cell, so it says
# what happened to the kernel instead.
_RUN_ADVICE = (
    (
        re.compile(r"; it was moved to quarantine/ and will be recomputed\."),
        "; it was moved to quarantine/.",
    ),
    (re.compile(r"; it will be recomputed\."), "."),
    (re.compile(r"; it is ignored and the cell will execute again\."), "; it is ignored."),
    (re.compile(r"; the cell will execute again\."), "."),
)


def restore_failure(error: BaseException) -> str:
    """The line for a restore (``%resume``, ``%checkpoint restore``) that *error* stopped:
    what the store found, and that the kernel was left as it was.

    >>> restore_failure(OSError("'a' in objects/ab/cd is missing; it will be recomputed."))
    "'a' in objects/ab/cd is missing. Nothing was restored: the kernel is as it was; running that cell again computes and saves it anew."
    """
    text = str(error).strip()
    for pattern, said in _RUN_ADVICE:
        text = pattern.sub(said, text)
    if not text.endswith("."):
        text += "."
    return (
        f"{text} Nothing was restored: the kernel is as it was; running that cell again "
        "computes and saves it anew."
    )
