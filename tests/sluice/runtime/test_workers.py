"""Warm local workers (sluice.runtime.workers): forked from a forkserver, they do not run the parent's main script
again, one pool serves successive executor calls, and a changed environment reaches the workers."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time

from sluice.runtime import workers
from sluice.runtime.compute import LocalPoolExecutor
from tests.conftest import PROJECT_ROOT


def worker_pid(_: int) -> int:
    return os.getpid()


def worker_env(name: str) -> str | None:
    return os.environ.get(name)


def test_workers_do_not_run_the_main_script_again(tmp_path):
    marker = tmp_path / "imports.log"
    script = tmp_path / "main_script.py"
    script.write_text(textwrap.dedent(f"""
        with open({str(marker)!r}, "a") as log:  # a top-level side effect, as an import of Dagster would be
            log.write("imported\\n")
        if __name__ == "__main__":
            from sluice.runtime.compute import LocalPoolExecutor
            from tests.sluice.runtime.test_workers import worker_pid
            print(len(set(LocalPoolExecutor(2).map(worker_pid, list(range(6))))))
    """))
    done = subprocess.run(
        [sys.executable, str(script)], cwd=PROJECT_ROOT, env={**os.environ, "PYTHONPATH": str(PROJECT_ROOT)},
        capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert 1 <= int(done.stdout.split()[-1]) <= 2  # the tasks ran in worker processes
    assert marker.read_text() == "imported\n"  # by the parent only


def test_successive_calls_reuse_the_workers():
    executor = LocalPoolExecutor(2)
    first = set(executor.map(worker_pid, list(range(6))))
    second = set(executor.map(worker_pid, list(range(6))))
    assert os.getpid() not in first
    assert second <= first


def test_a_changed_environment_reaches_the_workers(monkeypatch):
    executor = LocalPoolExecutor(2)
    monkeypatch.setenv("SLUICE_TEST_WORKER_ENV", "before")
    assert executor.map(worker_env, ["SLUICE_TEST_WORKER_ENV"] * 2) == ["before", "before"]
    monkeypatch.setenv("SLUICE_TEST_WORKER_ENV", "after")
    assert executor.map(worker_env, ["SLUICE_TEST_WORKER_ENV"] * 2) == ["after", "after"]


def test_a_multiprocessing_child_that_used_the_pool_exits(tmp_path):
    """Dagster's multiprocess executor runs each step in a multiprocessing child, whose exit joins every child
    process before atexit handlers run: the idle pool workers must be stopped before that join."""
    script = tmp_path / "step_process.py"
    script.write_text(textwrap.dedent("""
        import multiprocessing

        def step() -> None:
            from sluice.runtime.compute import LocalPoolExecutor
            from tests.sluice.runtime.test_workers import worker_pid
            assert len(LocalPoolExecutor(2).map(worker_pid, list(range(4)))) == 4

        if __name__ == "__main__":
            child = multiprocessing.get_context("spawn").Process(target=step)
            child.start()
            child.join(timeout=120)
            print("exited" if child.exitcode == 0 else f"hung or failed: {child.exitcode}")
            if child.is_alive():
                child.kill()
    """))
    done = subprocess.run(
        [sys.executable, str(script)], cwd=PROJECT_ROOT, env={**os.environ, "PYTHONPATH": str(PROJECT_ROOT)},
        capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split()[-1] == "exited", done.stdout + done.stderr[-2000:]


def test_shutdown_returns_while_a_forked_child_lives(tmp_path):
    """A process forked from this one (a torch DataLoader worker, a `fork` multiprocessing child) inherits the
    pipe whose end tells the forkserver to exit: stopping the forkserver must not wait for that child."""
    script = tmp_path / "forked_child.py"
    script.write_text(textwrap.dedent("""
        import os, signal, time
        from sluice.runtime import workers
        from sluice.runtime.compute import LocalPoolExecutor
        from tests.sluice.runtime.test_workers import worker_pid

        LocalPoolExecutor(2).map(worker_pid, list(range(4)))  # the forkserver runs
        child = os.fork()
        if child == 0:
            time.sleep(60)
            os._exit(0)
        started = time.monotonic()
        workers.shutdown()
        print(f"stopped in {time.monotonic() - started:.1f} s")
        os.kill(child, signal.SIGKILL)
        os.waitpid(child, 0)
    """))
    done = subprocess.run(
        [sys.executable, str(script)], cwd=PROJECT_ROOT, env={**os.environ, "PYTHONPATH": str(PROJECT_ROOT)},
        capture_output=True, text=True, timeout=50,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert float(done.stdout.split()[-2]) < 10, done.stdout


def test_a_forkserver_that_does_not_exit_is_killed_after_the_grace_period():
    stubborn = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    started = time.monotonic()
    workers._reap(stubborn.pid, grace_s=0.5)
    assert time.monotonic() - started < 5
    assert _reaped(stubborn.pid)  # killed and waited for


def _reaped(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False
