"""Sizes and times in words, shared by every message, table and report."""

from __future__ import annotations


def format_size(value: int, base: int = 1000) -> str:
    """A short size: decimal units (``1.5 KB``) or, with ``base=1024``, binary (``1.5 KiB``).

    >>> format_size(1500), format_size(1536, base=1024)
    ('1.5 KB', '1.5 KiB')
    """
    units = ("B", "KB", "MB", "GB", "TB") if base == 1000 else ("B", "KiB", "MiB", "GiB", "TiB")
    size = float(value)
    for unit in units[:-1]:
        if size < base:
            return f"{int(size)} B" if unit == "B" else f"{size:.1f} {unit}"
        size /= base
    return f"{size:.1f} {units[-1]}"


def format_timestamp(created: str) -> str:
    """An ISO 8601 time as messages and tables show it: ``YYYY-MM-DD HH:MM:SS`` (UTC).

    >>> format_timestamp("2024-05-01T12:30:05.123456+00:00")
    '2024-05-01 12:30:05'
    """
    return created.replace("T", " ")[:19]
