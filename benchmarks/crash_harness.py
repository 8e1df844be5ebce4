"""Child process of the crash tests and benchmarks/resume.py: materialize one stage for one partition, so
the parent can SIGKILL it. (Beside the benchmarks, which use it too; tests import it from here.)

    python -m benchmarks.crash_harness CONFIG STAGE[,STAGE...] PARTITION

PARTITION is `source|snapshot`, a mix name, or `-` for the unpartitioned tokenizer. The child prints
`READY` once Dagster is imported and the snapshots are registered (an ephemeral instance), right before
the materialization starts, and `DONE` when it succeeded. With SLUICE_HARNESS_INSTANCE=1 it uses the
instance at $DAGSTER_HOME instead (the Postgres tests).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path


def group_alive(pgid: int) -> list[int]:
    """Processes of process group `pgid` that still run (zombies excluded): a process SIGKILLed inside an
    uninterruptible write (fsync on a busy disk) lives on until the write returns."""
    alive = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] != "Z" and int(fields[2]) == pgid:
            alive.append(int(entry.name))
    return alive


def wait_group_gone(pgid: int, timeout_s: float = 120.0) -> None:
    """Wait until every process of a killed process group has exited, so what it wrote is final."""
    deadline = time.monotonic() + timeout_s
    while group_alive(pgid):
        if time.monotonic() > deadline:
            raise TimeoutError(f"processes {group_alive(pgid)} of killed group {pgid} still run after {timeout_s} s")
        time.sleep(0.05)


def main(argv: list[str]) -> int:
    config, stage, partition = argv
    import os

    from dagster import DagsterInstance, materialize

    from data_assets.cli import register_snapshots
    from data_assets.definitions import ASSETS, build_resources
    from data_assets.partitions import multi_key

    resources = build_resources(config)
    # SLUICE_HARNESS_INSTANCE=1: the instance at $DAGSTER_HOME (e.g. Postgres-backed), else an ephemeral one.
    shared = os.environ.get("SLUICE_HARNESS_INSTANCE") == "1"
    with DagsterInstance.get() if shared else DagsterInstance.ephemeral() as instance:
        register_snapshots(instance, resources)
        if partition == "-":
            key = None
        elif "|" in partition:
            source, snapshot = partition.split("|")
            key = multi_key(source, snapshot)
        else:
            key = partition
        print("READY", flush=True)
        result = materialize(
            ASSETS,
            selection=stage.split(","),
            partition_key=key,
            instance=instance,
            resources=resources,
            run_config={"loggers": {"console": {"config": {"log_level": "WARNING"}}}},
        )
    print("DONE" if result.success else "FAILED", flush=True)
    return 0 if result.success else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
