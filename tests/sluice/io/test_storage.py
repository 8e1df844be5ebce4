"""The storage layer on a local folder and on a real S3-compatible server (SeaweedFS on 127.0.0.1)."""

from __future__ import annotations

import os
import pickle
from collections.abc import Iterator
from pathlib import Path

import pytest

import sluice.io.storage
from benchmarks.s3_server import SeaweedS3, shared_server, use_credentials
from sluice.config import S3Settings
from sluice.io.storage import TMP_PREFIX, LocalStore, S3Store, StorageError, open_store

MB = 1 << 20


@pytest.fixture(scope="session")
def s3_server() -> Iterator[SeaweedS3]:
    # The same process-wide server as the asset tests' `s3_server` fixture (tests/data_assets/conftest.py).
    with shared_server() as server:
        yield server


@pytest.fixture
def s3_settings(s3_server) -> S3Settings:
    return S3Settings(endpoint_url=s3_server.endpoint_url, max_attempts=2)


@pytest.fixture
def s3_credentials(s3_server, monkeypatch) -> Iterator[SeaweedS3]:
    use_credentials(monkeypatch, s3_server.access_key, s3_server.secret_key)
    yield s3_server
    sluice.io.storage._CLIENTS.clear()


@pytest.fixture(params=["local", "s3"])
def store(request, tmp_path):
    """An empty store: a tmp folder, or a prefix in a fresh bucket of the real S3 server."""
    if request.param == "local":
        return open_store(str(tmp_path / "store"))
    server = request.getfixturevalue("s3_credentials")
    settings = request.getfixturevalue("s3_settings")
    bucket = server.create_bucket()
    return open_store(f"s3://{bucket}/some/prefix", settings)


def test_open_store_picks_the_backend(tmp_path):
    s3_settings = S3Settings(endpoint_url="http://127.0.0.1:9")
    assert isinstance(open_store(str(tmp_path)), LocalStore)
    s3 = open_store("s3://bucket/a/b/", s3_settings)
    assert isinstance(s3, S3Store)
    assert (s3.bucket, s3.prefix, s3.url) == ("bucket", "a/b", "s3://bucket/a/b")
    with pytest.raises(StorageError, match="needs a bucket"):
        open_store("s3://", s3_settings)
    with pytest.raises(StorageError, match="unsupported URL scheme"):
        open_store("gs://bucket/x")


def test_write_read_exists_size_overwrite(store):
    assert not store.exists("a/b.txt")
    store.write_bytes("a/b.txt", b"hello")
    assert store.exists("a/b.txt")
    assert store.read_bytes("a/b.txt") == b"hello"
    assert store.size("a/b.txt") == 5
    # A "folder" is not a file.
    assert not store.exists("a")
    store.write_bytes("a/b.txt", b"replaced, longer")
    assert store.read_bytes("a/b.txt") == b"replaced, longer"
    assert store.size("a/b.txt") == len(b"replaced, longer")
    store.write_bytes("empty", b"")
    assert store.exists("empty") and store.size("empty") == 0 and store.read_bytes("empty") == b""


def test_open_read_streams_in_chunks(store):
    data = os.urandom(300_000)
    store.write_bytes("blob.bin", data)
    chunks = []
    with store.open_read("blob.bin") as handle:
        while chunk := handle.read(65_536):
            assert len(chunk) <= 65_536
            chunks.append(chunk)
    assert b"".join(chunks) == data


def test_read_range_reads_only_the_asked_bytes(store):
    data = os.urandom(100_000)
    store.write_bytes("blob.bin", data)
    assert store.read_range("blob.bin", 0, 10) == data[:10]
    assert store.read_range("blob.bin", 12_345, 40_000) == data[12_345:52_345]
    assert store.read_range("blob.bin", 99_990, 100) == data[99_990:]  # past the end: what there is
    assert store.read_range("blob.bin", 100_000, 5) == b""
    assert store.read_range("blob.bin", 7, 0) == b""
    with pytest.raises(StorageError) as info:
        store.read_range("nope/missing.bin", 0, 8)
    assert store.uri("nope/missing.bin") in str(info.value)
    with pytest.raises(StorageError):
        store.read_range("nope/missing.bin", 0, 0)


def test_ranged_file_seeks_and_reads_like_the_bytes(store):
    import io

    from sluice.io.storage import RangedFile

    data = os.urandom(50_000)
    store.write_bytes("blob.bin", data)
    handle = RangedFile(store, "blob.bin")
    assert handle.length == len(data) and handle.read(10) == data[:10] and handle.tell() == 10
    handle.seek(-100, io.SEEK_END)
    assert handle.read(1000) == data[-100:] and handle.read(5) == b""
    handle.seek(20_000)
    handle.seek(5, io.SEEK_CUR)
    assert handle.read(3) == data[20_005:20_008]
    assert io.BufferedReader(RangedFile(store, "blob.bin", size=len(data))).read() == data


def test_missing_key_raises_storage_error_naming_the_url(store, tmp_path):
    with pytest.raises(StorageError) as info:
        store.read_bytes("nope/missing.bin")
    assert store.uri("nope/missing.bin") in str(info.value)
    with pytest.raises(StorageError) as info:
        store.fetch("nope/missing.bin", str(tmp_path))
    assert store.uri("nope/missing.bin") in str(info.value)
    with pytest.raises((StorageError, OSError)):
        store.size("nope/missing.bin")


def test_put_file_publishes_and_consumes_the_local_file(store, tmp_path):
    local = tmp_path / "built.parquet"
    local.write_bytes(b"PAR1 data PAR1")
    store.put_file(local, "asset/part-00000.parquet")
    assert not local.exists()
    assert store.read_bytes("asset/part-00000.parquet") == b"PAR1 data PAR1"
    # Over an existing object.
    local.write_bytes(b"second version")
    store.put_file(str(local), "asset/part-00000.parquet")
    assert store.read_bytes("asset/part-00000.parquet") == b"second version"
    assert store.list_files("asset") == ["asset/part-00000.parquet"]


def test_large_put_file_round_trips(store, tmp_path, request):
    # Above boto3's 8 MB multipart threshold: S3 gets a multipart upload that appears on completion.
    data = os.urandom(9 * MB + 12_345)
    local = tmp_path / "big.bin"
    local.write_bytes(data)
    store.put_file(local, "big/big.bin")
    assert store.size("big/big.bin") == len(data)
    assert store.read_bytes("big/big.bin") == data
    fetched = store.fetch("big/big.bin", str(tmp_path))
    assert Path(fetched).read_bytes() == data
    if isinstance(store, S3Store):
        client = request.getfixturevalue("s3_server").client()
        head = client.head_object(Bucket=store.bucket, Key=f"{store.prefix}/big/big.bin")
        assert head["ContentLength"] == len(data)
        assert "-" in head["ETag"], f"expected a multipart ETag, got {head['ETag']}"
        assert client.list_multipart_uploads(Bucket=store.bucket).get("Uploads", []) == []


def test_list_files_recursive_sorted_and_skips_temp_files(store):
    for key in ["b/z.txt", "a/y/2.txt", "a/x.txt", "a/y/1.txt", "top.txt", "ab/other.txt"]:
        store.write_bytes(key, key.encode())
    # Leftovers of interrupted writes: a temp file, and anything inside a temp folder.
    store.write_bytes(f"a/{TMP_PREFIX}x.txt.123.abcd", b"partial")
    store.write_bytes(f"{TMP_PREFIX}scratch/inner.txt", b"partial")
    assert store.list_files() == ["a/x.txt", "a/y/1.txt", "a/y/2.txt", "ab/other.txt", "b/z.txt", "top.txt"]
    # Keys stay relative to the store root; "a" does not match "ab/".
    assert store.list_files("a") == ["a/x.txt", "a/y/1.txt", "a/y/2.txt"]
    assert store.list_files("a/") == ["a/x.txt", "a/y/1.txt", "a/y/2.txt"]
    assert store.list_files("a/y") == ["a/y/1.txt", "a/y/2.txt"]
    assert store.list_files("missing") == []


def test_list_dirs_immediate_sorted_without_temp_dirs(store):
    for key in ["snap-2/f", "snap-1/f", "snap-1/deeper/g", "file-at-root", f"{TMP_PREFIX}half/f"]:
        store.write_bytes(key, b"x")
    assert store.list_dirs() == ["snap-1", "snap-2"]
    assert store.list_dirs("snap-1") == ["deeper"]
    assert store.list_dirs("snap-2") == []
    assert store.list_dirs("missing") == []


def test_delete_removes_listed_keys_and_ignores_missing_ones(store):
    for key in ["p/1", "p/2", "p/3"]:
        store.write_bytes(key, b"x")
    store.delete(["p/1", "p/3", "p/never-existed"])
    store.delete([])
    assert store.list_files() == ["p/2"]
    assert not store.exists("p/1") and store.exists("p/2")


def test_s3_many_keys_list_and_delete_past_one_page(s3_credentials, s3_settings):
    # S3 lists 1000 keys per page and deletes 1000 per request: cross both boundaries.
    store = open_store(f"s3://{s3_credentials.create_bucket()}/p", s3_settings)
    keys = [f"many/{i:05d}" for i in range(1003)]
    for key in keys:
        store.write_bytes(key, b"")
    assert store.list_files("many") == keys
    store.delete(keys[:1002])
    assert store.list_files("many") == keys[1002:]


def test_fetch_gives_a_local_path_with_the_bytes(store, tmp_path):
    store.write_bytes("dir/data.bin", b"\x00\x01payload")
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    path = store.fetch("dir/data.bin", str(scratch))
    assert Path(path).read_bytes() == b"\x00\x01payload"
    if isinstance(store, LocalStore):
        assert path == store.local_path("dir/data.bin")  # the file itself, no copy
        assert list(scratch.iterdir()) == []
    else:
        assert store.local_path("dir/data.bin") is None
        assert Path(path).parent == scratch


def test_child_and_pickled_spec_reopen_the_same_place(store):
    child = store.child("sub/dir")
    child.write_bytes("k.txt", b"from child")
    assert store.read_bytes("sub/dir/k.txt") == b"from child"
    assert child.uri("k.txt") == store.uri("sub/dir/k.txt")
    reopened = pickle.loads(pickle.dumps(store.spec)).open()
    assert type(reopened) is type(store)
    assert reopened.read_bytes("sub/dir/k.txt") == b"from child"


def test_check_access_passes_on_a_readable_store(store):
    store.write_bytes("x", b"1")
    store.check_access()


# -- local specifics -----------------------------------------------------------------------------


def test_local_check_access_on_missing_folder(tmp_path):
    with pytest.raises(StorageError, match="does not exist"):
        open_store(str(tmp_path / "absent")).check_access()


def test_local_write_is_atomic_when_the_write_fails_midway(tmp_path, monkeypatch):
    store = open_store(str(tmp_path / "store"))
    store.write_bytes("part.bin", b"old complete content")
    final = tmp_path / "store" / "part.bin"
    seen_during_write = []

    class FailingHandle:
        """Writes the first half to the real (temporary) file, then fails like a full disk."""

        def __init__(self, handle):
            self.handle = handle

        def write(self, data):
            self.handle.write(data[: len(data) // 2])
            self.handle.flush()
            seen_during_write.append(final.read_bytes())
            raise OSError(28, "No space left on device")

        def __getattr__(self, name):
            return getattr(self.handle, name)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.handle.close()

    real_open = open
    monkeypatch.setattr(sluice.io.storage, "open", lambda *a, **k: FailingHandle(real_open(*a, **k)), raising=False)
    with pytest.raises(OSError, match="No space left"):
        store.write_bytes("part.bin", b"new content that never lands " * 1000)
    monkeypatch.undo()

    assert seen_during_write == [b"old complete content"]  # readers never saw the partial bytes
    assert final.read_bytes() == b"old complete content"
    assert sorted(p.name for p in final.parent.iterdir()) == ["part.bin"]  # no .tmp- leftover


def test_local_write_leaves_no_temp_file_and_fails_cleanly_before_rename(tmp_path, monkeypatch):
    store = open_store(str(tmp_path / "store"))
    store.write_bytes("d/part.bin", b"v1")
    store.write_bytes("d/part.bin", b"v2")
    folder = tmp_path / "store" / "d"
    assert sorted(p.name for p in folder.iterdir()) == ["part.bin"]

    # A failure after the temp file is complete but before the rename (fsync, or the rename itself).
    def fail(*args, **kwargs):
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(os, "replace", fail)
    with pytest.raises(OSError, match="Input/output error"):
        store.write_bytes("d/part.bin", b"v3")
    local = tmp_path / "built"
    local.write_bytes(b"v4")
    with pytest.raises(OSError, match="Input/output error"):
        store.put_file(local, "d/part.bin")
    monkeypatch.undo()

    assert (folder / "part.bin").read_bytes() == b"v2"
    assert sorted(p.name for p in folder.iterdir()) == ["part.bin"]


# -- S3 specifics --------------------------------------------------------------------------------


def test_s3_objects_are_where_the_url_says(s3_credentials, s3_settings):
    bucket = s3_credentials.create_bucket()
    store = open_store(f"s3://{bucket}/root/dir", s3_settings)
    store.write_bytes("x/y.txt", b"payload")
    body = s3_credentials.client().get_object(Bucket=bucket, Key="root/dir/x/y.txt")["Body"].read()
    assert body == b"payload"
    assert store.uri("x/y.txt") == f"s3://{bucket}/root/dir/x/y.txt"
    # A store at the bucket root.
    whole = open_store(f"s3://{bucket}", s3_settings)
    assert whole.list_files() == ["root/dir/x/y.txt"]
    assert whole.list_dirs() == ["root"]


def test_s3_wrong_secret_is_a_storage_error_naming_url_and_code(s3_server, s3_settings, monkeypatch, tmp_path):
    bucket = s3_server.create_bucket()
    s3_server.client().put_object(Bucket=bucket, Key="data/present.txt", Body=b"x")
    wrong_secret = "WRONG" + s3_server.secret_key[::-1]
    use_credentials(monkeypatch, s3_server.access_key, wrong_secret)
    try:
        store = open_store(f"s3://{bucket}/data", s3_settings)
        local = tmp_path / "upload.bin"
        local.write_bytes(b"y")
        attempts = {
            "read_bytes": lambda: store.read_bytes("present.txt"),
            "read_range": lambda: store.read_range("present.txt", 0, 1),
            "write_bytes": lambda: store.write_bytes("new.txt", b"y"),
            "put_file": lambda: store.put_file(local, "new.txt"),
            "list_files": lambda: store.list_files(),
            "list_dirs": lambda: store.list_dirs(),
            "exists": lambda: store.exists("present.txt"),
            "size": lambda: store.size("present.txt"),
            "fetch": lambda: store.fetch("present.txt", str(tmp_path)),
            "delete": lambda: store.delete(["present.txt"]),
            "check_access": lambda: store.check_access(),
        }
        for name, attempt in attempts.items():
            with pytest.raises(StorageError) as info:
                attempt()
            message = str(info.value)
            assert f"s3://{bucket}/data" in message, (name, message)
            assert any(code in message for code in ("SignatureDoesNotMatch", "AccessDenied", "403", "Forbidden")), (name, message)
            assert wrong_secret not in message and s3_server.secret_key not in message, (name, message)
    finally:
        sluice.io.storage._CLIENTS.clear()
    # Nothing was changed by the rejected calls.
    listing = s3_server.client().list_objects_v2(Bucket=bucket)
    assert [item["Key"] for item in listing["Contents"]] == ["data/present.txt"]


def test_s3_unknown_access_key_is_rejected(s3_server, s3_settings, monkeypatch):
    bucket = s3_server.create_bucket()
    use_credentials(monkeypatch, "NOSUCHKEY0000", s3_server.secret_key)
    try:
        with pytest.raises(StorageError) as info:
            open_store(f"s3://{bucket}/x", s3_settings).check_access()
    finally:
        sluice.io.storage._CLIENTS.clear()
    assert f"s3://{bucket}/x" in str(info.value)
    assert any(code in str(info.value) for code in ("InvalidAccessKeyId", "AccessDenied", "403")), str(info.value)
    assert s3_server.secret_key not in str(info.value)


def test_s3_check_access_on_missing_bucket_fails_clearly(s3_credentials, s3_settings):
    store = open_store("s3://no-such-bucket-sluice/prefix", s3_settings)
    with pytest.raises(StorageError) as info:
        store.check_access()
    assert "s3://no-such-bucket-sluice/prefix" in str(info.value)
    assert "NoSuchBucket" in str(info.value)
    assert not store.exists("anything")
    with pytest.raises(StorageError, match="NoSuchBucket"):
        store.list_files()


def test_s3_unreachable_endpoint_is_a_storage_error(s3_credentials):
    from benchmarks.s3_server import free_ports

    (port,) = free_ports(1)  # nothing listens there
    store = open_store("s3://bucket/p", S3Settings(endpoint_url=f"http://127.0.0.1:{port}", max_attempts=1))
    with pytest.raises(StorageError) as info:
        store.check_access()
    assert "s3://bucket/p" in str(info.value) and "EndpointConnectionError" in str(info.value)


@pytest.mark.parametrize(
    "operation",
    ["exists", "size", "identity", "read_bytes", "read_range", "open_read", "list_files", "list_dirs", "write_bytes", "delete"],
)
def test_s3_connection_reset_is_a_storage_error_from_every_operation(s3_credentials, s3_settings, operation):
    """A store that drops every connection (TCP reset, no answer) surfaces as a StorageError naming the URL
    from each operation, never as a raw botocore exception (CI once saw exists() leak ConnectionClosedError)."""
    from tests.support.fault_proxy import FaultProxy

    bucket = s3_credentials.create_bucket()
    healthy = open_store(f"s3://{bucket}/p", s3_settings)
    healthy.write_bytes("a/key.bin", b"payload")
    calls = {
        "exists": lambda s: s.exists("a/key.bin"),
        "size": lambda s: s.size("a/key.bin"),
        "identity": lambda s: s.identity("a/key.bin"),
        "read_bytes": lambda s: s.read_bytes("a/key.bin"),
        "read_range": lambda s: s.read_range("a/key.bin", 1, 3),
        "open_read": lambda s: s.open_read("a/key.bin").read(),
        "list_files": lambda s: s.list_files("a"),
        "list_dirs": lambda s: s.list_dirs(""),
        "write_bytes": lambda s: s.write_bytes("a/other.bin", b"x"),
        "delete": lambda s: s.delete(["a/key.bin"]),
    }
    with FaultProxy(s3_credentials.endpoint_url, fault_rate=0.0) as proxy:
        proxy.down = True
        down = open_store(f"s3://{bucket}/p", S3Settings(endpoint_url=proxy.endpoint_url, max_attempts=1))
        with pytest.raises(StorageError) as info:
            calls[operation](down)
    assert f"s3://{bucket}/p" in str(info.value), str(info.value)
    assert "Connection" in str(info.value), str(info.value)
    assert healthy.read_bytes("a/key.bin") == b"payload"


def test_s3_read_only_identity_reads_but_writes_and_deletes_fail(s3_server, s3_settings, monkeypatch, tmp_path):
    bucket = s3_server.create_bucket()
    s3_server.client().put_object(Bucket=bucket, Key="data/present.txt", Body=b"kept")
    use_credentials(monkeypatch, s3_server.readonly_access_key, s3_server.readonly_secret_key)
    try:
        store = open_store(f"s3://{bucket}/data", s3_settings)
        store.check_access()
        assert store.list_files() == ["present.txt"]
        assert store.read_bytes("present.txt") == b"kept"
        with pytest.raises(StorageError, match=rf"cannot write s3://{bucket}/data/new.txt: AccessDenied"):
            store.write_bytes("new.txt", b"y")
        local = tmp_path / "upload.bin"
        local.write_bytes(b"y")
        with pytest.raises(StorageError, match=rf"cannot write s3://{bucket}/data/new.txt: AccessDenied"):
            store.put_file(local, "new.txt")
        # DeleteObjects answers 200 with per-key errors: those must not pass silently.
        with pytest.raises(StorageError, match=rf"cannot delete s3://{bucket}/data/present.txt: AccessDenied"):
            store.delete(["present.txt"])
    finally:
        sluice.io.storage._CLIENTS.clear()
    listing = s3_server.client().list_objects_v2(Bucket=bucket)
    assert [item["Key"] for item in listing["Contents"]] == ["data/present.txt"]


def test_a_killed_writer_not_yet_reaped_counts_as_dead():
    """A zombie (exited, not yet waited for) writes nothing more: its temp files are stale."""
    import subprocess
    import time as clock

    from sluice.io.storage import _pid_alive

    child = subprocess.Popen(["true"])
    deadline = clock.monotonic() + 30
    while Path(f"/proc/{child.pid}/stat").read_bytes().rsplit(b")", 1)[1].split()[0] != b"Z":
        assert clock.monotonic() < deadline, "the child did not exit"
        clock.sleep(0.01)
    try:
        assert not _pid_alive(child.pid)
        assert _pid_alive(os.getpid())
    finally:
        child.wait()


# -- ranged reads through presigned URLs (sluice.io.storage.PresignedRanges) -------------------------


def test_s3_presigned_ranged_reads_return_botocores_bytes(s3_credentials, s3_settings):
    """The presigned path (default) and botocore's get_object (`ranged_reads: botocore`, the oracle) give the
    same bytes for the same ranges, past-the-end ones included."""
    import random

    bucket = s3_credentials.create_bucket()
    data = os.urandom(300_000)
    s3_credentials.client().put_object(Bucket=bucket, Key="p/blob.bin", Body=data)
    fast = open_store(f"s3://{bucket}/p", s3_settings)
    botocore = open_store(f"s3://{bucket}/p", s3_settings.model_copy(update={"ranged_reads": "botocore"}))
    assert sluice.io.storage.presigned_ranges(fast.spec.s3) is not None and sluice.io.storage.presigned_ranges(botocore.spec.s3) is None
    rng = random.Random(4)
    ranges = [(rng.randrange(len(data)), rng.randrange(1, 20_000)) for _ in range(40)] + [(len(data) - 3, 10), (len(data), 4), (len(data) + 9, 1)]
    for start, length in ranges:
        assert fast.read_range("blob.bin", start, length) == botocore.read_range("blob.bin", start, length) == data[start : start + length]


def test_s3_presigned_url_is_signed_again_when_it_expired(s3_credentials, s3_settings, monkeypatch):
    import time

    bucket = s3_credentials.create_bucket()
    store = open_store(f"s3://{bucket}", s3_settings)
    store.write_bytes("k.bin", b"0123456789")
    monkeypatch.setattr(sluice.io.storage, "URL_LIFETIME_S", 1)
    assert store.read_range("k.bin", 2, 3) == b"234"
    urls = sluice.io.storage.presigned_ranges(s3_settings)._urls
    first = urls[(bucket, "k.bin")][1]
    time.sleep(2.5)  # the cached URL has expired (and is not yet due for renewal): S3 answers 403, sluice signs again
    assert store.read_range("k.bin", 5, 2) == b"56"
    assert urls[(bucket, "k.bin")][1] != first


def test_s3_presigned_ranged_reads_retry_throttling_and_resets(s3_credentials):
    """Through a proxy answering 40% of requests with 503 SlowDown or a TCP reset, every ranged read still
    returns the right bytes (urllib3's retries, max_attempts in all)."""
    from tests.support.fault_proxy import FaultProxy

    bucket = s3_credentials.create_bucket()
    data = os.urandom(50_000)
    s3_credentials.client().put_object(Bucket=bucket, Key="blob.bin", Body=data)
    with FaultProxy(s3_credentials.endpoint_url, fault_rate=0.4, seed=3, faults=("slowdown", "reset")) as proxy:
        store = open_store(f"s3://{bucket}", S3Settings(endpoint_url=proxy.endpoint_url, max_attempts=10))
        for start in range(0, 50_000, 2_500):
            assert store.read_range("blob.bin", start, 1_000) == data[start : start + 1_000]
    assert proxy.counts["slowdown"] > 0 and proxy.counts["reset"] > 0


def test_presigned_ranged_reads_step_aside_behind_a_proxy(monkeypatch):
    settings = S3Settings(endpoint_url="http://s3.internal:9000")
    monkeypatch.setenv("HTTP_PROXY", "http://proxy.internal:3128")
    assert sluice.io.storage.presigned_ranges(settings) is None  # botocore honours the proxy; this path would not
    monkeypatch.setenv("NO_PROXY", "s3.internal")
    assert sluice.io.storage._behind_proxy(settings.endpoint_url) is False


def _client_is_inherited(settings, queue) -> None:
    old_client, old_ranges = sluice.io.storage._CLIENTS[settings], sluice.io.storage._RANGES[settings]  # inherited; kept alive here
    queue.put(sluice.io.storage.s3_client(settings) is old_client or sluice.io.storage.presigned_ranges(settings) is old_ranges)


def test_a_forked_process_makes_its_own_s3_client_and_pool(s3_credentials, s3_settings):
    """boto3 clients and urllib3 pools hold sockets: a fork (DataLoader workers) must not share them."""
    import multiprocessing

    client, ranges = sluice.io.storage.s3_client(s3_settings), sluice.io.storage.presigned_ranges(s3_settings)
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    child = context.Process(target=_client_is_inherited, args=(s3_settings, queue))
    child.start()
    inherited = queue.get(timeout=60)
    child.join(60)
    assert inherited is False
    assert sluice.io.storage.s3_client(s3_settings) is client and sluice.io.storage.presigned_ranges(s3_settings) is ranges
