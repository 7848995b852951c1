"""Human and JSON views of a store's checkpoints, shared by the magic and the CLI."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .store import Manifest


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


def record(manifest: Manifest) -> dict[str, Any]:
    """The JSON record of one checkpoint (``ipy-resume list --json``).

    >>> sorted(record(m))[:3]  # doctest: +SKIP
    ['bytes', 'cell_id', 'complete']
    """
    return {
        "id": manifest.id,
        "cell_id": manifest.cell_id,
        "created": manifest.created,
        "bytes": manifest.bytes,
        "bytes_written": manifest.bytes_written,
        "complete": manifest.complete,
        "key": manifest.key,
        "duration": manifest.info.get("duration"),
        "names": sorted(manifest.values),
        "session": manifest.info.get("session"),
    }


def describe(manifest: Manifest) -> dict[str, Any]:
    """Everything ``show`` prints about a checkpoint.

    >>> describe(m)["id"]  # doctest: +SKIP
    '0190ab3f2a9c1d2e'
    """
    summaries = manifest.info.get("names", {})
    names = {
        name: {**summaries.get(name, {}), "stored_as": ref.kind, "stored_bytes": ref.size}
        for name, ref in manifest.values.items()
    }
    return {
        **record(manifest),
        "names": names,
        "failed": manifest.failed,
        "deleted": manifest.info.get("deleted", []),
        "key_parts": manifest.info.get("key_parts", {}),
        "versions": manifest.versions,
    }


def table(manifests: Sequence[Manifest]) -> str:
    """A readable table of checkpoints, most recent last.

    >>> print(table([]))
    no checkpoints yet
    """
    if not manifests:
        return "no checkpoints yet"
    rows = [("id", "cell", "created", "duration", "size", "state")]
    for m in manifests:
        duration = m.info.get("duration")
        rows.append(
            (
                m.id,
                m.cell_id,
                m.created.replace("T", " ")[:19],
                "-" if duration is None else f"{float(duration):.2f} s",
                human_size(m.bytes),
                "complete" if m.complete else "incomplete",
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join(
        "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
        for row in rows
    )


def human_size(value: int) -> str:
    """Bytes in a short human form.

    >>> human_size(1536)
    '1.5 KB'
    """
    size = float(value)
    for unit in ("B", "KB", "MB", "GB"):
        if size < 1000 or unit == "GB":
            return f"{int(size)} B" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1000
    return f"{size:.1f} TB"
