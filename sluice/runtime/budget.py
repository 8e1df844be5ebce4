"""A CPU-time budget per document and step: per-document work runs in a child process that is killed when
one step of one document overruns, and a fresh child resumes after that document; a child that finished its
work serves the process's next call.

Why a process: the loops that run away on hostile pages are in C (a regular expression backtracking, an
HTML parser on a 40,000-deep tree), where no Python signal handler or thread can stop them; only the
operating system can. Why CPU time: on a shared machine wall time depends on the neighbours, CPU time on the
document (and it does not count time spent waiting on a helper process with its own budget).

Protocol. The parent calls `supervise(work, args, budget_s, on_chunk)`. The child runs
`work(args, start, skips, heartbeat, send)`: it processes items (documents) from index `start` in order,
calls `heartbeat.item(i)` before item i and `heartbeat.stage(k)` before stage (step) k of it, and sends
`("chunk", next_item, payload)` now and then and `("done", payload)` at the end; an item listed in `skips`
(index -> `Skip`) must not be processed but reported as skipped (the work function knows how). The parent
waits for messages and every `poll_s` reads the heartbeat: when the sequence number has not moved while the
child spent more than `budget_s` of CPU time (from /proc; wall time where there is none), it kills the
child (and the child's own helper processes), adds the item to `skips` and starts a new child at the first
item not yet delivered in a chunk. Items between that point and the killed one are processed again, so
what `on_chunk` receives is the same, in the same order, as from a run without the kill. A child that dies
by itself (a crash in C code, the kernel's OOM killer) is handled the same way (`Skip.kind == "crashed"`);
an exception in `work` is sent back and raised here, as it would have been in-process.

A child that finished its work is not ended: it waits, resident, for the next `supervise` call of the same
process (the next part file a pool worker cleans), so a fresh process and its first-use costs are paid once
per worker, not once per task. It exits by itself after IDLE_EXIT_S without one (the stage is over: its
memory goes back while the worker runs other stages' tasks). One that was killed, crashed or raised is
ended; `retire()` ends the idle ones (at exit, and for tests that change what a new child runs).

The heartbeat is three 64-bit integers in shared memory (sequence, item, stage): a few hundred nanoseconds
per step, so the fast path stays fast; the child is forked from a forkserver that has the modules imported.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

CHILD_START_TIMEOUT_S = 300.0  # a child that never beats (imports, model loading) fails the task after this
EXIT_TIMEOUT_S = 10.0  # a child that has sent "done" gets this long to exit before it is killed
IDLE_EXIT_S = 5.0  # a resident child with no next job within this long exits (a worker's parts follow each other at once)
_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


@dataclass(frozen=True)
class Skip:
    """An item the child must not process again: it overran its budget, or its child died on it."""

    kind: str  # "timeout" | "crashed"
    stage: int  # the stage it was in
    detail: str


class Heartbeat:
    """What the child is doing: (sequence number, item, stage) in shared memory."""

    def __init__(self, shared: Any = None) -> None:
        self.shared = shared if shared is not None else multiprocessing.RawArray("q", 3)

    def item(self, index: int) -> None:
        self.shared[1] = index

    def stage(self, index: int) -> None:
        shared = self.shared
        shared[2] = index
        shared[0] += 1

    def read(self) -> tuple[int, int, int]:
        shared = self.shared
        return shared[0], shared[1], shared[2]


class NoHeartbeat:
    """The heartbeat of in-process runs (no budget): does nothing."""

    def item(self, index: int) -> None:
        pass

    def stage(self, index: int) -> None:
        pass


class ChildError(RuntimeError):
    """The work function raised in the child: the message's first line is the root cause (`Type: message`,
    where in the work), the lines after it the child's traceback."""


def error_summary(error: BaseException) -> str:
    """`Type: first line of the message` of an exception (what a one-line failure report shows)."""
    lines = str(error).strip().splitlines()
    return f"{type(error).__name__}: {lines[0]}" if lines else type(error).__name__


def cpu_seconds(pid: int, children: bool = False) -> float | None:
    """CPU time (user + system) of a process so far, from /proc, with `children` also that of its children
    it has waited for; None where there is no /proc."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stream:
            fields = stream.read().rsplit(b")", 1)[1].split()
    except OSError:
        return None
    # utime, stime, cutime, cstime: fields 14 to 17 of stat (11 to 14 after the command name)
    return sum(int(value) for value in fields[11 : 15 if children else 13]) / _TICKS


def _children(pid: int) -> list[int]:
    """Direct child processes of `pid` (Linux /proc; empty elsewhere)."""
    found = []
    try:
        entries = os.listdir("/proc")
    except OSError:
        return found
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as stream:
                fields = stream.read().rsplit(b")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.append(int(entry))
    return found


START_METHOD: str | None = None  # None: forkserver where there is one, else spawn ("fork" lets tests patch steps)


def _context() -> Any:
    if START_METHOD is not None:
        return multiprocessing.get_context(START_METHOD)
    # The warm forkserver (its children do not import the main script again), spawn where there is none.
    from sluice.runtime import workers

    # The process's forkserver is shared with sluice.runtime.workers' pool, so both preload one list (workers.PRELOAD).
    return workers.context()


def _child_main(shared: Any, connection: Any) -> None:
    """A budgeted worker process: runs the jobs its parent sends, one at a time, until the parent closes the
    pipe (or dies). After each job it sends its CPU time since the previous one (a forkserver's child is
    reaped by the forkserver as soon as it exits, so the parent cannot count on reading /proc/<pid>/stat
    afterwards)."""
    heartbeat = Heartbeat(shared)
    reported = 0.0
    try:
        while True:
            try:
                if not connection.poll(IDLE_EXIT_S):
                    return  # no next part soon (the stage is over): give the memory back
                work, args, start, skips = connection.recv()
            except (EOFError, OSError):
                return
            try:
                work(args, start, skips, heartbeat, connection.send)
            except BaseException as error:  # noqa: BLE001 - reported to the parent, which raises it
                with contextlib.suppress(OSError):
                    connection.send(("error", error_summary(error), traceback.format_exc()))
                sys.exit(1)
            times = os.times()
            spent = times.user + times.system + times.children_user + times.children_system
            connection.send(("cpu", spent - reported))
            reported = spent
    finally:
        with contextlib.suppress(OSError):
            connection.close()


class _NotStarted(Exception):
    """The worker process exited before it began the job (a resident one may have died while idle)."""


class _Child:
    """A budgeted worker process and its heartbeat. It lives across jobs (`begin`) until it is killed, fails
    or is retired: the fork, the first-use costs of the steps and the copy-on-write faults of a fresh process
    are paid once per worker, not once per task."""

    def __init__(self, context: Any) -> None:
        _hook_retire()
        self.heartbeat = Heartbeat(context.RawArray("q", 3))
        own, theirs = context.Pipe()
        self.process = context.Process(target=_child_main, args=(self.heartbeat.shared, theirs), daemon=True)
        self.process.start()
        theirs.close()
        self.connection = own
        self.owner = os.getpid()
        self.method = context.get_start_method()
        self.jobs = 0

    def begin(self, work: Callable[..., None], args: Any, start: int, skips: dict[int, Skip]) -> None:
        shared = self.heartbeat.shared
        shared[0], shared[1], shared[2] = 0, start, -1
        self.cpu_base = (cpu_seconds(self.process.pid, children=True) or 0.0) if self.jobs else 0.0
        self.cpu_at_kill: float | None = None
        self.cpu_reported: float | None = None
        self.started = time.monotonic()
        self.jobs += 1
        self.connection.send((work, args, start, dict(skips)))

    def spent(self) -> float | None:
        """CPU seconds of the current job (with the helper processes the worker waited for)."""
        if self.cpu_reported is not None:
            return self.cpu_reported
        total = self.cpu_at_kill if self.cpu_at_kill is not None else cpu_seconds(self.process.pid, children=True)
        return None if total is None else max(0.0, total - self.cpu_base)

    def kill(self) -> None:
        """Kill the child and its helper processes, and wait for it."""
        pid = self.process.pid
        helpers = _children(pid) if pid else []
        with contextlib.suppress(OSError):
            self.process.kill()
        for helper in helpers:
            with contextlib.suppress(OSError):
                os.kill(helper, signal.SIGKILL)
        self.process.join()

    def close(self) -> None:
        """End the child: it exits when its pipe closes (killed if it has not within EXIT_TIMEOUT_S)."""
        with contextlib.suppress(OSError):
            self.connection.close()
        self.process.join(timeout=EXIT_TIMEOUT_S)
        if self.process.is_alive():
            self.kill()


_idle: list[_Child] = []  # this process's resident workers between jobs
_idle_lock = threading.Lock()


def _acquire(context: Any) -> _Child:
    """An idle resident worker of this process started the same way, or a new one."""
    with _idle_lock:
        while _idle:
            child = _idle.pop()
            if child.owner != os.getpid():
                continue  # inherited through a fork: the parent's, not ours
            if child.method == context.get_start_method() and child.process.is_alive():
                return child
            child.close()
    return _Child(context)


def _release(child: _Child) -> None:
    with _idle_lock:
        _idle.append(child)


def retire() -> None:
    """End this process's idle resident workers (at exit; tests that change what a new worker runs)."""
    with _idle_lock:
        children = [child for child in _idle if child.owner == os.getpid()]
        _idle.clear()
    for child in children:
        child.close()


_hooked: int | None = None  # the process that registered retire() to run before its forkserver stops


def _hook_retire() -> None:
    """End the resident workers before the forkserver they were forked from stops (it reaps them, so their
    CPU time is counted): at `workers.shutdown` / `terminate`, and at exit (a finalizer that runs before the
    worker pool's and the forkserver's)."""
    global _hooked
    if _hooked == os.getpid():
        return
    _hooked = os.getpid()
    from multiprocessing import util

    from sluice.runtime import workers

    workers.on_shutdown(retire)
    util.Finalize(None, retire, exitpriority=200)


@dataclass
class Supervised:
    """The outcome of `supervise`: the work's final payload, the items it skipped, and the CPU seconds its
    workers spent (with their helper processes; None where it could not be read)."""

    payload: Any
    skips: dict[int, Skip]
    worker_cpu_s: float | None


def supervise(
    work: Callable[..., None],
    args: Any,
    budget_s: float,
    on_chunk: Callable[[Any], None],
    stage_name: Callable[[int], str] = str,
) -> Supervised:
    """Run `work` under the budget (see the module docstring)."""
    context = _context()
    poll_s = min(0.25, max(0.01, budget_s / 4))
    skips: dict[int, Skip] = {}
    delivered = 0  # items before this index were delivered in chunks
    cpu: float | None = 0.0
    while True:
        child = _acquire(context)
        try:
            child.begin(work, args, delivered, skips)
            outcome = _watch(child, budget_s, poll_s, on_chunk, stage_name)
        except (_NotStarted, BrokenPipeError) as error:
            child.close()
            if child.jobs > 1:
                continue  # a resident worker that had died while idle: a new one takes the job
            raise ChildError(str(error) or "the budgeted worker process exited before starting its work") from None
        except BaseException:
            child.kill()
            child.close()
            raise
        spent = child.spent()
        cpu = cpu + spent if cpu is not None and spent is not None else None
        kind, value, next_item = outcome
        if kind == "done":
            _release(child)
            return Supervised(value, skips, cpu)
        child.close()
        delivered = next_item
        skips[value[0]] = value[1]


def _receive_cpu(child: _Child) -> None:
    """The CPU seconds a finished child reports after "done" (None if it exits without)."""
    with contextlib.suppress(EOFError, OSError):
        if child.connection.poll(EXIT_TIMEOUT_S):
            message = child.connection.recv()
            if message[0] == "cpu":
                child.cpu_reported = message[1]


def _watch(child: _Child, budget_s: float, poll_s: float, on_chunk: Callable[[Any], None], stage_name: Callable[[int], str]):
    """Until the child is done or stuck: ("done", payload, _) or ("skip", (item, Skip), next item to run)."""
    delivered = child.heartbeat.shared[1]
    seen_sequence, cpu_at_sequence, wall_at_sequence = -1, 0.0, time.monotonic()
    while True:
        try:
            if child.connection.poll(poll_s):
                message = child.connection.recv()
                if message[0] == "chunk":
                    _, delivered, payload = message
                    on_chunk(payload)
                    continue
                if message[0] == "done":
                    _receive_cpu(child)
                    return "done", message[1], delivered
                _, item, stage = child.heartbeat.read()
                summary, trace = message[1], message[2]
                raise ChildError(f"{summary} (in the worker, item {item}, step {stage_name(stage)})\n{trace}")
        except (EOFError, OSError):
            pass  # the child is gone: decided below
        sequence, item, stage = child.heartbeat.read()
        if not child.process.is_alive():
            child.process.join()
            if sequence == 0:
                raise _NotStarted(f"the budgeted worker process exited ({child.process.exitcode}) before starting its work")
            code = child.process.exitcode
            return "skip", (item, Skip("crashed", stage, f"the worker process died (exit code {code}) in step {stage_name(stage)}")), delivered
        now = time.monotonic()
        if sequence == 0:
            if now - child.started > CHILD_START_TIMEOUT_S:
                raise ChildError(f"the budgeted worker process did not start its work within {CHILD_START_TIMEOUT_S} s")
            continue
        cpu = cpu_seconds(child.process.pid)
        if sequence != seen_sequence:
            seen_sequence, cpu_at_sequence, wall_at_sequence = sequence, cpu if cpu is not None else 0.0, now
            continue
        spent = (cpu - cpu_at_sequence) if cpu is not None else now - wall_at_sequence
        if spent > budget_s:
            child.cpu_at_kill = cpu_seconds(child.process.pid, children=True)
            child.kill()
            # Chunks the child finished sending before it was killed still count.
            with contextlib.suppress(EOFError, OSError):
                while child.connection.poll(0):
                    message = child.connection.recv()
                    if message[0] != "chunk":
                        break
                    _, delivered, payload = message
                    on_chunk(payload)
            measure = "CPU" if cpu is not None else "wall-clock"
            detail = f"step {stage_name(stage)} spent more than {budget_s:g} s of {measure} time on this document"
            return "skip", (item, Skip("timeout", stage, detail)), delivered
