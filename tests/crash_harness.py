"""Child process of the crash tests: materialize one stage for one partition, so the parent can SIGKILL it.

    python -m tests.crash_harness CONFIG STAGE[,STAGE...] PARTITION

PARTITION is `source|snapshot`, a mix name, or `-` for the unpartitioned tokenizer. The child prints
`READY` once Dagster is imported and the snapshots are registered (an ephemeral instance), right before
the materialization starts, and `DONE` when it succeeded. With SLUICE_HARNESS_INSTANCE=1 it uses the
instance at $DAGSTER_HOME instead (the Postgres tests).
"""

from __future__ import annotations

import sys


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
