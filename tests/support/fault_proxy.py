"""A fault-injecting HTTP proxy on 127.0.0.1 for the S3 fault tests.

It sits between boto3 and the real S3 server (SeaweedFS) and, for a seeded random share of the requests,
instead of forwarding:
  - `slowdown`: answers `503 SlowDown` with S3's XML error body (throttling, what AWS sends under load);
  - `reset`:    drops the connection with a TCP RST and no answer (a cut cable / a crashed front end);
  - `delay`:    waits 50-400 ms, then forwards (a slow or congested link).
Requests are forwarded byte for byte (headers unchanged, so SigV4 signatures stay valid: the client signs
the proxy's Host, which the server sees too). `down = True` makes it refuse every request (store down for
good): each one is answered by a reset. `counts` says what happened to how many requests.
"""

from __future__ import annotations

import http.client
import random
import socket
import struct
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

FAULTS = ("slowdown", "reset", "delay")
SLOWDOWN_BODY = (
    b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>SlowDown</Code>'
    b"<Message>Please reduce your request rate.</Message><RequestId>fault-proxy</RequestId></Error>"
)
HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "proxy-connection", "te", "trailer", "upgrade"}


class FaultProxy:
    def __init__(self, upstream: str, fault_rate: float = 0.10, seed: int = 0, faults: tuple[str, ...] = FAULTS) -> None:
        parts = urlsplit(upstream)
        self.upstream_host = parts.hostname or "127.0.0.1"
        self.upstream_port = parts.port or 80
        self.fault_rate = fault_rate
        self.faults = faults
        self.random = random.Random(seed)
        self.lock = threading.Lock()
        self.counts: Counter[str] = Counter()
        self.down = False
        self.down_after: int | None = None  # go down for good once this many requests were seen
        self.server: ThreadingHTTPServer | None = None
        self.thread: threading.Thread | None = None

    @property
    def endpoint_url(self) -> str:
        assert self.server is not None
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def decide(self) -> str:
        with self.lock:
            self.counts["requests"] += 1
            if self.down_after is not None and self.counts["requests"] > self.down_after:
                self.down = True
            if self.down:
                self.counts["refused"] += 1
                return "down"
            if self.random.random() < self.fault_rate:
                fault = self.random.choice(self.faults)
                self.counts[fault] += 1
                return fault
            return "forward"

    def start(self) -> FaultProxy:
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:  # quiet
                pass

            def _read_body(self) -> bytes:
                if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                    raw = bytearray()
                    while True:
                        line = self.rfile.readline()
                        raw += line
                        size = int(line.split(b";")[0].strip() or b"0", 16)
                        if size == 0:
                            while True:  # trailers up to the empty line
                                trailer = self.rfile.readline()
                                raw += trailer
                                if trailer in (b"\r\n", b"\n", b""):
                                    return bytes(raw)
                        raw += self.rfile.read(size + 2)
                length = int(self.headers.get("Content-Length") or 0)
                return self.rfile.read(length) if length else b""

            def _reset(self) -> None:
                # SO_LINGER with a zero timeout: close() sends RST instead of FIN.
                self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                self.close_connection = True
                self.connection.close()

            def _handle(self) -> None:
                body = self._read_body()
                action = proxy.decide()
                if action in ("reset", "down"):
                    self._reset()
                    return
                if action == "slowdown":
                    self.send_response(503, "Slow Down")
                    self.send_header("Content-Type", "application/xml")
                    self.send_header("Content-Length", str(len(SLOWDOWN_BODY)))
                    self.end_headers()
                    if self.command != "HEAD":
                        self.wfile.write(SLOWDOWN_BODY)
                    return
                if action == "delay":
                    time.sleep(proxy.random.uniform(0.05, 0.4))
                self._forward(body)

            def _forward(self, body: bytes) -> None:
                upstream = http.client.HTTPConnection(proxy.upstream_host, proxy.upstream_port, timeout=120)
                try:
                    upstream.putrequest(self.command, self.path, skip_host=True, skip_accept_encoding=True)
                    for name, value in self.headers.items():
                        if name.lower() not in ("expect", "connection"):
                            upstream.putheader(name, value)
                    upstream.endheaders(body if body else None)
                    response = upstream.getresponse()
                    data = response.read()
                    self.send_response(response.status, response.reason)
                    for name, value in response.getheaders():
                        if name.lower() not in HOP_BY_HOP and name.lower() != "content-length":
                            self.send_header(name, value)
                    if self.command == "HEAD":
                        self.send_header("Content-Length", response.getheader("Content-Length", "0"))
                    else:
                        self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    if self.command != "HEAD":
                        self.wfile.write(data)
                finally:
                    upstream.close()

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _handle

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, name="fault-proxy", daemon=True)
        self.thread.start()
        return self

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
            self.server = None

    def __enter__(self) -> FaultProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
