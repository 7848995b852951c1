"""Where a store lives: a folder, or the URL of an object store (``s3://bucket/prefix``).

Every entry point (``--store``, ``$IPY_RESUME_DIR``, the panel, the widget) turns what
the user typed into a *location* with :func:`resolve`: an absolute :class:`~pathlib.Path`
for a folder, or a normalised URL string for an object store.  A URL whose protocol
needs a package that is not installed is refused here in one line naming the package,
rather than taken for a folder called ``s3:``.

Which store a front end opens is decided once, by :func:`store_location` (the magics,
``ipy-resume``, ``ipy-resume run`` and the papermill engine all call it): the store
named, else ``$IPY_RESUME_DIR``, else ``.ipy_resume`` in the notebook's folder.  A
relative ``$IPY_RESUME_DIR`` is taken from the notebook's folder, the kernel's working
directory, so a headless run started elsewhere uses the store its kernel's cells would.
A kernel a front end starts (``ipy-resume run``, the papermill engine, the demo) gets its
environment from :func:`kernel_env`: the store handed over resolved.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from ipy_resume.store.journal import SYNC_ENV
from ipy_resume.store.urls import StoreURLError, is_url, split_url

if TYPE_CHECKING:
    from ipy_resume.store.store import Store

__all__ = [
    "STORE_DIRNAME",
    "STORE_ENV",
    "Location",
    "StoreURLError",
    "default_root",
    "default_store_dir",
    "is_url",
    "kernel_env",
    "key",
    "open_store",
    "resolve",
    "split_url",
    "store_location",
]

Location = Path | str
"""An absolute folder, or an object-store URL (always a ``str``)."""

STORE_DIRNAME = ".ipy_resume"
"""The store's folder when none is named: in the kernel's working directory."""
STORE_ENV = "IPY_RESUME_DIR"
"""The environment variable that names the store (a folder or a URL)."""

# the package each common protocol needs (fsspec's own table says the same for more)
_PACKAGES = {
    "s3": "s3fs",
    "s3a": "s3fs",
    "gs": "gcsfs",
    "gcs": "gcsfs",
    "az": "adlfs",
    "abfs": "adlfs",
}
# protocols that are folders on this machine in all but name
_LOCAL = {"file", "local"}


def _check_protocol(protocol: str, url: str) -> None:
    package = _PACKAGES.get(protocol)
    try:
        import fsspec
    except ImportError:
        raise StoreURLError(
            f"the store {url} needs fsspec{' and ' + package if package else ''}: "
            f"pip install 'ipy_resume[s3]'{' ' + package if package and package != 's3fs' else ''}"
        ) from None
    try:
        fsspec.get_filesystem_class(protocol)
    except ImportError:
        package = package or protocol + "fs"
        raise StoreURLError(
            f"the store {url} needs the package {package}, which is not installed: "
            f"pip install {package}"
        ) from None
    except ValueError:
        raise StoreURLError(
            f"the store {url} has an unknown protocol '{protocol}://'; use a folder or a "
            "URL such as s3://bucket/prefix"
        ) from None


def resolve(where: str | os.PathLike[str] | None, base: Path | None = None) -> Location:
    """The location of the store *where* names (relative folders against *base* or the cwd).

    >>> resolve("s3://bucket/team/")
    's3://bucket/team'
    >>> resolve("store", base=Path("/srv"))
    PosixPath('/srv/store')
    """
    if where is None:
        raise ValueError("no store given")
    if isinstance(where, str) and is_url(where):
        protocol, rest = split_url(where)
        if where.split("://", 1)[1].startswith("/") and protocol not in _LOCAL:
            rest = ""  # s3:///prefix: the bucket is missing
        if protocol in _LOCAL:
            return resolve("/" + rest.lstrip("/"))
        url = f"{protocol}://{rest}"
        if not rest.split("/")[0]:
            raise StoreURLError(
                f"the store {where} names no bucket: use {protocol}://bucket/prefix"
            )
        _check_protocol(protocol, url)
        return url
    path = Path(where).expanduser()
    if base is not None and not path.is_absolute():
        path = base / path
    return path.resolve()


def default_store_dir(
    folder: Path | None = None, env: Mapping[str, str] | None = None
) -> Path | str:
    """The store used when none is named: ``$IPY_RESUME_DIR``, else ``.ipy_resume`` in *folder*.

    *folder* is the kernel's working directory (default: this process's); a relative
    ``$IPY_RESUME_DIR`` is taken from it when given.  A URL (``s3://bucket/prefix``) is
    returned as written.  *env* defaults to ``os.environ``.

    >>> str(default_store_dir(Path("/nb"), env={}))
    '/nb/.ipy_resume'
    >>> default_store_dir(env={"IPY_RESUME_DIR": "s3://bucket/team"})
    's3://bucket/team'
    """
    value = (os.environ if env is None else env).get(STORE_ENV)
    if value and is_url(value):
        return value
    if value:
        return Path(value) if folder is None else (folder / Path(value).expanduser()).resolve()
    return (Path.cwd() if folder is None else folder) / STORE_DIRNAME


def store_location(
    named: str | os.PathLike[str] | None = None,
    folder: Path | None = None,
    env: Mapping[str, str] | None = None,
) -> Location:
    """The store a front end opens, resolved: *named*, else :func:`default_store_dir`.

    *named* is the store the user gave (``--store``); a relative one is taken from this
    process's working directory, as a path typed on a command line is.  Otherwise the
    default store of the notebook in *folder* (default: this process's working
    directory), where a relative ``$IPY_RESUME_DIR`` is taken from *folder*.

    >>> str(store_location(folder=Path("/nb"), env={"IPY_RESUME_DIR": "runs"}))
    '/nb/runs'
    >>> str(store_location("/srv/store", folder=Path("/nb"), env={}))
    '/srv/store'
    """
    if named:
        return resolve(named)
    return resolve(default_store_dir(folder, env))


def default_root() -> Location:
    """The store the kernel uses now, resolved (``$IPY_RESUME_DIR`` or ``./.ipy_resume``).

    >>> default_root().name  # doctest: +SKIP
    '.ipy_resume'
    """
    return store_location()


def key(where: str | os.PathLike[str]) -> str:
    """A string that is equal for every spelling of one store (a dict key for engines).

    >>> key("s3://b/t/") == key("s3://b/t")
    True
    """
    return str(resolve(where))


def open_store(where: str | os.PathLike[str], key: bytes | None = None) -> Store:
    """The store at *where*: a folder or an object-store URL.

    >>> open_store("/tmp/doc-store")  # doctest: +SKIP
    Store('/tmp/doc-store')
    >>> open_store("s3://bucket/team")  # doctest: +SKIP
    RemoteStore('s3://bucket/team')
    """
    location = resolve(where)
    if isinstance(location, str):
        from ipy_resume.store.remote import RemoteStore

        return RemoteStore(location, key=key)
    from ipy_resume.store.store import Store

    return Store(location, key=key)


def kernel_env(
    store: Location, base: Mapping[str, str] | None = None, *, sync: bool = True
) -> dict[str, str]:
    """The environment of a kernel a front end starts: *base* (default: this process's)
    with the store named, resolved, so the kernel uses the one the front end chose
    wherever it starts.  With *sync*, the kernel writes every timeline row at once (a
    headless run reads each cell's outcome from the journal right after the cell).

    >>> kernel_env(Path("/srv/store"), {})["IPY_RESUME_DIR"]
    '/srv/store'
    """
    env = dict(os.environ if base is None else base)
    env[STORE_ENV] = str(resolve(store))
    if sync:
        env[SYNC_ENV] = "1"
    return env
