"""Store URLs (``s3://bucket/prefix``) as text: what is one, and its protocol and rest.

Kept apart from :mod:`.location` (which opens stores of every kind) so the object-store
backend can read a URL without importing the stores built on it.
"""

from __future__ import annotations

import re

from ipy_resume.store.fsio import StoreError

__all__ = ["StoreURLError", "is_url", "split_url"]

_URL = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://(.*)$")


class StoreURLError(StoreError):
    """A store URL that cannot be used: unknown protocol, missing package, no bucket."""


def is_url(where: object) -> bool:
    """True when *where* is written as ``protocol://…`` (a Path never is).

    >>> is_url("s3://bucket/team"), is_url("/data/store"), is_url("C:/x")
    (True, False, False)
    """
    return isinstance(where, str) and _URL.match(where) is not None


def split_url(url: str) -> tuple[str, str]:
    """``(protocol, rest)`` of a store URL, the protocol in lower case.

    >>> split_url("S3://bucket/team/")
    ('s3', 'bucket/team')
    """
    match = _URL.match(url)
    if match is None:
        raise StoreURLError(f"{url!r} is not a store URL (protocol://bucket/prefix)")
    return match.group(1).lower(), match.group(2).strip("/")
