"""The per-user signing key and HMAC-SHA256 signatures.

The key is 32 random bytes stored as hex in
``<jupyter data dir>/ipy_resume/signing.key`` (``JUPYTER_DATA_DIR`` moves it),
readable by its owner only.  It is created atomically: written to a temporary
file created with mode 0600, fsynced, then published with ``os.link``; when
several processes race, the first link wins and the others read the winner's
key, so every process ends with the same key.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import stat
import warnings
from pathlib import Path

from ipy_resume.store import fsio

__all__ = [
    "KEY_BYTES",
    "KeyFileError",
    "default_key_path",
    "load_or_create_key",
    "sign",
    "verify",
]

KEY_BYTES = 32


class KeyFileError(fsio.StoreError):
    """The signing key file exists but cannot be used."""


def default_key_path() -> Path:
    """``<jupyter data dir>/ipy_resume/signing.key``."""
    from jupyter_core.paths import jupyter_data_dir

    return Path(jupyter_data_dir()) / "ipy_resume" / "signing.key"


def load_or_create_key(path: str | os.PathLike[str] | None = None) -> bytes:
    """Return the signing key at *path* (default :func:`default_key_path`), creating it if needed."""
    key_path = Path(path) if path is not None else default_key_path()
    try:
        return _read_key(key_path)
    except FileNotFoundError:
        pass
    fsio.makedirs(key_path.parent.parent)
    fsio.makedirs(key_path.parent, mode=0o700)  # our own folder: owner only
    material = secrets.token_bytes(KEY_BYTES).hex().encode("ascii") + b"\n"
    try:
        with fsio.atomic_write(key_path, exclusive=True, mode=0o600) as f:
            f.write(material)
    except FileExistsError:
        pass  # another process won the race: use its key
    return _read_key(key_path)


def _read_key(path: Path) -> bytes:
    with open(path, "rb") as f:
        mode = os.fstat(f.fileno()).st_mode
        text = f.read(4 * KEY_BYTES + 16)
    if os.name == "posix" and mode & (stat.S_IRWXG | stat.S_IRWXO):
        warnings.warn(
            f"the ipy_resume signing key {path} is readable by other users; "
            f"run 'chmod 600 {path}' so nobody else can forge checkpoints",
            stacklevel=3,
        )
    try:
        key = bytes.fromhex(text.decode("ascii").strip())
    except (UnicodeDecodeError, ValueError):
        key = b""
    if len(key) != KEY_BYTES:
        raise KeyFileError(
            f"the signing key {path} is malformed (expected {2 * KEY_BYTES} hex digits); "
            "delete it to create a new key (checkpoints signed with the old key will then "
            "be re-executed)",
            path=str(path),
        )
    return key


def sign(key: bytes, data: bytes) -> str:
    """HMAC-SHA256 of *data* under *key*, as hex."""
    return hmac.new(key, data, hashlib.sha256).hexdigest()


def verify(key: bytes, data: bytes, signature: object) -> bool:
    """True when *signature* is the HMAC-SHA256 of *data* under *key* (constant time)."""
    if not isinstance(signature, str) or not signature.isascii():
        return False
    return hmac.compare_digest(sign(key, data), signature)
