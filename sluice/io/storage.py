"""Object storage for sources and outputs: a local folder or any S3-compatible store (through boto3).

A `Store` is rooted at a URL (`/data/crawl`, `s3://bucket/prefix`) and addressed with `/`-separated
relative keys. Writes are atomic for readers: local files go to a temporary name in the same folder
and are renamed into place; S3 objects are a single PUT or a completed multipart upload, which S3
makes visible all at once. Stores are picklable (`StoreSpec`) so worker processes and Ray tasks can
reopen them.
"""

from __future__ import annotations

import hashlib
import io
import os
import re
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from sluice.config import S3Settings

TMP_PREFIX = ".tmp-"  # temporary files carry this prefix; readers and listings skip them
SCRATCH_PREFIX = "sluice-"
STALE_TEMP_AGE_S = 24 * 3600  # temp files of live processes are left alone unless older than this


def _host_tag() -> str:
    # Temp names carry host and pid so a sweep only removes files of processes known to be dead.
    return hashlib.sha1(os.uname().nodename.encode()).hexdigest()[:8]


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie (killed, not yet reaped) writes nothing more
        with open(f"/proc/{pid}/stat", "rb") as stream:
            return stream.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except (OSError, IndexError):
        return True


def _is_stale(host: str, pid: str, mtime: float) -> bool:
    """A temp file/folder left by a process that died (same host, pid gone), or one older than a day."""
    import time

    if time.time() - mtime > STALE_TEMP_AGE_S:
        return True
    return host == _host_tag() and pid.isdigit() and not _pid_alive(int(pid))


class StorageError(RuntimeError):
    """A store that cannot be read or written; the message names the URL and the cause."""


def is_s3(url: str) -> bool:
    return url.startswith("s3://")


_UNSAFE = re.compile(r"[\x00-\x1f\x7f\\]")  # a control character or a backslash


def check_key(key: str) -> str:
    """Refuse a relative key that could leave the store's root or break an S3 key: an absolute path, a
    `..` or `.` part, a backslash or a control character. The empty key is the root itself."""
    if not key:
        return key
    bad = (
        key.startswith("/")
        or _UNSAFE.search(key) is not None
        or any(part in (".", "..") for part in key.split("/"))
    )
    if bad:
        raise StorageError(f"refusing storage key {key!r}: keys are relative, without '.', '..', '\\' or control characters")
    return key


def join_key(*parts: str) -> str:
    return "/".join(p.strip("/") for p in parts if p and p.strip("/"))


@dataclass(frozen=True)
class StoreSpec:
    """Everything needed to reopen a store in another process (no credentials: those come from the env)."""

    url: str
    s3: S3Settings = S3Settings()

    def open(self) -> Store:
        return open_store(self.url, self.s3)


class Store:
    url: str
    spec: StoreSpec

    def child(self, key: str) -> Store:
        return open_store(self.url.rstrip("/") + "/" + key.strip("/"), self.spec.s3)

    def uri(self, key: str = "") -> str:
        return self.url.rstrip("/") + ("/" + key.strip("/") if key else "")

    # The methods below are implemented by both stores.
    def list_files(self, prefix: str = "") -> list[str]:
        """Relative keys of all files under `prefix`, recursively, sorted; temporary files excluded."""
        raise NotImplementedError

    def list_dirs(self, prefix: str = "") -> list[str]:
        """Names of the immediate sub-folders (sub-prefixes) of `prefix`, sorted."""
        raise NotImplementedError

    def exists(self, key: str) -> bool:
        raise NotImplementedError

    def size(self, key: str) -> int:
        raise NotImplementedError

    def identity(self, key: str) -> str:
        """A string that changes when the file's content may have (size and mtime, or ETag)."""
        raise NotImplementedError

    def open_read(self, key: str) -> BinaryIO:
        raise NotImplementedError

    def read_bytes(self, key: str) -> bytes:
        with self.open_read(key) as handle:
            return handle.read()

    def read_range(self, key: str, start: int, length: int) -> bytes:
        """`length` bytes of `key` from offset `start` (fewer where the file ends first): one ranged GET on S3."""
        raise NotImplementedError

    def write_bytes(self, key: str, data: bytes) -> None:
        raise NotImplementedError

    def put_file(self, local_path: str | os.PathLike[str], key: str) -> None:
        """Publish a finished local file at `key` atomically; the local file is consumed."""
        raise NotImplementedError

    def local_path(self, key: str) -> str | None:
        """A local filesystem path for `key` when the store is local (for mmap), else None."""
        return None

    def fetch(self, key: str, local_dir: str) -> str:
        """A local path holding `key`'s bytes: the file itself when local, else a download into local_dir."""
        raise NotImplementedError

    def delete(self, keys: list[str]) -> None:
        raise NotImplementedError

    def check_access(self) -> None:
        """Fail with a clear StorageError when the store cannot be reached or read."""
        raise NotImplementedError

    def remove_stale_temp(self, prefix: str = "") -> list[str]:
        """Delete temporary files under `prefix` left by crashed writers (see `_is_stale`); returns their
        keys. S3 has no temporary objects: an interrupted multipart upload stays invisible (see
        `abort_stale_uploads`)."""
        return []


class RangedFile(io.RawIOBase):
    """A read-only, seekable file over `store.read_range`: each read is one ranged GET on S3, so a reader that
    seeks (Parquet's footer, then the row groups it wants) fetches only what it reads. `size`: the object's
    bytes where known (else one HEAD)."""

    def __init__(self, store: Store, key: str, size: int | None = None) -> None:
        self.store, self.key = store, key
        self.length = store.size(key) if size is None else int(size)
        self.position = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.position

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self.position, io.SEEK_END: self.length}[whence]
        self.position = max(0, base + offset)
        return self.position

    def readinto(self, buffer) -> int:
        view = memoryview(buffer).cast("B")
        count = max(0, min(len(view), self.length - self.position))
        raw = self.store.read_range(self.key, self.position, count) if count else b""
        view[: len(raw)] = raw
        self.position += len(raw)
        return len(raw)


class LocalStore(Store):
    def __init__(self, url: str, spec: StoreSpec) -> None:
        self.url = url
        self.spec = spec
        self.root = Path(url)

    def _path(self, key: str) -> Path:
        return (self.root / check_key(key)) if key else self.root

    def list_files(self, prefix: str = "") -> list[str]:
        base = self._path(prefix)
        if not base.exists():
            return []
        if base.is_file():
            return [prefix]
        found = []
        for dirpath, dirnames, filenames in os.walk(base):
            dirnames[:] = [d for d in dirnames if not d.startswith(TMP_PREFIX)]
            for name in filenames:
                if name.startswith(TMP_PREFIX):
                    continue
                found.append(Path(dirpath, name).relative_to(self.root).as_posix())
        return sorted(found)

    def list_dirs(self, prefix: str = "") -> list[str]:
        base = self._path(prefix)
        if not base.is_dir():
            return []
        return sorted(p.name for p in base.iterdir() if p.is_dir() and not p.name.startswith(TMP_PREFIX))

    def exists(self, key: str) -> bool:
        return self._path(key).is_file()

    def size(self, key: str) -> int:
        try:
            return self._path(key).stat().st_size
        except OSError as error:
            raise StorageError(f"cannot read {self.uri(key)}: {error.strerror or error}") from error

    def identity(self, key: str) -> str:
        """Changes when the file's content may have: its size and modification time."""
        try:
            stat = self._path(key).stat()
        except OSError as error:
            raise StorageError(f"cannot read {self.uri(key)}: {error.strerror or error}") from error
        return f"{stat.st_size}:{stat.st_mtime_ns}"

    def open_read(self, key: str) -> BinaryIO:
        try:
            return open(self._path(key), "rb")
        except OSError as error:
            raise StorageError(f"cannot read {self.uri(key)}: {error.strerror or error}") from error

    def read_range(self, key: str, start: int, length: int) -> bytes:
        if start < 0 or length < 0:
            raise ValueError(f"bad range {start}+{length}")
        try:
            with open(self._path(key), "rb") as handle:
                handle.seek(start)
                return handle.read(length)
        except OSError as error:
            raise StorageError(f"cannot read {self.uri(key)}: {error.strerror or error}") from error

    def _temp_path(self, final: Path) -> Path:
        return final.parent / f"{TMP_PREFIX}{final.name}.{_host_tag()}.{os.getpid()}.{uuid.uuid4().hex[:8]}"

    def remove_stale_temp(self, prefix: str = "") -> list[str]:
        base = self._path(prefix)
        removed = []
        for dirpath, _, filenames in os.walk(base):
            for name in filenames:
                if not name.startswith(TMP_PREFIX):
                    continue
                parts = name.rsplit(".", 3)  # .tmp-<final name>.<host>.<pid>.<random>
                path = Path(dirpath, name)
                try:
                    mtime = path.stat().st_mtime
                except OSError:
                    continue
                if len(parts) == 4 and _is_stale(parts[1], parts[2], mtime):
                    path.unlink(missing_ok=True)
                    removed.append(path.relative_to(self.root).as_posix())
        return sorted(removed)

    def write_bytes(self, key: str, data: bytes) -> None:
        final = self._path(key)
        final.parent.mkdir(parents=True, exist_ok=True)
        temp = self._temp_path(final)
        try:
            with open(temp, "wb") as handle:
                handle.write(data)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(temp, final)
        finally:
            temp.unlink(missing_ok=True)

    def put_file(self, local_path: str | os.PathLike[str], key: str) -> None:
        final = self._path(key)
        final.parent.mkdir(parents=True, exist_ok=True)
        temp = self._temp_path(final)
        try:
            shutil.move(os.fspath(local_path), temp)  # a rename when on the same filesystem
            with open(temp, "rb") as handle:
                os.fsync(handle.fileno())
            os.replace(temp, final)
        finally:
            temp.unlink(missing_ok=True)

    def local_path(self, key: str) -> str | None:
        return str(self._path(key))

    def fetch(self, key: str, local_dir: str) -> str:
        path = self._path(key)
        if not path.is_file():
            raise StorageError(f"cannot read {self.uri(key)}: no such file")
        return str(path)

    def delete(self, keys: list[str]) -> None:
        for key in keys:
            self._path(key).unlink(missing_ok=True)

    def check_access(self) -> None:
        if not self.root.exists():
            raise StorageError(f"{self.url} does not exist")
        if not os.access(self.root, os.R_OK | os.X_OK):
            raise StorageError(f"{self.url} is not readable")


_CLIENTS: dict[S3Settings, object] = {}
_CLIENTS_PID = [os.getpid()]  # the process the cached clients and pools belong to


def s3_client(settings: S3Settings):  # -> botocore client
    """One boto3 client per settings and process. Faults are handled by botocore alone: its retry mode
    (standard: throttling such as 503 SlowDown, 5xx, connection resets and timeouts, with exponential
    backoff and jitter) and attempt count come from the config's `s3` section; sluice has no retry loop.
    A forked process (a DataLoader worker) makes its own: pooled connections are not shared across a fork."""
    if _CLIENTS_PID[0] != os.getpid():
        _CLIENTS.clear()
        _RANGES.clear()
        _CLIENTS_PID[0] = os.getpid()
    key = settings
    client = _CLIENTS.get(key)
    if client is None:
        import boto3
        from botocore.config import Config

        client = boto3.session.Session().client(
            "s3",
            endpoint_url=settings.endpoint_url,
            region_name=settings.region,
            config=Config(
                retries={"max_attempts": settings.max_attempts, "mode": settings.retry_mode},
                s3={"addressing_style": settings.addressing_style},
                connect_timeout=settings.connect_timeout_s,
                read_timeout=settings.read_timeout_s,
            ),
        )
        _CLIENTS[key] = client
    return client


URL_LIFETIME_S = 900  # presigned URLs of the ranged reads are valid this long ...
URL_RENEW_S = 300  # ... and renewed after this (rotating temporary credentials, a skewed clock)
POOL_CONNECTIONS = 64  # per host: the loader's span and index threads together
URL_CACHE = 4096  # presigned URLs kept per process (one per object read by ranges)
RETRY_STATUS = frozenset({429, 500, 502, 503, 504})  # throttling (503 SlowDown) and server errors
_XML_FIELD = {"Code": re.compile(r"<Code>([^<]*)</Code>"), "Message": re.compile(r"<Message>([^<]*)</Message>")}  # literals: the ReDoS audit reads them


class PresignedRanges:
    """Ranged GETs of S3 objects through presigned URLs on a urllib3 pool, not botocore's request pipeline:
    the training loader's span reads are many small GETs, and botocore spends ~2 ms of CPU on each (events,
    validation, signing, parsing), where this path spends ~0.4 ms (measured on SeaweedFS, 8 threads), so a
    process serves about five times the GETs per second.

    A presigned URL signs the method, bucket, key and expiry but not the Range header, so one URL per object
    serves all its ranges; it is renewed after URL_RENEW_S, and once more when S3 answers 403 (expired
    credentials). Retries are urllib3's, as botocore's standard mode has them: connection errors, timeouts,
    429 and 5xx with exponential backoff and jitter, `max_attempts` tries in all (the client-side rate limiter
    of `retry_mode: adaptive` is not reproduced). Errors are `StorageError`s naming the URL and S3's code.
    """

    def __init__(self, client, settings: S3Settings) -> None:
        import threading
        from collections import OrderedDict

        import urllib3
        from botocore.httpsession import get_cert_path

        self.client = client
        retries = urllib3.Retry(
            total=settings.max_attempts - 1, status_forcelist=RETRY_STATUS, allowed_methods=frozenset({"GET"}), backoff_factor=0.5,
            backoff_max=20.0, backoff_jitter=0.5, raise_on_status=False, respect_retry_after_header=True,
        )
        timeout = urllib3.Timeout(connect=settings.connect_timeout_s, read=settings.read_timeout_s)
        self._pool = urllib3.PoolManager(maxsize=POOL_CONNECTIONS, retries=retries, timeout=timeout, ca_certs=os.environ.get("AWS_CA_BUNDLE") or get_cert_path(True))
        self._urls: OrderedDict[tuple[str, str], tuple[float, str]] = OrderedDict()
        self._lock = threading.Lock()

    def _url(self, bucket: str, key: str, renew: bool) -> str:
        import time

        now = time.monotonic()
        with self._lock:
            cached = self._urls.get((bucket, key))
            if cached is not None and not renew and now - cached[0] < URL_RENEW_S:
                self._urls.move_to_end((bucket, key))
                return cached[1]
        url = self.client.generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": key}, ExpiresIn=URL_LIFETIME_S)
        with self._lock:
            self._urls[(bucket, key)] = (now, url)
            while len(self._urls) > URL_CACHE:
                self._urls.popitem(last=False)
        return url

    def get(self, bucket: str, key: str, start: int, length: int, uri: str) -> bytes | None:
        """Bytes [start, start + length) of the object (fewer where it ends first); None when the range
        starts at or past its end (S3's InvalidRange)."""
        import urllib3

        headers = {"Range": f"bytes={start}-{start + length - 1}"}
        try:
            response = self._pool.request("GET", self._url(bucket, key, renew=False), headers=headers)
            if response.status == 403:  # an expired URL or rotated credentials: sign once more
                response = self._pool.request("GET", self._url(bucket, key, renew=True), headers=headers)
        except urllib3.exceptions.HTTPError as error:
            raise StorageError(f"cannot read {uri}: {type(error).__name__}: {error}") from error
        if response.status == 206:
            return response.data
        if response.status == 200:  # a server that ignores Range answers with the whole object
            return response.data[start : start + length]
        text = response.data[:4096].decode("utf-8", "replace")
        code, message = (match.group(1) if (match := _XML_FIELD[name].search(text)) else None for name in ("Code", "Message"))
        if response.status == 416 or code == "InvalidRange":
            return None
        raise StorageError(f"cannot read {uri}: {code or response.status}: {message or response.reason}")


_RANGES: dict[S3Settings, PresignedRanges] = {}


def _behind_proxy(endpoint: str | None) -> bool:
    """Whether the environment sends requests to `endpoint` through a proxy (botocore honours HTTP(S)_PROXY
    and NO_PROXY; the presigned path does not, so it steps aside)."""
    import urllib.request
    from urllib.parse import urlsplit

    proxies = urllib.request.getproxies_environment()
    parts = urlsplit(endpoint or "https://s3.amazonaws.com")
    return parts.scheme in proxies and not urllib.request.proxy_bypass_environment(parts.hostname or "")


def presigned_ranges(settings: S3Settings) -> PresignedRanges | None:
    """The process's `PresignedRanges` for these settings (renewed with the boto3 client, whose credentials
    sign its URLs); None when `ranged_reads` is botocore or a proxy is configured for the endpoint."""
    if settings.ranged_reads != "presigned" or _behind_proxy(settings.endpoint_url):
        return None
    client = s3_client(settings)
    ranges = _RANGES.get(settings)
    if ranges is None or ranges.client is not client:
        ranges = _RANGES[settings] = PresignedRanges(client, settings)
    return ranges


def _describe_client_error(error: Exception) -> str:
    # boto3's transfer manager (upload_file) wraps the ClientError in an S3UploadFailedError: use the original.
    inner: BaseException | None = error
    for _ in range(4):
        if inner is None or getattr(inner, "response", None) is not None:
            break
        inner = inner.__cause__ or inner.__context__
    if inner is not None and getattr(inner, "response", None) is not None:
        error = inner
    response = getattr(error, "response", None) or {}
    code = response.get("Error", {}).get("Code")
    message = response.get("Error", {}).get("Message")
    if code:
        return f"{code}: {message}" if message else str(code)
    return f"{type(error).__name__}: {error}"


def _error_code(error: StorageError) -> str | None:
    """The S3 error code behind a StorageError raised by `S3Store._call` (None: not an S3 answer)."""
    response = getattr(error.__cause__, "response", None) or {}
    return response.get("Error", {}).get("Code")


class S3Store(Store):
    def __init__(self, url: str, spec: StoreSpec) -> None:
        self.url = url.rstrip("/")
        self.spec = spec
        without_scheme = self.url[len("s3://") :]
        self.bucket, _, self.prefix = without_scheme.partition("/")
        if not self.bucket:
            raise StorageError(f"{url}: an S3 URL needs a bucket (s3://bucket/prefix)")

    @property
    def client(self):
        return s3_client(self.spec.s3)

    def _key(self, key: str) -> str:
        return join_key(self.prefix, check_key(key))

    def _call(self, what: str, key: str, fn, *args, **kwargs):
        from boto3.exceptions import Boto3Error
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            return fn(*args, **kwargs)
        except (ClientError, BotoCoreError, Boto3Error) as error:  # Boto3Error: S3UploadFailedError and kin
            raise StorageError(f"cannot {what} {self.uri(key)}: {_describe_client_error(error)}") from error

    def _iter_objects(self, prefix_key: str, delimiter: str | None = None) -> Iterator[dict]:
        paginator = self.client.get_paginator("list_objects_v2")
        kwargs = {"Bucket": self.bucket, "Prefix": prefix_key}
        if delimiter:
            kwargs["Delimiter"] = delimiter
        relative = prefix_key[len(self.prefix) :].lstrip("/") if self.prefix else prefix_key
        pages = self._call("list", relative, lambda: list(paginator.paginate(**kwargs)))
        yield from pages

    def list_files(self, prefix: str = "") -> list[str]:
        base = self._key(prefix)
        listing_prefix = base + "/" if base else ""
        strip = len(self.prefix) + 1 if self.prefix else 0
        found = []
        for page in self._iter_objects(listing_prefix):
            for item in page.get("Contents", []):
                relative = item["Key"][strip:]
                if any(part.startswith(TMP_PREFIX) for part in relative.split("/")):
                    continue
                found.append(relative)
        return sorted(found)

    def list_dirs(self, prefix: str = "") -> list[str]:
        base = self._key(prefix)
        listing_prefix = base + "/" if base else ""
        names = set()
        for page in self._iter_objects(listing_prefix, delimiter="/"):
            for item in page.get("CommonPrefixes", []):
                name = item["Prefix"][len(listing_prefix) :].strip("/")
                if name and not name.startswith(TMP_PREFIX):
                    names.add(name)
        return sorted(names)

    def exists(self, key: str) -> bool:
        try:
            self._call("read", key, self.client.head_object, Bucket=self.bucket, Key=self._key(key))
            return True
        except StorageError as error:
            if _error_code(error) in ("404", "NoSuchKey", "NotFound"):
                return False
            raise

    def size(self, key: str) -> int:
        head = self._call("read", key, self.client.head_object, Bucket=self.bucket, Key=self._key(key))
        return int(head["ContentLength"])

    def identity(self, key: str) -> str:
        """Changes when the object's content does: its size and ETag."""
        head = self._call("read", key, self.client.head_object, Bucket=self.bucket, Key=self._key(key))
        return f"{head['ContentLength']}:{head.get('ETag', '')}"

    def open_read(self, key: str) -> BinaryIO:
        response = self._call("read", key, self.client.get_object, Bucket=self.bucket, Key=self._key(key))
        return _StreamingBodyReader(response["Body"], self.uri(key))

    def read_range(self, key: str, start: int, length: int) -> bytes:
        if start < 0 or length < 0:
            raise ValueError(f"bad range {start}+{length}")
        if not length:  # an empty Range header is not a valid request; a missing key still fails
            self.size(key)
            return b""
        ranges = presigned_ranges(self.spec.s3)
        if ranges is not None:
            body = ranges.get(self.bucket, self._key(key), start, length, self.uri(key))
            if body is None:  # the range starts at or past the end: empty, but a missing key still fails
                self.size(key)
                return b""
            return body
        try:
            response = self._call("read", key, self.client.get_object, Bucket=self.bucket, Key=self._key(key), Range=f"bytes={start}-{start + length - 1}")
        except StorageError as error:
            if _error_code(error) != "InvalidRange":
                raise
            self.size(key)  # the range starts at or past the end: empty, but a missing key still fails
            return b""
        with _StreamingBodyReader(response["Body"], self.uri(key)) as body:
            return body.read()

    def write_bytes(self, key: str, data: bytes) -> None:
        # A single PUT: the object appears whole or not at all.
        self._call("write", key, self.client.put_object, Bucket=self.bucket, Key=self._key(key), Body=data)

    def put_file(self, local_path: str | os.PathLike[str], key: str) -> None:
        # upload_file switches to multipart above its threshold; the object appears on CompleteMultipartUpload.
        try:
            self._call("write", key, self.client.upload_file, os.fspath(local_path), self.bucket, self._key(key))
        finally:
            Path(local_path).unlink(missing_ok=True)

    def fetch(self, key: str, local_dir: str) -> str:
        target = Path(local_dir) / hashlib.sha1(self.uri(key).encode()).hexdigest()[:16]
        target = target.with_name(target.name + "-" + Path(key).name)
        self._call("read", key, self.client.download_file, self.bucket, self._key(key), str(target))
        return str(target)

    def delete(self, keys: list[str]) -> None:
        for start in range(0, len(keys), 1000):
            chunk = keys[start : start + 1000]
            if chunk:
                response = self._call(
                    "delete",
                    chunk[0],
                    self.client.delete_objects,
                    Bucket=self.bucket,
                    Delete={"Objects": [{"Key": self._key(k)} for k in chunk], "Quiet": True},
                )
                # DeleteObjects answers 200 and reports per-key failures (e.g. AccessDenied) in Errors.
                errors = (response or {}).get("Errors") or []
                if errors:
                    first = errors[0]
                    raise StorageError(
                        f"cannot delete s3://{self.bucket}/{first.get('Key')}: {first.get('Code')}: {first.get('Message')}"
                        + (f" (and {len(errors) - 1} more keys)" if len(errors) > 1 else "")
                    )

    def check_access(self) -> None:
        self._call("list", "", self.client.list_objects_v2, Bucket=self.bucket, Prefix=self.prefix, MaxKeys=1)

    def abort_stale_uploads(self, older_than_s: float = STALE_TEMP_AGE_S) -> list[str]:
        """Abort multipart uploads under this prefix started more than `older_than_s` ago (a crashed
        writer's parts cost storage but are never visible); returns their keys."""
        import datetime

        cutoff = datetime.datetime.now(datetime.UTC) - datetime.timedelta(seconds=older_than_s)
        listing_prefix = self.prefix + "/" if self.prefix else ""
        response = self._call("list uploads", "", self.client.list_multipart_uploads, Bucket=self.bucket, Prefix=listing_prefix)
        aborted = []
        for upload in response.get("Uploads", []):
            if upload["Initiated"] < cutoff:
                self._call("abort", upload["Key"], self.client.abort_multipart_upload, Bucket=self.bucket, Key=upload["Key"], UploadId=upload["UploadId"])
                aborted.append(upload["Key"])
        return aborted


class _StreamingBodyReader:
    """A minimal file object over a botocore StreamingBody (read/close/context manager)."""

    def __init__(self, body, uri: str) -> None:
        self._body = body
        self._uri = uri

    def read(self, size: int = -1) -> bytes:
        from botocore.exceptions import BotoCoreError

        try:
            return self._body.read() if size is None or size < 0 else self._body.read(size)
        except (BotoCoreError, OSError) as error:  # the connection dropped mid-body
            raise StorageError(f"cannot read {self._uri}: {_describe_client_error(error)}") from error

    def readable(self) -> bool:
        return True

    def close(self) -> None:
        self._body.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def open_store(url: str, s3: S3Settings | None = None) -> Store:
    spec = StoreSpec(url=url, s3=s3 or S3Settings())
    if is_s3(url):
        return S3Store(url, spec)
    if "://" in url:
        raise StorageError(f"{url}: unsupported URL scheme; use a local path or s3://bucket/prefix")
    return LocalStore(os.path.abspath(url), spec)


_SWEPT_SCRATCH = False


def remove_stale_scratch(temp_root: str | None = None) -> list[str]:
    """Delete scratch folders (`sluice-<host>-<pid>-*` in the temp folder) of processes that died."""
    root = Path(temp_root or tempfile.gettempdir())
    removed = []
    try:
        entries = list(root.iterdir())
    except OSError:
        return removed
    for entry in entries:
        parts = entry.name.split("-", 3)  # sluice-<host>-<pid>-<random>
        if len(parts) != 4 or parts[0] + "-" != SCRATCH_PREFIX or not entry.is_dir():
            continue
        try:
            mtime = entry.stat().st_mtime
        except OSError:
            continue
        if _is_stale(parts[1], parts[2], mtime):
            shutil.rmtree(entry, ignore_errors=True)
            removed.append(str(entry))
    return removed


def local_temp_dir() -> str:
    """A private scratch folder for building files before they are published. The first call in a
    process also removes scratch folders that crashed processes (SIGKILL, OOM) left behind."""
    global _SWEPT_SCRATCH
    if not _SWEPT_SCRATCH:
        _SWEPT_SCRATCH = True
        remove_stale_scratch()
    return tempfile.mkdtemp(prefix=f"{SCRATCH_PREFIX}{_host_tag()}-{os.getpid()}-")
