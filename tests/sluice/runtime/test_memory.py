"""sluice.runtime.memory: a decorated step runs with Arrow on the system allocator, restored when the outermost step ends."""

from __future__ import annotations

import pyarrow as pa

from sluice.runtime import memory


def test_steps_use_the_system_pool_and_restore_the_previous_one() -> None:
    before = pa.default_memory_pool()
    seen: list[str] = []

    @memory.releasing_memory
    def inner() -> str:
        seen.append(pa.default_memory_pool().backend_name)
        return "inner"

    @memory.releasing_memory
    def outer() -> str:
        seen.append(pa.default_memory_pool().backend_name)
        result = inner()
        seen.append(pa.default_memory_pool().backend_name)  # a nested step ending does not restore early
        return result

    assert outer() == "inner"
    assert seen == ["system"] * 3
    assert pa.default_memory_pool().backend_name == before.backend_name


def test_the_pool_is_restored_when_a_step_raises() -> None:
    before = pa.default_memory_pool().backend_name

    @memory.releasing_memory
    def failing() -> None:
        raise ValueError("bad partition")

    try:
        failing()
    except ValueError:
        pass
    else:
        raise AssertionError("the step's error was swallowed")
    assert pa.default_memory_pool().backend_name == before
    memory.release_free_memory()  # callable whatever the C library (a no-op without malloc_trim)
