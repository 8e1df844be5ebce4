"""Freed memory goes back to the OS between the steps of a long in-process run.

A process that deduplicates partition after partition (`sluice.dedup.deduplicate_in_order`, scripts, the
in-process executor) frees each step's arrays when the step ends, but the allocators keep the pages:
Arrow's default pool (mimalloc) keeps them in the heaps of the Arrow threads that read the many small
Parquet files of a step, and glibc's malloc keeps freed heap pages until asked. Measured on
`benchmarks/dedup_scaling.py`, live memory (tracemalloc) stays flat from 4 to 64 partitions while the
resident memory kept between steps grows by ~60 MB, and the next step's peak comes on top of it
(peak VmHWM 370 -> 430 MB without this module, 351 -> 406 MB with it; malloc_trim alone: 354 -> 428).
`pyarrow.set_memory_pool` changes the pool of pyarrow's own calls only: Arrow C++ code that asks for its
default pool (e.g. inside the Parquet reader) stays on mimalloc, so part of the retention remains.

`releasing_memory` (a decorator of such steps): Arrow allocations made during the step go through the
system allocator (`pyarrow.system_memory_pool`; buffers keep the pool they came from, so mixing is safe),
and when the outermost step ends the C heap's free pages are returned (`malloc_trim`, glibc only; a no-op
elsewhere). Process-wide while a step runs: other threads' Arrow allocations use the system pool too.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import threading
from collections.abc import Callable
from typing import Any, TypeVar

import pyarrow as pa

F = TypeVar("F", bound=Callable[..., Any])

_lock = threading.Lock()
_depth = 0
_previous: pa.MemoryPool | None = None


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    name = ctypes.util.find_library("c")
    try:
        return ctypes.CDLL(name).malloc_trim if name else None
    except (OSError, AttributeError):  # not glibc (musl, macOS): nothing to trim
        return None


def release_free_memory() -> None:
    """Return the C heap's free pages to the OS (glibc's malloc_trim; a no-op elsewhere)."""
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


def _enter() -> None:
    global _depth, _previous
    with _lock:
        if _depth == 0:
            _previous = pa.default_memory_pool()
            pa.set_memory_pool(pa.system_memory_pool())
        _depth += 1


def _exit() -> None:
    global _depth, _previous
    with _lock:
        _depth -= 1
        outermost = _depth == 0
        if outermost and _previous is not None:
            pa.set_memory_pool(_previous)
            _previous = None
    if outermost:
        release_free_memory()


def releasing_memory(step: F) -> F:
    """Run `step` with Arrow on the system allocator and return the freed heap when it ends (see above)."""

    @functools.wraps(step)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        _enter()
        try:
            return step(*args, **kwargs)
        finally:
            _exit()

    return wrapper  # type: ignore[return-value]
