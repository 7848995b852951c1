"""The per-user signing key and HMAC-SHA256 signatures.

The key is 32 random bytes stored as hex in
``<jupyter data dir>/ipy_resume/signing.key`` (``JUPYTER_DATA_DIR`` moves it, and
``IPY_RESUME_KEY_FILE`` names another file), readable by its owner only.  It is created atomically: written to a temporary
file created with mode 0600, fsynced, then published with ``os.link``; when
several processes race, the first link wins and the others read the winner's
key, so every process ends with the same key.  A backup beside it
(``signing.key.backup``) replaces it when it is lost or damaged, and is itself
written again when it is.  The backup holds the key :data:`BACKUP_COPIES` times,
each with a digest of it, so that a few flipped bytes in both files still leave
the key; the first copy is laid out as versions before the spare copies read it.
When the key file and its backup are both beyond reading, both are moved aside
(``signing.key.damaged-<time>``) and a new key is made: checkpoints signed with
the old one execute again once, instead of every cell running without a store.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import re
import secrets
import stat
import sys
import time
import warnings
from pathlib import Path

from ipy_resume.store import fsio

__all__ = [
    "KEY_BYTES",
    "KEY_FILE_ENV",
    "KeyFileError",
    "backup_path",
    "default_key_path",
    "load_or_create_key",
    "sign",
    "verify",
]

KEY_BYTES = 32
BACKUP_COPIES = 3
# older versions read the first 192 bytes of a backup and want exactly the key's line and
# its digest's there: the first copy keeps that layout, the others follow those bytes
_OLD_READ = 4 * KEY_BYTES + 64
_COPY = re.compile(rb"([0-9a-f]{%d})\s+([0-9a-f]{16})(?![0-9a-f])" % (2 * KEY_BYTES))


class KeyFileError(fsio.StoreError):
    """The signing key file exists but cannot be used."""


KEY_FILE_ENV = "IPY_RESUME_KEY_FILE"
"""Names a key file to use instead of the one in the Jupyter data directory."""


def default_key_path() -> Path:
    """``$IPY_RESUME_KEY_FILE``, else ``<jupyter data dir>/ipy_resume/signing.key``.

    The variable lets the same user on a fresh cloud VM (a new Jupyter data directory)
    bring their key as a mounted secret, so their own checkpoints in a bucket stay
    trusted.  The key is never kept in the store: whoever can write there could then
    sign pickles.

    >>> import os; os.environ["IPY_RESUME_KEY_FILE"] = "/secrets/k"; str(default_key_path())
    '/secrets/k'
    >>> del os.environ["IPY_RESUME_KEY_FILE"]
    """
    override = os.environ.get(KEY_FILE_ENV)
    if override:
        return Path(override).expanduser()
    return Path(jupyter_data_dir()) / "ipy_resume" / "signing.key"


def jupyter_data_dir() -> str:
    """``jupyter_core.paths.jupyter_data_dir()``, without importing it where its answer
    is plain: ``$JUPYTER_DATA_DIR``, or the XDG folder on Linux and other Unixes.

    Outside a kernel (a terminal, ``ipy-resume``) nothing has imported jupyter_core, and
    its import (platformdirs, a dozen regular expressions) was most of the first
    checkpoint's fixed cost in a new process.  Where jupyter_core is imported, or decides
    by rules of its own (macOS, Windows, ``$JUPYTER_PLATFORM_DIRS``), it answers.

    >>> import os; os.environ["JUPYTER_DATA_DIR"] = "/data/j"; jupyter_data_dir()
    '/data/j'
    >>> del os.environ["JUPYTER_DATA_DIR"]
    """
    env = os.environ
    if "jupyter_core.paths" not in sys.modules:
        if env.get("JUPYTER_DATA_DIR"):
            return env["JUPYTER_DATA_DIR"]
        if sys.platform not in ("darwin", "win32") and "JUPYTER_PLATFORM_DIRS" not in env:
            home = str(Path("~").expanduser().resolve())
            xdg = env.get("XDG_DATA_HOME") or os.path.join(home, ".local", "share")
            return os.path.join(xdg, "jupyter")
    from jupyter_core.paths import jupyter_data_dir as theirs

    return str(theirs())


def backup_path(path: str | os.PathLike[str]) -> Path:
    """Where the backup of the key at *path* lives: ``<path>.backup`` beside it.

    >>> backup_path("/k/signing.key").name
    'signing.key.backup'
    """
    p = Path(path)
    return p.with_name(p.name + ".backup")


def _fingerprint(key: bytes) -> str:
    return hashlib.sha256(b"ipy_resume key backup\0" + key).hexdigest()[:16]


def _backup_bytes(key: bytes) -> bytes:
    # the key plus a digest of it, several times: a copy that was damaged is found, not
    # used, and a key file damaged into other valid hex digits is told apart from the backup
    line = key.hex().encode("ascii") + b" " + _fingerprint(key).encode("ascii") + b"\n"
    first = line.replace(b" ", b"\n").ljust(_OLD_READ, b"\n")
    return first + line * (BACKUP_COPIES - 1)


def _old_backup_bytes(key: bytes) -> bytes:
    # a backup written before the spare copies: sound, and left as it is
    return key.hex().encode("ascii") + b"\n" + _fingerprint(key).encode("ascii") + b"\n"


def _read_backup(path: Path) -> tuple[bytes | None, bytes | None]:
    """The key in the first sound copy of the backup file (None: missing, unreadable or
    every copy damaged), and the file's bytes (None: there is no such file)."""
    try:
        with open(path, "rb") as f:
            data = f.read(2 * _OLD_READ + 4 * BACKUP_COPIES * KEY_BYTES)
    except FileNotFoundError:
        return None, None
    except OSError:
        return None, b""
    for found in _COPY.finditer(data):
        key = bytes.fromhex(found.group(1).decode("ascii"))
        if found.group(2).decode("ascii") == _fingerprint(key):
            return key, data
    return None, data


def load_or_create_key(
    path: str | os.PathLike[str] | None = None, *, notes: list[str] | None = None
) -> bytes:
    """Return the signing key at *path* (default :func:`default_key_path`), creating it if needed.

    The key is kept twice: in *path* and, with a digest of it, in :func:`backup_path`.
    When one of them is lost or damaged the other is used and the lost one written
    again, so every checkpoint signed with the key stays trusted.  A key file with no
    backup (made before backups existed, or mounted as a secret) gets one when its folder
    is writable.  When both are damaged beyond reading they are moved aside and a new
    key is made.  *notes* gets one line for each such repair.

    >>> len(load_or_create_key("/tmp/doc-keys/signing.key"))  # doctest: +SKIP
    32
    """
    key_path = Path(path) if path is not None else default_key_path()
    spare = backup_path(key_path)
    backed, backup_data = _read_backup(spare)
    spare_exists = backup_data is not None
    damage = ""  # what was wrong, for the note
    key: bytes | None
    try:
        key = _read_key(key_path)
    except FileNotFoundError:
        key = backed
        damage = f"the signing key {key_path} was missing" if spare_exists else ""
    except KeyFileError:
        if backed is None and not spare_exists:
            raise  # a key of the user's own (or from before backups): never replaced
        key = backed  # damaged: the backup has it (and the key file is written again)
        damage = f"the signing key {key_path} was damaged (not {2 * KEY_BYTES} hex digits)"
    if key is None and damage:
        # the backup is damaged too: nothing is left of the key; set both aside
        key = _file_key(key_path)  # (unless another process has just made a new one)
        if key is None:
            try:
                moved = f"moved aside: {_set_aside(key_path, spare)}"
            except OSError as exc:  # (a read-only folder: a mounted secret is never replaced)
                if key_path.exists():
                    raise KeyFileError(
                        f"the signing key {key_path} and its backup are damaged and cannot be "
                        f"moved aside ({exc.strerror or exc}); delete both to create a new key "
                        "(checkpoints signed with the old key will then be re-executed)",
                        path=str(key_path),
                    ) from exc
                moved = f"left in place: {exc.strerror or exc}"
            damage += f" and its backup {spare.name} was damaged too ({moved})"
    elif key is not None and backed is not None and key != backed:
        key = backed  # the key file changed into other valid digits; the backup checks itself
        damage = f"the signing key {key_path} changed into other digits"
    made = key is None
    if key is None:
        fsio.makedirs(key_path.parent.parent)
        fsio.makedirs(key_path.parent, mode=0o700)  # our own folder: owner only
        material = secrets.token_bytes(KEY_BYTES).hex().encode("ascii") + b"\n"
        try:
            with fsio.atomic_write(key_path, exclusive=True, mode=0o600) as f:
                f.write(material)
        except FileExistsError:
            pass  # another process won the race: use its key
        key = _read_key(key_path)
    elif _file_key(key_path) != key:
        _write_quietly(key_path, key.hex().encode("ascii") + b"\n")
    how = f"rebuilt from its backup {spare.name}"
    if made:
        how = "a new key was made: checkpoints signed with the old one execute again once"
    if backed != key or backup_data not in (_backup_bytes(key), _old_backup_bytes(key)):
        if damage and backed == key:  # (the backup's first copy was damaged, another sound)
            damage += f" and its backup {spare.name} was damaged too"
            how = f"both rebuilt from a sound copy in {spare.name}"
        elif spare_exists and not damage:
            # (only the backup was damaged: the key file was sound)
            damage, how = f"the signing key's backup {spare} was damaged", "rebuilt from the key"
        _write_quietly(spare, _backup_bytes(key))
    if damage and notes is not None:
        notes.append(f"{damage}: {how}")
    return key


def _set_aside(*paths: Path) -> str:
    """Move damaged key files aside under a name that says so (never deleted); their names."""
    stamp = time.strftime("%Y%m%dT%H%M%S")
    moved = []
    for path in paths:
        target = path.with_name(f"{path.name}.damaged-{stamp}-{secrets.token_hex(2)}")
        try:
            os.replace(path, target)
        except FileNotFoundError:
            continue  # another process moved it
        moved.append(target.name)
    return ", ".join(moved) or "by another process"


def _file_key(path: Path) -> bytes | None:
    try:
        return _read_key(path)
    except (OSError, KeyFileError):
        return None


def _write_quietly(path: Path, data: bytes) -> None:
    """Write a copy of the key (mode 0600); a read-only folder (a mounted secret) is fine."""
    try:
        fsio.makedirs(path.parent, mode=0o700)
        with fsio.atomic_write(path, mode=0o600) as f:
            f.write(data)
    except OSError:
        pass


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
