"""The files a cell reads, recorded while it executes and checked before a hit.

A checkpoint is only as fresh as the data files its cell read. Python's audit
hooks report every ``open``, ``os.listdir`` and ``os.scandir`` made from Python
code, whatever library makes it (pandas, numpy, json, PIL, pickle, ...), so the
engine records them while a ``%%checkpoint`` cell executes, stores each file's
identity (size, mtime, an xxh3 digest of its bytes) and each listed folder's
names in the manifest, and hits only while all of them are unchanged.

Libraries that open files from C are invisible to audit hooks; ``READERS`` wraps
the ones this module knows (h5py, pyarrow's parquet/feather/csv readers). Files a
subprocess reads stay invisible: ``--deps`` names them.

An audit hook cannot be removed once added, so a single hook is added the first
time a cell is recorded and does nothing while no recording is active.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.machinery
import importlib.util
import os
import site
import sys
import threading
import types
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import xxhash

from .units import format_size

_CHUNK = 16 << 20
# Bigger files are compared by size and mtime only: hashing them at every save and
# every changed-mtime check would cost more than most cells they feed.
DEFAULT_HASH_LIMIT = 1 << 30
# Folder listings longer than this are kept as a digest only (``show`` gives the count).
_NAMES_KEPT = 200
_OUTPUTS_KEPT = 50
_WATCHED = frozenset(
    {"open", "os.listdir", "os.scandir", "sqlite3.connect", "os.remove", "os.rmdir", "os.rename"}
    | {"shutil.rmtree"}
)
_REMOVING = frozenset({"os.remove", "os.rmdir", "shutil.rmtree"})
_STDLIB = os.path.dirname(os.__file__) + os.sep
# The whole package (this module sits one folder down in it).
_OWN = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
# Files the interpreter, not the cell, reads: module sources and byte code (imports),
# package metadata, source lines for tracebacks and warnings.
_STDLIB_MACHINERY = tuple(
    _STDLIB + name for name in ("importlib" + os.sep, "linecache.py", "tokenize.py", "zipimport.py")
)
_SYSTEM = ("/proc", "/sys", "/dev", "/usr", "/etc", "/run", "/lib", "/bin", "/sbin")


def hash_limit() -> int:
    """Files larger than this many bytes are compared by size and mtime only.

    ``$IPY_RESUME_FILE_HASH_LIMIT`` (bytes) overrides the default of 1 GiB.

    >>> hash_limit() > 0
    True
    """
    raw = os.environ.get("IPY_RESUME_FILE_HASH_LIMIT", "")
    try:
        return max(int(raw), 0) if raw else DEFAULT_HASH_LIMIT
    except ValueError:
        return DEFAULT_HASH_LIMIT


def file_digest(path: str | os.PathLike[str]) -> str | None:
    """xxh3-128 of a file's bytes, streamed; None when it cannot be read.

    >>> file_digest("/nonexistent") is None
    True
    """
    hasher = xxhash.xxh3_128()
    try:
        with open(path, "rb") as fh:
            while chunk := fh.read(_CHUNK):
                hasher.update(chunk)
    except OSError:
        return None
    return hasher.hexdigest()


# ---- recording ------------------------------------------------------------------------------


class Recorder:
    """What one executing cell read, wrote and listed, as absolute paths in order.

    >>> with recording(ignore=["/tmp/store"]) as rec:  # doctest: +SKIP
    ...     open("data.csv").read()
    >>> rec.read  # doctest: +SKIP
    ['/home/me/data.csv']
    """

    def __init__(self, ignore: list[str]) -> None:
        self.ignore = _roots(tuple(ignore), "matplotlib" in sys.modules)
        self._read: dict[str, None] = {}
        self._listed: dict[str, None] = {}
        self.written: set[str] = set()
        self.removed: set[str] = set()
        self._lock = threading.Lock()

    @property
    def read(self) -> list[str]:
        return list(self._read)

    @property
    def listed(self) -> list[str]:
        return list(self._listed)

    def _skip(self, path: str) -> bool:
        return (
            (path + os.sep).startswith(self.ignore)
            or f"{os.sep}__pycache__{os.sep}" in path
            or path.endswith((".pyc", ".pyo"))
        )

    def opened(self, path: str, writes: bool) -> None:
        """Note an open: a file written before it is read is the cell's own output."""
        if self._skip(path):
            return
        with self._lock:
            if writes:
                self.written.add(path)  # read earlier: still an input, recorded as left
            elif path not in self.written:
                self._read.setdefault(path, None)

    def removed_path(self, path: str) -> None:
        """Note a file or folder removed (or renamed away) by the cell."""
        if not self._skip(path):
            with self._lock:
                self.removed.add(path)
                self.written.discard(path)

    def gone(self, base: str | None = None) -> list[str]:
        """The files and folders the cell removed that are still gone when it ends (at most
        50), as recorded paths: a restore does not remove them again, and says so."""
        with self._lock:
            removed = sorted(self.removed)
        if not removed:
            return []
        base = base or os.getcwd()
        return [_shown(p, base) for p in removed if not os.path.lexists(p)][:_OUTPUTS_KEPT]

    def listed_dir(self, path: str) -> None:
        if not self._skip(path):
            with self._lock:
                self._listed.setdefault(path, None)

    def identities(self, base: str | None = None) -> dict[str, list[dict[str, Any]]]:
        """The manifest record: each file read and each folder listed, as they are now
        (empty when there is none).

        Taken when the cell has finished, so a file the cell read and then rewrote is
        recorded as the cell left it.
        """
        read, listed = self.read, self.listed
        if not read and not listed:
            return {}  # (most cells read no file: not even the working directory is asked)
        base = base or os.getcwd()
        limit = hash_limit()
        files = [file_identity(p, base, limit) for p in read if not os.path.isdir(p)]
        folders = [dir_identity(p, base) for p in listed]
        return {"files": files, "dirs": folders} if files or folders else {}

    def outputs(self, base: str | None = None) -> list[str]:
        """The files the cell wrote that exist when it ends (at most 50), as recorded paths.

        A restore does not bring them back unless they are named with ``--files``; the
        engine says so when one is missing at a later hit.
        """
        with self._lock:
            written = sorted(self.written)
        if not written:
            return []
        base = base or os.getcwd()
        return [_shown(p, base) for p in written if os.path.isfile(p)][:_OUTPUTS_KEPT]


def present_again(paths: list[str], base: str | None = None) -> list[str]:
    """Which of the files a cell removed are on disk now (a restore leaves them).

    >>> present_again(["/nonexistent/old.csv"])
    []
    """
    if not paths:
        return []
    base = base or os.getcwd()
    return [p for p in paths if os.path.lexists(os.path.join(base, p))]


def missing_outputs(paths: list[str], base: str | None = None) -> list[str]:
    """Which of the recorded output files are not on disk now.

    >>> missing_outputs(["/nonexistent/out.csv"])
    ['/nonexistent/out.csv']
    """
    if not paths:
        return []  # (every hit asks: most cells write no file)
    base = base or os.getcwd()
    return [p for p in paths if not os.path.exists(os.path.join(base, p))]


_stack: list[Recorder] = []
_hooked = False
_hook_lock = threading.Lock()


@contextlib.contextmanager
def recording(ignore: list[str]) -> Iterator[Recorder]:
    """Record the files read while the block runs; *ignore* adds roots to leave out.

    >>> with recording(ignore=[]) as rec:
    ...     _ = os.listdir(".")
    >>> rec.listed == [os.path.abspath(".")]
    True
    """
    _ensure_hook()
    _wrap_readers()
    recorder = Recorder(ignore)
    _stack.append(recorder)
    try:
        yield recorder
    finally:
        with contextlib.suppress(ValueError):
            _stack.remove(recorder)


def _ensure_hook() -> None:
    global _hooked
    with _hook_lock:
        if not _hooked:
            sys.addaudithook(_audit)
            # first in line, so a reader module imported later (pandas imports pyarrow
            # inside read_parquet) is wrapped before the call that imported it reads
            sys.meta_path.insert(0, _ReaderImports())
            _hooked = True


def _audit(event: str, args: tuple[Any, ...]) -> None:
    # Called for every audit event in the process (``id()`` raises one), so the idle
    # path is two cheap tests.
    if not _stack or event not in _WATCHED:
        return
    try:
        if _machinery():
            return
        if event == "open":
            path, _mode, flags = args
            if isinstance(path, int):
                return
            writes = bool(flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND))
            if writes and flags & os.O_RDWR and not flags & os.O_TRUNC:
                # ("r+", "a+", np.memmap(mode="r+"): what the file held is read too)
                _note(path, False)
            _note(path, writes)
        elif event in _REMOVING or event == "os.rename":
            target = args[0] if args else None
            if target is None or isinstance(target, int):
                return
            absolute = os.path.abspath(os.fsdecode(os.fspath(target)))
            for recorder in _stack:
                recorder.removed_path(absolute)
            if event == "os.rename" and len(args) > 1 and not isinstance(args[1], int):
                _note(args[1], True)  # (the new name is a file the cell wrote)
        elif event == "sqlite3.connect":
            target = args[0]
            if isinstance(target, (str, bytes, os.PathLike)) and os.fsdecode(target) != ":memory:":
                _note(target, False)
        else:
            target = args[0] if args else None
            if isinstance(target, int):
                return
            absolute = os.path.abspath(os.fsdecode(target) if target is not None else ".")
            for recorder in _stack:
                recorder.listed_dir(absolute)
    except Exception:  # a recording problem must never fail the user's open
        return


def _note(path: Any, writes: bool) -> None:
    absolute = os.path.abspath(os.fsdecode(os.fspath(path)))
    for recorder in _stack:
        recorder.opened(absolute, writes)


def _machinery() -> bool:
    """Whether the open is made for the interpreter or for ipy_resume, not for the cell.

    The innermost frames are walked outwards past the standard library: the import
    system, ``importlib.metadata`` (which lists every ``sys.path`` folder), and source
    lookups for tracebacks are machinery; the first frame outside the standard library
    decides otherwise: ipy_resume's own (a loop's periodic save) or the cell's.
    """
    frame: types.FrameType | None = sys._getframe(2)  # 1 is the hook, 2 the caller of open
    while frame is not None:
        name = frame.f_code.co_filename
        if name.startswith("<frozen "):
            if name.startswith(("<frozen importlib", "<frozen zipimport")):
                return True
        elif name.startswith(_OWN):
            return True
        elif name.startswith(_STDLIB):
            if name.startswith(_STDLIB_MACHINERY):
                return True
        else:
            return False
        frame = frame.f_back
    return False


@functools.lru_cache(maxsize=8)
def _roots(extra: tuple[str, ...], _matplotlib: bool) -> tuple[str, ...]:
    """Folders whose files are never a cell's data: *extra* (the store), Python's,
    Jupyter's, and matplotlib's once it is imported."""
    roots = list(extra)
    mpl = sys.modules.get("matplotlib")
    if mpl is not None:
        with contextlib.suppress(Exception):
            roots += [mpl.get_configdir(), mpl.get_cachedir()]
    return tuple(dict.fromkeys([*_forms(roots), *_environment_roots()]))


def prepare() -> None:
    """Find the folders of Python and Jupyter a cell's reads are never data in, before a
    cell asks (about 9 ms: importing jupyter_core.paths, resolving links).

    >>> prepare()
    """
    _environment_roots()


@functools.cache
def _environment_roots() -> tuple[str, ...]:
    roots: list[str] = [*_SYSTEM]
    roots += [sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix]
    with contextlib.suppress(Exception):
        roots += site.getsitepackages()
        roots.append(site.getusersitepackages())
    roots.append(os.environ.get("IPYTHONDIR") or os.path.expanduser("~/.ipython"))
    with contextlib.suppress(Exception):
        import jupyter_core.paths as jp  # present wherever a kernel runs

        roots += [jp.jupyter_runtime_dir(), jp.jupyter_data_dir(), jp.jupyter_config_dir()]
    return tuple(dict.fromkeys(_forms(roots)))


def _forms(roots: list[str]) -> Iterator[str]:
    """Each folder as given and with its links resolved, ending in a separator."""
    for root in roots:
        for form in (os.path.abspath(root), os.path.realpath(root)):
            if form != os.sep:
                yield form.rstrip(os.sep) + os.sep


# ---- libraries that open files from C -----------------------------------------------------


@dataclass(frozen=True)
class Reader:
    """A library call that opens a file from C, so no audit event reports it.

    *target* is ``"attr"`` or ``"Class.method"`` inside *module*; *arg* the position
    (counting ``self`` for methods) and *keyword* the name of the path argument;
    *mode* the position and name of a mode argument whose value other than ``"r"``
    means the file is written.

    >>> Reader("h5py", "File.__init__", 1, "name", mode=(2, "mode")).module
    'h5py'
    """

    module: str
    target: str
    arg: int
    keyword: str
    mode: tuple[int, str] | None = None


READERS: list[Reader] = [
    Reader("h5py", "File.__init__", 1, "name", mode=(2, "mode")),
    Reader("pyarrow.parquet", "read_table", 0, "source"),
    Reader("pyarrow.parquet", "ParquetFile.__init__", 1, "source"),
    Reader("pyarrow.parquet", "ParquetDataset.__init__", 1, "path_or_paths"),
    Reader("pyarrow.feather", "read_table", 0, "source"),
    Reader("pyarrow.csv", "read_csv", 0, "input_file"),
]
_wrapped: set[Reader] = set()


def _wrap_readers() -> None:
    """Wrap each registered reader whose module is imported (once per process)."""
    for reader in READERS:
        if reader in _wrapped or reader.module not in sys.modules:
            continue
        _wrapped.add(reader)
        owner: Any = sys.modules[reader.module]
        *path, attr = reader.target.split(".")
        with contextlib.suppress(AttributeError):
            for part in path:
                owner = getattr(owner, part)
            original = getattr(owner, attr)
            setattr(owner, attr, _reporting(original, reader))


class _ReaderImports:
    """Wraps a registered reader's module as soon as it has been imported.

    (A meta path finder by its ``find_spec``, without the ``importlib.abc`` base class,
    whose import costs a sixth of the extension's.)
    """

    def __init__(self) -> None:
        self._busy: set[str] = set()
        # The readers' module names, rebuilt when READERS changes: asked on every import
        # (hundreds per notebook), where a scan of the readers cost more than the answer.
        self._readers: list[Reader] = []
        self._modules: frozenset[str] = frozenset()

    def find_spec(
        self, fullname: str, path: Any = None, target: types.ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if self._readers != READERS:
            self._readers = list(READERS)
            self._modules = frozenset(r.module for r in READERS)
        if fullname not in self._modules or fullname in self._busy:
            return None
        self._busy.add(fullname)
        try:
            spec = importlib.util.find_spec(fullname)
        finally:
            self._busy.discard(fullname)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        wrapper: Any = _WrappingLoader(spec.loader)  # a loader by its methods
        spec.loader = wrapper
        return spec


class _WrappingLoader:
    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType | None:
        module: types.ModuleType | None = self.inner.create_module(spec)
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        self.inner.exec_module(module)
        _wrap_readers()

    def __getattr__(self, name: str) -> Any:  # get_source, get_data, ... for tracebacks
        return getattr(self.inner, name)


def _reporting(original: Callable[..., Any], reader: Reader) -> Callable[..., Any]:
    @functools.wraps(original)
    def call(*args: Any, **kwargs: Any) -> Any:
        if _stack:
            with contextlib.suppress(Exception):
                _note_tree(
                    _argument(args, kwargs, reader.arg, reader.keyword),
                    _writes(args, kwargs, reader),
                )
        return original(*args, **kwargs)

    return call


def _argument(args: tuple[Any, ...], kwargs: dict[str, Any], index: int, name: str) -> Any:
    return kwargs[name] if name in kwargs else args[index] if len(args) > index else None


def _writes(args: tuple[Any, ...], kwargs: dict[str, Any], reader: Reader) -> bool:
    if reader.mode is None:
        return False
    return _argument(args, kwargs, *reader.mode) not in ("r", "rb", None)


def _note_tree(target: Any, writes: bool) -> None:
    """Note a path given to a C reader; a folder (a parquet dataset) counts file by file."""
    if isinstance(target, (list, tuple)):
        for item in target:
            _note_tree(item, writes)
        return
    if not isinstance(target, (str, bytes, os.PathLike)):
        return  # a file object: Python opened it, and the audit hook saw that
    path = os.path.abspath(os.fsdecode(os.fspath(target)))
    if os.path.isdir(path):
        for folder, _dirs, files in os.walk(path):
            for recorder in _stack:
                recorder.listed_dir(folder)
            for name in files:
                _note(os.path.join(folder, name), writes)
    else:
        _note(path, writes)


# ---- identities and checks ----------------------------------------------------------------


def _shown(path: str, base: str) -> str:
    """A path relative to the working folder when it lies inside it (portable stores)."""
    rel = os.path.relpath(path, base)
    return path if rel.startswith(os.pardir) else rel


def file_identity(path: str, base: str, limit: int) -> dict[str, Any]:
    """Size, mtime and content digest of one file (a missing file is recorded as such).

    >>> file_identity("/nonexistent", "/", 10)["missing"]
    True
    """
    shown = _shown(path, base)
    try:
        st = os.stat(path)
    except OSError:
        return {"path": shown, "missing": True}
    digest = _cached_digest(path, st) if st.st_size <= limit else None
    return {"path": shown, "size": st.st_size, "mtime_ns": st.st_mtime_ns, "digest": digest}


def _listing(path: str) -> list[str] | None:
    try:
        return sorted(os.listdir(path))
    except OSError:
        return None


def dir_identity(path: str, base: str) -> dict[str, Any]:
    """The sorted names in one folder, as a digest (and the names, when few).

    >>> dir_identity("/nonexistent", "/")["missing"]
    True
    """
    shown = _shown(path, base)
    names = _listing(path)
    if names is None:
        return {"path": shown, "missing": True}
    out: dict[str, Any] = {"path": shown, "count": len(names), "digest": _names_digest(names)}
    if len(names) <= _NAMES_KEPT:
        out["names"] = names
    return out


def _names_digest(names: list[str]) -> str:
    return xxhash.xxh3_128("\0".join(names).encode("utf-8", "surrogateescape")).hexdigest()


# Digests computed in this process, by (path, size, mtime_ns, inode): a file is hashed
# again only when one of them changed, so a save after a check (or a loop's periodic
# saves) do not read a large file twice.
_digests: dict[tuple[str, int, int, int], str | None] = {}
_DIGESTS_KEPT = 10_000


def _cached_digest(path: str, st: os.stat_result) -> str | None:
    key = (path, st.st_size, st.st_mtime_ns, st.st_ino)
    if key not in _digests:
        if len(_digests) >= _DIGESTS_KEPT:
            _digests.clear()
        _digests[key] = file_digest(path)
    return _digests[key]


def changed(record: dict[str, Any], base: str | None = None) -> str | None:
    """Why the recorded files differ from the disk now, or None when none does.

    Size and mtime are compared first; a file is hashed again only when one differs.

    >>> changed({"files": [], "dirs": []}) is None
    True
    """
    if not record:
        return None  # (every hit asks: most cells read no file)
    base = base or os.getcwd()
    for entry in record.get("files", []):
        reason = _file_changed(entry, base)
        if reason:
            return reason
    for entry in record.get("dirs", []):
        reason = _dir_changed(entry, base)
        if reason:
            return reason
    return None


@dataclass
class FreshFiles:
    """A ``Store.find`` acceptor: a checkpoint is taken only while the files it recorded
    are unchanged; ``reasons`` says why the ones turned down were (newest first).

    >>> fresh = FreshFiles(); fresh(type("M", (), {"info": {}, "id": "x"})())
    True
    """

    reasons: list[str] = field(default_factory=list)

    def __call__(self, manifest: Any) -> bool:
        reason = changed(manifest.info.get("file_deps") or {})
        if reason is not None:
            self.reasons.append(f"{reason} since checkpoint {manifest.id}")
        return reason is None

    @property
    def first(self) -> str | None:
        return self.reasons[0] if self.reasons else None


def _file_changed(entry: dict[str, Any], base: str) -> str | None:
    shown = str(entry.get("path", ""))
    path = os.path.join(base, shown)
    try:
        st = os.stat(path)
    except OSError:
        return None if entry.get("missing") else f"file '{shown}' no longer exists"
    if entry.get("missing"):
        return f"file '{shown}' exists now"
    if st.st_size == entry.get("size") and st.st_mtime_ns == entry.get("mtime_ns"):
        return None
    if entry.get("digest") is None:
        return f"file '{shown}' changed (its size or modification time; too large to hash)"
    if st.st_size != entry.get("size"):
        return f"file '{shown}' changed ({entry.get('size')} → {st.st_size} bytes)"
    if _cached_digest(path, st) != entry.get("digest"):
        return f"file '{shown}' changed (same size, different content)"
    return None


def _dir_changed(entry: dict[str, Any], base: str) -> str | None:
    shown = str(entry.get("path", ""))
    names = _listing(os.path.join(base, shown))
    if names is None:
        return None if entry.get("missing") else f"folder '{shown}' no longer exists"
    if entry.get("missing"):
        return f"folder '{shown}' exists now"
    if _names_digest(names) == entry.get("digest"):
        return None
    old = entry.get("names")
    if isinstance(old, list):
        added = sorted(set(names) - set(old))
        removed = sorted(set(old) - set(names))
        what = [f"'{n}' appeared" for n in added[:3]] + [f"'{n}' vanished" for n in removed[:3]]
        return f"folder '{shown}' changed: " + ", ".join(what)
    return f"folder '{shown}' changed ({entry.get('count')} → {len(names)} entries)"


def describe(record: dict[str, Any]) -> list[str]:
    """One line per recorded file and folder, for ``show``.

    >>> describe({"files": [{"path": "a.csv", "size": 12, "digest": "ab"}], "dirs": []})
    ['a.csv  12 B']
    """
    lines = []
    for entry in record.get("files", []):
        if entry.get("missing"):
            lines.append(f"{entry['path']}  (missing when recorded)")
            continue
        note = "" if entry.get("digest") else "  (too large to hash: compared by size and mtime)"
        lines.append(f"{entry['path']}  {format_size(int(entry.get('size', 0)))}{note}")
    for entry in record.get("dirs", []):
        count = "missing" if entry.get("missing") else f"{entry.get('count', 0)} entries"
        lines.append(f"{entry['path']}{os.sep}  (folder listing, {count})")
    return lines
