"""Worker processes that start warm: a forkserver with the stage modules imported, and one process pool
per process, reused across the stages of a run.

Why: a spawned worker starts a new interpreter and imports what its tasks need (pyarrow, numpy, pydantic,
the stage modules: about half a CPU second), and multiprocessing also runs the parent's main script again
in it. Under `sluice materialize` (or any script that imports Dagster at the top) that is Dagster and all
of the code location, seconds per worker, paid by every executor call of every stage. Here:

- `context()` is a forkserver whose server imports `PRELOAD` once; each worker is a fork of it (a few
  milliseconds, pages shared). Its children do not run the parent's main script again: `sluice` hands
  them module-level functions only, never something defined in `__main__`. (Where there is no forkserver,
  or its socket path would be too long, workers are spawned as before.)
- `pool(n)` is this process's pool of `n` workers, started lazily (a worker is forked when a task needs
  it, so a re-run with 3 tasks left starts at most 3) and reused by the next executor call. A pool that
  breaks (a worker was killed) is discarded; the next call gets a fresh one. Workers hold no state that
  changes results (tasks carry everything they read), so reuse keeps outputs byte-identical.
- The forkserver's children inherit its environment (variables, working folder): when the process's
  changed since it started, the pool and the forkserver start over, so workers see what a spawned one would.
- `terminate()` kills the workers at once (a stage interrupted by Ctrl-C or a terminated run).
- `shutdown()` stops the pool and the forkserver and waits for them, so the workers' CPU time is counted
  in this process's `RUSAGE_CHILDREN` (benchmarks measure a run cold: shutdown before and after).
"""

from __future__ import annotations

import contextlib
import io
import multiprocessing
import os
import signal
import threading
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import context as mp_context
from multiprocessing import forkserver, popen_forkserver, reduction, spawn, util
from typing import Any

# What pyarrow imports on first use, not at `import pyarrow`: `pa.array` from Python objects and the
# conversion of a zoned timestamp import pandas and pyarrow.compute (about half a CPU second, paid again by
# every fresh process: a third of the cleaning stage's CPU on a 2,000-page crawl when each task's
# supervised child imported them). A forkserver that cannot import one (no pandas) skips it.
ARROW_LAZY = ["pyarrow.compute", "pandas"]
# What a stage worker imports (the forkserver imports it once; every worker forked from it has it).
PRELOAD = [
    "sluice.runtime.tasks", "sluice.ingest.raw", "sluice.clean", "sluice.clean.steps.extract", "sluice.clean.steps.filters", "sluice.clean.steps.pii",
    "sluice.clean.models.langid", "sluice.tokens.tokenize", "pyarrow.parquet", *ARROW_LAZY, "sluice.clean.models.langid_warm",
]
_MAIN_KEYS = ("init_main_from_path", "init_main_from_name")
_lock = threading.RLock()  # re-entered when context() starts over inside pool()
_pools: dict[int, ProcessPoolExecutor] = {}
_exit_hook: int | None = None  # the process that registered the exit hooks (a forked child registers its own)
_started_env: int | None = None  # the environment the running forkserver started with


class _Popen(popen_forkserver.Popen):
    """Forkserver launch (as multiprocessing's) whose preparation data omits the parent's main module."""

    def _launch(self, process_obj: Any) -> None:
        prep_data = spawn.get_preparation_data(process_obj._name)
        for key in _MAIN_KEYS:
            prep_data.pop(key, None)
        buf = io.BytesIO()
        mp_context.set_spawning_popen(self)
        try:
            reduction.dump(prep_data, buf)
            reduction.dump(process_obj, buf)
        finally:
            mp_context.set_spawning_popen(None)
        self.sentinel, w = forkserver.connect_to_new_process(self._fds)
        _parent_w = os.dup(w)
        self.finalizer = util.Finalize(self, util.close_fds, (_parent_w, self.sentinel))
        with open(w, "wb", closefd=True) as f:
            f.write(buf.getbuffer())
        self.pid = forkserver.read_signed(self.sentinel)


class _Process(mp_context.ForkServerProcess):
    @staticmethod
    def _Popen(process_obj: Any) -> _Popen:
        return _Popen(process_obj)


class WarmContext(mp_context.ForkServerContext):
    """The forkserver context with `_Process` (no main-module re-run in the children)."""

    Process = _Process  # type: ignore[assignment]


def _forkserver_usable() -> bool:
    # The forkserver listens on a Unix socket in multiprocessing's temporary folder (under $TMPDIR); a
    # socket path has at most 107 bytes.
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return False
    return len(os.fsencode(util.get_temp_dir())) + len("/listener-xxxxxxxx") < 100


def _environment() -> int:
    return hash((os.getcwd(), tuple(sorted(os.environ.items()))))


def _refresh() -> None:
    """Start over when the environment changed since the forkserver started: its children inherit the
    forkserver's environment, and a spawned worker would see the current one."""
    global _started_env
    if forkserver._forkserver._forkserver_pid is None:
        _started_env = None
    elif _started_env is not None and _started_env != _environment():
        shutdown()


def context(preload: list[str] | None = None) -> Any:
    """The context worker processes start from: the warm forkserver (importing `preload`, default
    `PRELOAD`, when it starts), else spawn."""
    global _started_env
    if not _forkserver_usable():
        return multiprocessing.get_context("spawn")
    _refresh()
    if _started_env is None:
        _started_env = _environment()
    forkserver.set_forkserver_preload(list(preload if preload is not None else PRELOAD))
    return WarmContext()


def _worker_started() -> None:
    """In each pool worker: stop (and wait for) the worker's own forkserver when it exits (the per-document
    budget starts one), so the CPU time of that server and its children is counted in the worker's."""
    util.Finalize(None, stop_forkserver, exitpriority=100)


def pool(max_workers: int) -> ProcessPoolExecutor:
    """This process's pool of `max_workers` warm workers (created on first use, reused after)."""
    _refresh()
    with _lock:
        existing = _pools.get(max_workers)
        if existing is not None and not getattr(existing, "_broken", False):
            return existing
        if existing is not None:
            existing.shutdown(wait=False, cancel_futures=True)
        created = ProcessPoolExecutor(max_workers=max_workers, mp_context=context(), initializer=_worker_started)
        global _exit_hook
        if _exit_hook != os.getpid():
            _exit_hook = os.getpid()
            # At exit, stop the pool and wait for the forkserver too (its CPU time is then reaped). A finalizer,
            # not atexit: multiprocessing's exit (at interpreter exit, and at the end of a multiprocessing child
            # such as a Dagster step process) runs finalizers with an exit priority before it joins every child
            # process, our idle pool workers included, which would otherwise wait forever.
            util.Finalize(None, shutdown, exitpriority=50)
        _pools[max_workers] = created
        return created


def discard(broken: ProcessPoolExecutor) -> None:
    """Forget a pool whose worker died (the next `pool` call starts a fresh one)."""
    with _lock:
        for size, existing in list(_pools.items()):
            if existing is broken:
                del _pools[size]
    broken.shutdown(wait=True, cancel_futures=True)


def terminate() -> None:
    """Kill this process's pool workers now (an interrupted stage: their tasks are abandoned) and stop the
    forkserver; the next `pool` call starts fresh ones."""
    _run_shutdown_hooks()
    with _lock:
        pools = list(_pools.values())
        _pools.clear()
    for existing in pools:
        for process in list(getattr(existing, "_processes", {}).values()):
            with contextlib.suppress(Exception):
                process.kill()
        existing.shutdown(wait=False, cancel_futures=True)
    kill_forkserver()
    global _started_env
    _started_env = None


def kill_forkserver() -> None:
    """Kill this process's forkserver (it may still be serving the killed workers) and reap it."""
    server = forkserver._forkserver
    with server._lock:
        pid = server._forkserver_pid
        if pid is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, 0)
        with contextlib.suppress(OSError, TypeError):
            os.close(server._forkserver_alive_fd)
        server._forkserver_alive_fd = None
        _forget_forkserver(server)


def stop_forkserver() -> None:
    """Stop this process's forkserver, if it started one, and wait for it to exit."""
    server = forkserver._forkserver
    with server._lock:
        pid = server._forkserver_pid
        if pid is None:
            return
        os.close(server._forkserver_alive_fd)  # the server exits when it reads EOF here
        server._forkserver_alive_fd = None
        _reap(pid)
        _forget_forkserver(server)


def _reap(pid: int, grace_s: float = 10.0) -> None:
    """Wait for the forkserver to exit; kill it after `grace_s` (a process forked from this one before
    `_forget_in_forked_child` was registered, or by code that bypasses `os.fork`'s hooks, may still hold the
    pipe's other end, and the server would then wait for that process forever)."""
    deadline = time.monotonic() + grace_s
    with contextlib.suppress(ChildProcessError):
        while os.waitpid(pid, os.WNOHANG) == (0, 0):
            if time.monotonic() > deadline:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                return
            time.sleep(0.01)


def _forget_forkserver(server: Any) -> None:
    """After its process is reaped: remove the forkserver's socket file, so the next use starts a new one."""
    address = server._forkserver_address
    if address is not None and not util.is_abstract_socket_namespace(address):
        with contextlib.suppress(OSError):
            os.unlink(address)
    server._forkserver_address = None
    server._forkserver_pid = None


def _forget_in_forked_child() -> None:
    """In a process forked from this one (a torch DataLoader worker, a `fork` multiprocessing child): drop
    the copies of the parent's pools and of its end of the forkserver's lifeline pipe. Kept open, that copy
    keeps the parent's forkserver alive until the child exits, and the parent's `shutdown` would wait for
    it. The child starts its own forkserver if it needs workers."""
    global _lock, _started_env
    _lock = threading.RLock()  # another thread of the parent may have held it at the fork
    _pools.clear()
    _started_env = None
    server = forkserver._forkserver
    server._lock = threading.Lock()
    if server._forkserver_alive_fd is not None:
        with contextlib.suppress(OSError):
            os.close(server._forkserver_alive_fd)
    server._forkserver_alive_fd = None
    server._forkserver_address = None  # the parent's socket: the parent removes it
    server._forkserver_pid = None


os.register_at_fork(after_in_child=_forget_in_forked_child)


_shutdown_hooks: list[Callable[[], None]] = []


def on_shutdown(hook: Callable[[], None]) -> None:
    """Have `shutdown` and `terminate` call `hook` first: processes forked from the forkserver that outlive a
    task (sluice.runtime.budget's resident workers) end before the server, which reaps them with their CPU time."""
    if hook not in _shutdown_hooks:
        _shutdown_hooks.append(hook)


def _run_shutdown_hooks() -> None:
    for hook in list(_shutdown_hooks):
        hook()


def shutdown() -> None:
    """Stop this process's pools and forkserver and wait for every worker."""
    _run_shutdown_hooks()
    with _lock:
        pools = list(_pools.values())
        _pools.clear()
    for existing in pools:
        existing.shutdown(wait=True)
    stop_forkserver()
    global _started_env
    _started_env = None
