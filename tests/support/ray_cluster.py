"""A two-node Ray cluster on 127.0.0.1 for the node-fault tests: `ray start --head` and a second
`ray start --address=...` as separate processes (two raylets), every port chosen free.

`kill_worker_node()` SIGKILLs the second node's raylet and its worker processes, as a machine failure
would. `stop()` ends only this cluster's processes (found by its private temp folder), never others'.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.s3_server import free_ports
from tests.conftest import PROJECT_ROOT


def _ray() -> str:
    return str(Path(sys.executable).parent / "ray")


def _pids_with(fragment: str, also: str = "") -> list[int]:
    """Processes whose command line holds `fragment` (and `also`)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if fragment in cmdline and also in cmdline:
            pids.append(int(entry.name))
    return pids


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(stat[1]) == pid:
                found.append(int(entry.name))
    return found


class RayCluster:
    def __init__(self, head_cpus: int = 1, worker_cpus: int = 2) -> None:
        self.temp = Path(tempfile.mkdtemp(prefix="rs-", dir="/tmp"))  # short: Ray's socket paths are length-limited
        self.head_cpus = head_cpus
        self.worker_cpus = worker_cpus
        ports = free_ports(12)
        self.gcs_port = ports[0]
        self.head_ports, self.worker_ports = ports[1:6], ports[6:11]
        self.env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "disabled", "PYTHONPATH": str(PROJECT_ROOT)}

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.gcs_port}"

    @staticmethod
    def _port_flags(ports: list[int]) -> list[str]:
        names = ["--node-manager-port", "--object-manager-port", "--metrics-export-port", "--dashboard-agent-listen-port", "--runtime-env-agent-port"]
        return [f"{name}={port}" for name, port in zip(names, ports, strict=True)]

    def _ray_start(self, args: list[str]) -> None:
        done = subprocess.run([_ray(), "start", *args], capture_output=True, text=True, env=self.env, cwd=PROJECT_ROOT, timeout=120)
        if done.returncode != 0:
            raise RuntimeError(f"ray start {' '.join(args)} failed:\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}")

    def start(self) -> RayCluster:
        common = ["--node-ip-address=127.0.0.1", "--disable-usage-stats"]
        self._ray_start(
            ["--head", f"--port={self.gcs_port}", f"--num-cpus={self.head_cpus}", "--include-dashboard=false",
             f"--temp-dir={self.temp}", f"--ray-client-server-port={free_ports(1)[0]}", *common, *self._port_flags(self.head_ports),
             # Notice a dead node within ~1 s (default ~30 s), so the run that lost it can say so.
             '--system-config={"health_check_period_ms": 300, "health_check_failure_threshold": 3, "health_check_timeout_ms": 300}']
        )
        self._ray_start([f"--address={self.address}", f"--num-cpus={self.worker_cpus}", *common, *self._port_flags(self.worker_ports)])
        return self

    def worker_raylet(self) -> int:
        # One read of each /proc entry (_pids_with): a second read of a process that exited in between would raise.
        [pid] = _pids_with(f"--node_manager_port={self.worker_ports[0]}", also="raylet")
        return pid

    def kill_worker_node(self) -> int:
        """SIGKILL the second node (its raylet and everything it started); returns how many processes."""
        raylet = self.worker_raylet()
        victims = [raylet, *_children(raylet)]
        for pid in victims:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        return len(victims)

    def stop(self) -> None:
        for pid in _pids_with(str(self.temp)) + _pids_with(f"--address={self.address}") + _pids_with(f"127.0.0.1:{self.gcs_port}"):
            if pid != os.getpid():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        time.sleep(0.5)
        shutil.rmtree(self.temp, ignore_errors=True)

    def __enter__(self) -> RayCluster:
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc: object) -> None:
        self.stop()
