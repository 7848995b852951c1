"""An object store (``s3://bucket/prefix`` or any fsspec protocol) as a :class:`.Backend`.

What it does beyond the bare fsspec calls, and why:

* **Commit with one winner.** :meth:`FsspecBackend.put_if_absent` is a conditional
  put (``If-None-Match: *``): of two writers of one manifest exactly one succeeds.  A
  retry whose first attempt did land (the answer was lost) finds its own bytes there
  and counts as a success, never as a lost race.
* **Large objects in parallel parts.** Objects of :data:`MULTIPART_MIN` bytes or more go
  up as a multipart upload, several parts at a time; nothing is visible until the
  upload completes, so a kill mid-upload leaves no partial object (only parts, which
  ``gc`` aborts).  Large reads are parallel ranged GETs straight into the caller's buffer.
* **Retries with backoff** on what passes: connection resets and refusals, timeouts,
  HTTP 5xx, ``SlowDown``/throttling, for up to :data:`RETRY_SECONDS` (so a server
  restarted mid-save is waited for).  Everything else becomes a :class:`RemoteError`
  whose message is one line saying what to do.
* **No credential in any message.** Messages are built from error codes, the bucket and
  the endpoint's host; any credential found in the environment is scrubbed as well.

Credentials and the endpoint come from the standard AWS chain, so ``AWS_ENDPOINT_URL``,
``AWS_ACCESS_KEY_ID`` and ``AWS_SECRET_ACCESS_KEY`` point it at any S3-compatible server.
"""

from __future__ import annotations

import builtins
import contextlib
import errno
import os
import random
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import FIRST_EXCEPTION, Future, ThreadPoolExecutor, wait
from datetime import datetime
from typing import Any, TypeVar
from urllib.parse import urlsplit

from ipy_resume.store import leases
from ipy_resume.store.backend import Backend, Identity, ObjectInfo, Sink
from ipy_resume.store.fsio import StoreError
from ipy_resume.store.urls import split_url

__all__ = ["MULTIPART_MIN", "RETRY_SECONDS", "FsspecBackend", "RemoteError"]

T = TypeVar("T")

RETRY_SECONDS = float(os.environ.get("IPY_RESUME_RETRY_SECONDS", "60"))
"""How long transient failures are retried before a save or load gives up."""
PART_SIZE = 50 << 20
"""Bytes per part of a multipart upload (and per ranged GET of a large read)."""
MULTIPART_MIN = 2 * PART_SIZE
"""Objects at least this large go up in parts."""
CONCURRENCY = 8
"""Parts (or ranges) in flight at once."""

_TRANSIENT_CODES = {
    "SlowDown",
    "Throttling",
    "ThrottlingException",
    "RequestTimeout",
    "RequestTimeTooSkewed",
    "InternalError",
    "ServiceUnavailable",
    "503",
    "500",
    "502",
    "504",
    "BadGateway",
    "GatewayTimeout",
}
_MISSING_BUCKET = {"NoSuchBucket"}
_DENIED = {"AccessDenied", "AllAccessDisabled", "AccountProblem", "403", "Forbidden"}
_CREDENTIALS = {
    "InvalidAccessKeyId",
    "SignatureDoesNotMatch",
    "ExpiredToken",
    "ExpiredTokenException",
    "TokenRefreshRequired",
    "InvalidToken",
    "InvalidClientTokenId",
    "AuthFailure",
}


class RemoteError(StoreError, OSError):
    """An object-store operation failed for good; the message says what to do.

    ``kind`` is one of ``missing-bucket``, ``denied``, ``credentials``, ``unreachable``,
    ``server``, ``other``.
    """

    def __init__(self, message: str, *, kind: str = "other", path: str | None = None) -> None:
        StoreError.__init__(self, _scrub(message), path=path)
        self.kind = kind

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


def _secrets() -> list[str]:
    names = (
        "AWS_SECRET_ACCESS_KEY",
        "AWS_SESSION_TOKEN",
        "AWS_ACCESS_KEY_ID",
        "AWS_SECURITY_TOKEN",
    )
    return [v for n in names if len(v := os.environ.get(n, "")) >= 4]


def _scrub(text: str) -> str:
    """*text* with every credential of the environment replaced by ``***``.

    >>> os.environ["AWS_SECRET_ACCESS_KEY"] = "hunter22"; _scrub("key hunter22 leaked")
    'key *** leaked'
    >>> del os.environ["AWS_SECRET_ACCESS_KEY"]
    """
    for secret in _secrets():
        text = text.replace(secret, "***")
    return text


def _chain(exc: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    todo: list[BaseException | None] = [exc]
    while todo:
        e = todo.pop(0)
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        yield e
        todo.extend([e.__cause__, e.__context__])


def _code(exc: BaseException) -> tuple[str | None, int | None]:
    """The S3 error code and HTTP status found in *exc* or its causes."""
    for e in _chain(exc):
        response = getattr(e, "response", None)
        if isinstance(response, dict):
            error = response.get("Error") or {}
            meta = response.get("ResponseMetadata") or {}
            code = error.get("Code")
            status = meta.get("HTTPStatusCode")
            return (str(code) if code else None), (int(status) if status else None)
    return None, None


def _names(exc: BaseException) -> set[str]:
    return {type(e).__name__ for e in _chain(exc)}


_NETWORK = {
    "EndpointConnectionError",
    "ConnectionClosedError",
    "ConnectTimeoutError",
    "ReadTimeoutError",
    "ConnectionError",
    "ConnectionResetError",
    "ConnectionRefusedError",
    "BrokenPipeError",
    "ClientConnectorError",
    "ClientConnectionError",
    "ClientOSError",
    "ServerDisconnectedError",
    "ClientPayloadError",
    "ServerTimeoutError",
    "TimeoutError",
    "FSTimeoutError",
    "IncompleteRead",
    "HTTPClientError",
    "ResponseParserError",
    "IncompleteReadError",
}


def transient(exc: BaseException) -> bool:
    """True for a failure that may pass: network trouble, 5xx, throttling."""
    code, status = _code(exc)
    if code in _TRANSIENT_CODES or (status is not None and status >= 500):
        return True
    if code is not None:
        return False
    return bool(_names(exc) & _NETWORK)


_LISTED_MAX = 50_000  # keys remembered as listed (a bound on memory, not on correctness)


class FsspecBackend(Backend):
    """An object store reached through fsspec (``s3fs`` for ``s3://``).

    >>> backend = FsspecBackend("s3://bucket/team")  # doctest: +SKIP
    >>> backend.put_if_absent("manifests/a.json", b"{}")  # doctest: +SKIP
    True
    """

    def __init__(self, url: str, *, retry_seconds: float | None = None, **options: Any) -> None:
        import fsspec

        protocol, rest = split_url(url)
        self.protocol = protocol
        self.url = f"{protocol}://{rest}"
        self.bucket = rest.split("/")[0]
        self.prefix = rest
        if protocol in ("s3", "s3a"):
            options.setdefault("use_listings_cache", False)
            # One attempt per call: the retry loop here owns the backoff and the
            # deadline, so a stopped server is waited for as long as RETRY_SECONDS says.
            # botocore's ``max_attempts`` counts retries (1 would mean two attempts, hiding
            # every lone 500 and 503 from the loop); ``total_max_attempts`` counts attempts.
            options.setdefault(
                "config_kwargs",
                {"retries": {"total_max_attempts": 1, "mode": "standard"}, "connect_timeout": 5},
            )
            options.setdefault("skip_instance_cache", True)
        self.fs = fsspec.filesystem(protocol, **options)
        if hasattr(self.fs, "retries"):
            self.fs.retries = 1  # one attempt per call: the backoff and its count are ours
        self.retry_seconds = RETRY_SECONDS if retry_seconds is None else retry_seconds
        self.multipart = hasattr(self.fs, "call_s3")
        self.retries = 0  # transient failures retried (reliability figures)
        self.requests = 0  # calls made to the server (costs; parts and ranges count one each)
        self._listed: dict[str, ObjectInfo] = {}  # key -> as keys() last listed it
        self._count = threading.Lock()

    # -- naming and errors ---------------------------------------------------------------

    def _path(self, key: str) -> str:
        if not key or key.startswith("/") or ".." in key.split("/"):
            raise ValueError(f"bad key {key!r}")
        return f"{self.prefix}/{key}"

    def endpoint(self) -> str:
        """The server's scheme://host:port (never credentials), for messages."""
        raw = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
        kwargs = getattr(self.fs, "client_kwargs", None) or {}
        raw = kwargs.get("endpoint_url") or raw
        if not raw:
            return "AWS S3" if self.multipart else self.protocol
        parts = urlsplit(raw)
        return f"{parts.scheme}://{parts.hostname}" + (f":{parts.port}" if parts.port else "")

    def translate(self, exc: BaseException, what: str, waited: float = 0.0) -> RemoteError:
        """The one-line :class:`RemoteError` for a failure of *what* (e.g. ``"writing x"``)."""
        code, status = _code(exc)
        where = self.url
        if code in _MISSING_BUCKET:
            return RemoteError(
                f"the bucket '{self.bucket}' does not exist at {self.endpoint()}: create it, "
                f"or fix the store URL {where}",
                kind="missing-bucket",
            )
        if code in _CREDENTIALS or _names(exc) & {"NoCredentialsError", "PartialCredentialsError"}:
            return RemoteError(
                f"the credentials for {where} were refused ({code or 'none found'}: expired, "
                "wrong or missing): refresh them (e.g. 'aws sso login', or set "
                "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY) and run again",
                kind="credentials",
            )
        if code in _DENIED or status == 403 or isinstance(exc, PermissionError):
            return RemoteError(
                f"access to {where} was denied while {what}: grant these credentials "
                "s3:GetObject, s3:PutObject, s3:ListBucket and s3:DeleteObject on it, or "
                "use another store",
                kind="denied",
            )
        if transient(exc):
            if code is not None or status is not None:
                return RemoteError(
                    f"{self.endpoint()} kept failing ({code or status}) while {what} in "
                    f"{where}, retried for {waited:.0f} s: try again later",
                    kind="server",
                )
            return RemoteError(
                f"cannot reach {self.endpoint()} for {where} (network error while {what}, "
                f"retried for {waited:.0f} s): check AWS_ENDPOINT_URL and the network, "
                "then run again",
                kind="unreachable",
            )
        reason = code or type(exc).__name__
        return RemoteError(
            f"{self.endpoint()} refused {what} in {where} ({reason}); check the store URL",
            kind="other",
        )

    def _call(self, what: str, fn: Callable[[], T]) -> T:
        """*fn*, retried with exponential backoff (and jitter) while its failure is transient."""
        started = time.monotonic()
        attempt = 0
        while True:
            with self._count:
                self.requests += 1
            try:
                return fn()
            except (FileNotFoundError, FileExistsError):
                raise  # answers, not failures (a missing bucket is told apart below)
            except Exception as exc:
                waited = time.monotonic() - started
                if not transient(exc) or waited >= self.retry_seconds:
                    raise self.translate(exc, what, waited) from None
                with self._count:
                    self.retries += 1
                delay = min(5.0, 0.1 * 2**attempt) * (0.5 + random.random())
                time.sleep(min(delay, max(0.0, self.retry_seconds - waited)))
                attempt += 1

    def _missing(self, exc: FileNotFoundError, what: str) -> BaseException:
        """A missing key stays FileNotFoundError; a missing bucket becomes a RemoteError."""
        code, _status = _code(exc)
        if code in _MISSING_BUCKET:
            return self.translate(exc, what)
        return exc

    # -- primitives ------------------------------------------------------------------------

    def get(self, key: str, start: int | None = None, end: int | None = None) -> bytes:
        path = self._path(key)
        try:
            data = self._call(
                f"reading {key}", lambda: self.fs.cat_file(path, start=start, end=end)
            )
        except FileNotFoundError as exc:
            raise self._missing(exc, f"reading {key}") from None
        return bytes(data)

    def read_into(self, key: str, out: memoryview, sink: Sink | None = None) -> int:
        size = len(out)
        if size < MULTIPART_MIN:
            data = self.get(key, 0, size) if size else b""
            out[: len(data)] = data
            if sink is not None:
                sink(0, out[: len(data)])
            return len(data)
        path = self._path(key)
        ranges = [(a, min(size, a + PART_SIZE)) for a in range(0, size, PART_SIZE)]

        def fetch(a: int, b: int) -> int:
            try:
                piece = self._call(f"reading {key}", lambda: self.fs.cat_file(path, start=a, end=b))
            except FileNotFoundError as exc:
                raise self._missing(exc, f"reading {key}") from None
            out[a : a + len(piece)] = piece
            if sink is not None:
                sink(a, out[a : a + len(piece)])
            return len(piece)

        with ThreadPoolExecutor(CONCURRENCY, thread_name_prefix="ipy_resume-get") as pool:
            jobs = [pool.submit(fetch, a, b) for a, b in ranges]
            try:
                got = [job.result() for job in jobs]
            except BaseException:
                for job in jobs:
                    job.cancel()
                raise
        total = 0
        for (a, b), n in zip(ranges, got, strict=True):
            total += n
            if n < b - a:  # the object ended early
                return a + n
        return total

    def put(self, key: str, chunks: Iterable[Any], size: int | None = None) -> None:
        path = self._path(key)
        if self.multipart and size is not None and size >= MULTIPART_MIN:
            self._put_parts(path, key, chunks)
            return
        data = b"".join(
            c if isinstance(c, bytes) else bytes(memoryview(c).cast("B")) for c in chunks
        )
        try:
            self._call(f"writing {key}", lambda: self.fs.pipe_file(path, data))
        except FileNotFoundError as exc:  # a write finds no key missing: the bucket is
            raise self._no_bucket() from exc

    def put_if_absent(self, key: str, data: bytes, *, deferred: set[str] | None = None) -> bool:
        # a created object is durable at once: nothing is left for *deferred* and sync()
        path = self._path(key)
        tried = False

        def attempt() -> None:
            nonlocal tried
            if tried and self._holds(path, data):
                return  # an earlier attempt landed but its answer was lost
            tried = True
            self.fs.pipe_file(path, data, mode="create")

        try:
            self._call(f"writing {key}", attempt)
        except FileExistsError:
            return False  # another writer's object (ours would have been found above)
        except FileNotFoundError as exc:
            raise self._no_bucket() from exc
        return True

    def _holds(self, path: str, data: bytes) -> bool:
        try:
            return bytes(self.fs.cat_file(path)) == data
        except FileNotFoundError:
            return False

    def keys(self, prefix: str, depth: int) -> builtins.list[str]:
        level = prefix.count("/") + depth
        found = [o for o in self.list(prefix) if o.key.count("/") == level]
        if len(self._listed) >= _LISTED_MAX:
            self._listed.clear()
        for obj in found:
            self._listed[obj.key] = obj
        return [o.key for o in found]

    def listed(self, key: str) -> ObjectInfo | None:
        return self._listed.get(key)

    def identity(self, key: str) -> Identity | None:
        # The entity tag of the last listing: an object's bytes, as the server says (trust's
        # rewrite of a manifest is a new object, with a new tag).  A listing without tags gives no identity: read every time.
        found = self._listed.get(key)
        if found is None or not found.etag:
            return None
        return (found.etag, found.size, found.modified), True

    def read_identified(self, key: str) -> tuple[bytes, Identity | None]:
        # the identity as listed before the read: a newer object read meanwhile is only
        # read again next time, never taken for the listed one
        seen = self.identity(key)
        return self.get(key), seen

    def lock(
        self, *, exclusive: bool, timeout: float, purpose: str
    ) -> contextlib.AbstractContextManager[bool]:
        if exclusive:
            return contextlib.nullcontext(False)  # gc's side: its marker (remote_maintenance)
        return leases.hold(self, timeout=timeout, purpose=purpose)

    def list(self, prefix: str) -> Iterator[ObjectInfo]:
        top = self.prefix + ("/" + prefix.strip("/") if prefix else "")
        with contextlib.suppress(AttributeError):
            self.fs.invalidate_cache(top)
        try:
            found = self._call(f"listing {prefix or '/'}", lambda: self.fs.find(top, detail=True))
        except FileNotFoundError as exc:
            raise self._missing(exc, f"listing {prefix or '/'}") from None
        base = len(self.prefix) + 1
        for path, detail in sorted(found.items()):
            if detail.get("type") == "directory":
                continue
            yield ObjectInfo(
                path[base:], int(detail.get("size") or 0), _modified(detail), _etag(detail)
            )

    def delete(self, key: str) -> None:
        path = self._path(key)
        with contextlib.suppress(FileNotFoundError):
            self._call(f"deleting {key}", lambda: self.fs.rm_file(path))

    def stat(self, key: str) -> ObjectInfo | None:
        path = self._path(key)
        with contextlib.suppress(AttributeError):
            self.fs.invalidate_cache(path)
        try:
            detail = self._call(f"reading {key}", lambda: self.fs.info(path))
        except FileNotFoundError as exc:
            missing = self._missing(exc, f"reading {key}")
            if isinstance(missing, RemoteError):
                raise missing from None
            return None
        if detail.get("type") == "directory":
            return None
        return ObjectInfo(key, int(detail.get("size") or 0), _modified(detail), _etag(detail))

    def copy(self, src: str, dst: str) -> None:
        a, b = self._path(src), self._path(dst)
        self._call(f"copying {src}", lambda: self.fs.copy(a, b))

    def _no_bucket(self) -> RemoteError:
        return RemoteError(
            f"the bucket '{self.bucket}' does not exist at {self.endpoint()}: create it, "
            f"or fix the store URL {self.url}",
            kind="missing-bucket",
        )

    def prepare(self) -> None:
        self.check_bucket()

    def check_bucket(self) -> None:
        """Raise the one-line :class:`RemoteError` when the bucket cannot be used."""
        missing = self._no_bucket()
        try:
            if self.multipart:
                self._call(
                    "opening the store", lambda: self.fs.call_s3("head_bucket", Bucket=self.bucket)
                )
            else:
                self._call("opening the store", lambda: self.fs.ls(self.bucket, detail=False))
        except FileNotFoundError:
            raise missing from None
        except RemoteError as exc:
            if exc.kind == "other" and ("404" in str(exc) or "NoSuchBucket" in str(exc)):
                raise missing from None
            raise

    # -- multipart uploads ----------------------------------------------------------------

    def _put_parts(self, path: str, key: str, chunks: Iterable[Any]) -> None:
        """A multipart upload, :data:`CONCURRENCY` parts in flight; aborted on any failure."""
        bucket, name, _ = self.fs.split_path(path)
        what = f"writing {key}"
        try:
            upload = self._call(
                what, lambda: self.fs.call_s3("create_multipart_upload", Bucket=bucket, Key=name)
            )
        except FileNotFoundError as exc:
            raise self._no_bucket() from exc
        upload_id = upload["UploadId"]
        try:
            self._send_parts(bucket, name, upload_id, chunks, what)
        except BaseException:
            with contextlib.suppress(Exception):
                self.fs.call_s3(
                    "abort_multipart_upload", Bucket=bucket, Key=name, UploadId=upload_id
                )
            raise
        with contextlib.suppress(AttributeError):
            self.fs.invalidate_cache(path)

    def _send_parts(
        self, bucket: str, name: str, upload_id: str, chunks: Iterable[Any], what: str
    ) -> None:
        parts: dict[int, str] = {}

        def send(number: int, body: bytes) -> None:
            answer = self._call(
                what,
                lambda: self.fs.call_s3(
                    "upload_part",
                    Bucket=bucket,
                    Key=name,
                    PartNumber=number,
                    UploadId=upload_id,
                    Body=body,
                ),
            )
            parts[number] = answer["ETag"]

        with ThreadPoolExecutor(CONCURRENCY, thread_name_prefix="ipy_resume-put") as pool:
            pending: list[Future[None]] = []
            for number, body in enumerate(_parts(chunks, PART_SIZE), start=1):
                # bounded memory: at most CONCURRENCY parts held at once
                while len(pending) >= CONCURRENCY:
                    done, _ = wait(pending, return_when=FIRST_EXCEPTION)
                    for job in done:
                        job.result()
                    pending = [j for j in pending if not j.done()]
                pending.append(pool.submit(send, number, body))
            for job in pending:
                job.result()
        listing = [{"PartNumber": n, "ETag": parts[n]} for n in sorted(parts)]
        self._call(
            what,
            lambda: self.fs.call_s3(
                "complete_multipart_upload",
                Bucket=bucket,
                Key=name,
                UploadId=upload_id,
                MultipartUpload={"Parts": listing},
            ),
        )

    def abort_stale_uploads(self, older_than: float) -> int:
        """Abort multipart uploads under the store begun more than *older_than* seconds ago.

        A save killed mid-upload leaves parts that are invisible but billed; ``gc`` ends them.
        """
        if not self.multipart:
            return 0
        bucket, prefix, _ = self.fs.split_path(self.prefix + "/")
        answer = self._call(
            "listing uploads",
            lambda: self.fs.call_s3("list_multipart_uploads", Bucket=bucket, Prefix=prefix),
        )
        count = 0
        now = time.time()
        for upload in answer.get("Uploads", []):
            started = upload.get("Initiated")
            age = now - started.timestamp() if isinstance(started, datetime) else older_than
            if age < older_than:
                continue
            key, upload_id = upload["Key"], upload["UploadId"]

            def abort(key: str = key, upload_id: str = upload_id) -> Any:
                return self.fs.call_s3(
                    "abort_multipart_upload", Bucket=bucket, Key=key, UploadId=upload_id
                )

            with contextlib.suppress(RemoteError):
                self._call("aborting an upload", abort)
                count += 1
        return count


def _etag(detail: dict[str, Any]) -> str:
    value = detail.get("ETag", detail.get("etag"))
    return value.strip('"') if isinstance(value, str) else ""


def _modified(detail: dict[str, Any]) -> float:
    for name in ("LastModified", "mtime", "updated", "last_modified", "created"):
        value = detail.get(name)
        if isinstance(value, datetime):
            return value.timestamp()
        if isinstance(value, (int, float)):
            return float(value)
        if isinstance(value, str):
            with contextlib.suppress(ValueError):
                return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    return time.time()


def _parts(chunks: Iterable[Any], size: int) -> Iterator[bytes]:
    """The concatenation of *chunks* cut into pieces of *size* bytes (the last shorter)."""
    held: list[bytes] = []
    have = 0
    for chunk in chunks:
        view = memoryview(chunk).cast("B") if not isinstance(chunk, bytes) else memoryview(chunk)
        while len(view):
            take = min(size - have, len(view))
            held.append(bytes(view[:take]))
            have += take
            view = view[take:]
            if have == size:
                yield b"".join(held) if len(held) > 1 else held[0]
                held, have = [], 0
    if held:
        yield b"".join(held)


def os_error(message: str) -> OSError:
    """An OSError carrying *message* (for callers that expect one)."""
    return OSError(errno.EIO, message)
