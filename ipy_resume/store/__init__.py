"""Durable, signed, content-addressed checkpoint storage.

``Store`` is the façade the engine uses; see :mod:`ipy_resume.store.store`.
Every error raised for a store problem is a :class:`StoreError` whose message
is one line saying what, where and how to recover.
"""

from __future__ import annotations

from ipy_resume.store import location
from ipy_resume.store.fsio import (
    CorruptBlob,
    FormatTooNew,
    ManifestError,
    MissingBlob,
    SaveError,
    StoreError,
    Untrusted,
)
from ipy_resume.store.location import StoreURLError, open_store
from ipy_resume.store.lock import StoreLocked
from ipy_resume.store.manifest import FORMAT_VERSION, BlobRef, Manifest
from ipy_resume.store.retention import GcReport, parse_size
from ipy_resume.store.signing import KeyFileError, default_key_path, load_or_create_key
from ipy_resume.store.store import DecodeError, SaveResult, Store

__all__ = [
    "FORMAT_VERSION",
    "BlobRef",
    "CorruptBlob",
    "DecodeError",
    "FormatTooNew",
    "GcReport",
    "KeyFileError",
    "Manifest",
    "ManifestError",
    "MissingBlob",
    "SaveError",
    "SaveResult",
    "Store",
    "StoreError",
    "StoreLocked",
    "StoreURLError",
    "Untrusted",
    "default_key_path",
    "load_or_create_key",
    "location",
    "open_store",
    "parse_size",
]
