"""``moto.server`` whose conditional create is atomic, as S3's own is.

moto 5 checks ``If-None-Match: *`` and then stores the object in two steps, with the
request threads of its server between them, so two racing creates of one key can both
succeed (seen in CI: two winners of eight).  S3 (and MinIO, R2, GCS) answer a racing
create with 412 or 409 for all but one writer, and the product's commit relies on that.
This launcher runs moto's own server with its object writes handled one at a time, so
the tests measure the product against the contract S3 gives, not against that race.

Run as ``python moto_atomic.py -H 127.0.0.1 -p PORT`` (moto's own arguments).
"""

from __future__ import annotations

import functools
import sys
import threading
from typing import Any


def serialise_object_writes() -> None:
    """Take one lock around moto's handler of a PUT of an object (check and store)."""
    from moto.s3.responses import S3Response

    lock = threading.Lock()
    original = S3Response.put_object

    @functools.wraps(original)
    def put_object(self: Any) -> Any:
        with lock:
            return original(self)

    S3Response.put_object = put_object  # type: ignore[method-assign]


if __name__ == "__main__":
    serialise_object_writes()
    from moto.server import main

    main(sys.argv[1:])
