"""A real S3-compatible server (moto) on 127.0.0.1, and a fault-injecting proxy before it.

Only loopback addresses are ever used.  The server runs as its own process
(moto's server through ``moto_atomic.py``, whose conditional create is atomic as S3's
is) so a test can stop and restart it.
"""

from __future__ import annotations

import contextlib
import os
import socket
import struct
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

HOST = "127.0.0.1"
LAUNCHER = Path(__file__).with_name("moto_atomic.py")
CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "testing-key-id",
    "AWS_SECRET_ACCESS_KEY": "testing-secret-do-not-log",
    "AWS_DEFAULT_REGION": "us-east-1",
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


@dataclass
class MotoServer:
    """``moto_server`` on 127.0.0.1:*port*; :meth:`stop` / :meth:`start` restart it."""

    port: int = field(default_factory=free_port)
    process: subprocess.Popen[bytes] | None = None
    log: Path | None = None
    extra_env: dict[str, str] = field(default_factory=dict)
    """Settings for the server process, e.g. ``INITIAL_NO_AUTH_ACTION_COUNT``."""

    @property
    def endpoint(self) -> str:
        return f"http://{HOST}:{self.port}"

    def env(self, endpoint: str | None = None) -> dict[str, str]:
        return {**CREDENTIALS, "AWS_ENDPOINT_URL": endpoint or self.endpoint}

    def start(self) -> None:
        out = open(self.log, "ab") if self.log else subprocess.DEVNULL  # noqa: SIM115
        self.process = subprocess.Popen(
            [sys.executable, str(LAUNCHER), "-H", HOST, "-p", str(self.port)],
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, **self.extra_env} if self.extra_env else None,
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                urllib.request.urlopen(f"{self.endpoint}/moto-api/", timeout=1).close()
                return
            except OSError:
                if self.process.poll() is not None:
                    raise RuntimeError("moto_server exited at start") from None
                time.sleep(0.1)
        raise RuntimeError("moto_server did not start in 60 s")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
        self.process = None

    def client(self, endpoint: str | None = None):  # type: ignore[no-untyped-def]
        import boto3

        return boto3.client(
            "s3",
            endpoint_url=endpoint or self.endpoint,
            aws_access_key_id=CREDENTIALS["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
            region_name=CREDENTIALS["AWS_DEFAULT_REGION"],
        )

    def bucket(self) -> str:
        """A new, empty bucket with a valid name."""
        name = f"b-{uuid.uuid4().hex[:20]}"
        self.client().create_bucket(Bucket=name)
        return name


@contextlib.contextmanager
def moto_server(log: Path | None = None, **extra_env: str) -> Iterator[MotoServer]:
    server = MotoServer(log=log, extra_env=extra_env)
    server.start()
    try:
        yield server
    finally:
        server.stop()


# ---- faults -----------------------------------------------------------------------------------


class FaultProxy:
    """A TCP proxy on 127.0.0.1 that understands just enough HTTP/1.1 to fail requests.

    Requests are read one at a time (headers, then a Content-Length or chunked body) and
    forwarded; responses are piped back as they come.  ``plan`` is a list of faults
    consumed one per request that is to fail, each with ``every`` requests between them:

    * ``"reset"``: the client connection is reset (RST) mid-request;
    * ``"500"``: ``HTTP 500 InternalError`` is answered without reaching the server;
    * ``"503"``: ``HTTP 503 SlowDown`` likewise.

    :meth:`pause` closes the listener and every connection (a server gone) until
    :meth:`resume`, on the same port.
    """

    def __init__(self, upstream_port: int) -> None:
        self.upstream = (HOST, upstream_port)
        self.port = free_port()
        self.plan: list[str] = []
        self.every = 3
        self.injected: dict[str, int] = {"reset": 0, "500": 0, "503": 0}
        self.requests = 0
        self._lock = threading.Lock()
        self._conns: list[socket.socket] = []
        self._listener: socket.socket | None = None
        self._closed = False
        self.resume()

    @property
    def endpoint(self) -> str:
        return f"http://{HOST}:{self.port}"

    def resume(self) -> None:
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((HOST, self.port))
        listener.listen(64)
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def pause(self) -> None:
        listener, self._listener = self._listener, None
        if listener is not None:
            with contextlib.suppress(OSError):
                listener.shutdown(socket.SHUT_RDWR)
            listener.close()
        with self._lock:
            conns, self._conns = self._conns, []
        for c in conns:
            _reset(c)

    def close(self) -> None:
        self._closed = True
        self.pause()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _next_fault(self) -> str | None:
        with self._lock:
            self.requests += 1
            if self.plan and self.requests % self.every == 0:
                fault = self.plan.pop(0)
                self.injected[fault] += 1
                return fault
            return None

    def _serve(self, client: socket.socket) -> None:
        try:
            upstream = socket.create_connection(self.upstream, timeout=30)
        except OSError:
            _reset(client)
            return
        with self._lock:
            self._conns.extend([client, upstream])
        threading.Thread(target=_pipe, args=(upstream, client), daemon=True).start()
        reader = client.makefile("rb")
        try:
            while True:
                head = _read_head(reader)
                if head is None:
                    break
                fault = self._next_fault()
                if fault == "reset":
                    _reset(client)
                    break
                expect = (_header(head, "expect") or "").lower() == "100-continue"
                if fault in ("500", "503"):
                    if not expect:  # the client sends its body before reading an answer
                        _read_body(reader, head)
                    code, reason, s3code = (
                        ("500", "Internal Server Error", "InternalError")
                        if fault == "500"
                        else ("503", "Slow Down", "SlowDown")
                    )
                    xml = (
                        f'<?xml version="1.0" encoding="UTF-8"?><Error><Code>{s3code}</Code>'
                        f"<Message>{reason}</Message><RequestId>fault</RequestId></Error>"
                    ).encode()
                    client.sendall(
                        f"HTTP/1.1 {code} {reason}\r\nContent-Type: application/xml\r\n"
                        f"Content-Length: {len(xml)}\r\nConnection: close\r\n\r\n".encode()
                        + xml
                    )
                    client.close()
                    break
                # the head first: with "Expect: 100-continue" the body follows the server's 100
                upstream.sendall(head)
                upstream.sendall(_read_body(reader, head))
        except OSError:
            pass
        finally:
            with contextlib.suppress(OSError):
                upstream.shutdown(socket.SHUT_WR)


def _reset(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    with contextlib.suppress(OSError):
        sock.close()


def _pipe(src: socket.socket, dst: socket.socket) -> None:
    try:
        while data := src.recv(1 << 20):
            dst.sendall(data)
    except OSError:
        pass
    finally:
        with contextlib.suppress(OSError):
            dst.shutdown(socket.SHUT_WR)


def _read_head(reader) -> bytes | None:  # type: ignore[no-untyped-def]
    lines = []
    while True:
        line = reader.readline(65536)
        if not line:
            return None
        lines.append(line)
        if line in (b"\r\n", b"\n"):
            return b"".join(lines)


def _header(head: bytes, name: str) -> str | None:
    for line in head.split(b"\r\n")[1:]:
        key, _, value = line.partition(b":")
        if key.strip().lower() == name.encode():
            return value.strip().decode("latin-1")
    return None


def _read_body(reader, head: bytes) -> bytes:  # type: ignore[no-untyped-def]
    length = _header(head, "content-length")
    if length is not None:
        return bytes(reader.read(int(length)))
    if (_header(head, "transfer-encoding") or "").lower() == "chunked":
        out = []
        while True:
            size_line = reader.readline()
            out.append(size_line)
            size = int(size_line.split(b";")[0].strip() or b"0", 16)
            if size == 0:
                while True:  # trailers, then the blank line
                    trailer = reader.readline()
                    out.append(trailer)
                    if trailer in (b"\r\n", b"\n", b""):
                        break
                return b"".join(out)
            out.append(reader.read(size + 2))
    return b""


def s3_env(server: MotoServer, tmp_path: Path, endpoint: str | None = None) -> dict[str, str]:
    """Credentials, endpoint and a private blob cache for a process using the server."""
    return {**server.env(endpoint), "IPY_RESUME_CACHE_DIR": str(tmp_path / "cache")}


def apply_env(monkeypatch, values: dict[str, str]) -> None:  # type: ignore[no-untyped-def]
    for name, value in values.items():
        monkeypatch.setenv(name, value)
    for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL_S3"):
        monkeypatch.delenv(name, raising=False)
