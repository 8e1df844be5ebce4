"""`whatif_report`: `sluice whatif` from the Dagster UI (Launchpad run config), its report published as a
materialization of the `whatif_report` asset with the answer as metadata.

    ops:
      whatif:
        config: {other_config: /path/other.yaml, samples: 3}   # out: a local folder (default: beside the storage root's data)

The op compares the other config's cleaning settings with the code location's config from
cleaned_attributes (sluice.whatif.engine, no run of the graph), writes summary.json, flips.parquet, index.html and
report.png, and records them with the flips table, the totals and what could not be answered.
"""

from pathlib import Path

from dagster import AssetKey, AssetMaterialization, Config, MetadataValue, OpExecutionContext, Output, job, op
from pydantic import Field

from resources import SluiceSettings

ASSET = "whatif_report"


class WhatIfConfig(Config):
    """Run config of `whatif` (the options of `sluice whatif`)."""

    other_config: str = Field(description="the other config file (its cleaning settings are compared with the current ones)")
    samples: int = Field(3, description="documents per flip class shown in the report")
    out: str | None = Field(None, description="local folder for the report (default: whatif/<other config's name>/ in a local storage root)")


def _out(settings: SluiceSettings, config: WhatIfConfig) -> str:
    if config.out:
        return config.out
    from sluice.io.storage import is_s3

    root = settings.config.storage.root
    if is_s3(root):
        raise ValueError("the storage root is on S3: give `out`, a local folder for the report")
    return str(Path(root) / "whatif" / Path(config.other_config).stem)


@op(name="whatif", description="What another config's cleaning settings would keep and drop, from cleaned_attributes (no run).")
def whatif_op(context: OpExecutionContext, config: WhatIfConfig, settings: SluiceSettings) -> Output[dict]:
    import json
    import tempfile

    from sluice.config import load_config
    from sluice.runtime.compute import make_executor
    from sluice.whatif.engine import what_if
    from sluice.whatif.report import write

    other = load_config(config.other_config)
    with tempfile.TemporaryDirectory() as scratch:
        result = what_if(settings.config, other, scratch, make_executor(settings.config.compute, report=context.log.warning))  # one task per attributes file
        table = result.table(config.samples)
        written = write(result, _out(settings, config), config.samples)
    context.log.info(table)
    summary = json.loads(Path(written["summary"]).read_text())
    metadata = {
        "other_config": config.other_config,
        "flipped_documents": summary["flipped_documents"],
        "kept_before": sum(t["kept_before"] for t in summary["totals"]),
        "kept_after": sum(t["kept_after"] for t in summary["totals"]),
        "unanswered_sources": len(summary["unanswered"]),
        "table": MetadataValue.md(f"```\n{table}\n```"),
        "report": MetadataValue.path(written["report"]),
        "flips": MetadataValue.path(written["flips"]),
        "summary": MetadataValue.path(written["summary"]),
    }
    context.log_event(AssetMaterialization(asset_key=AssetKey(ASSET), metadata=metadata))
    return Output({key: value for key, value in metadata.items() if isinstance(value, int | str)}, metadata=metadata)


@job(name="whatif_report", description="sluice whatif: another config's cleaning decisions from the stored statistics, as a report.")
def whatif_report() -> None:
    whatif_op()
