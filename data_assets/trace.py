"""`trace_batch_job`: `sluice trace` from the Dagster UI (Launchpad run config), the trace as run metadata.

    ops:
      trace_batch:
        config: {mix: default, step: 1200, batch_size: 8, world_size: 64}
        # or {checkpoint: /ckpt/step-1200.pt, step: 1250}, {provenance: [/spikes/step-1250-rank*.json]},
        #    {doc_ids: ["web/2026-01/a.warc.gz#12"]}; ranks: [0, 3]; margin: 0.1; measures: true

The op writes trace.json / .parquet / .md under batch_traces/mix=<mix>/<label>/, attaches the Markdown table
to its output and records an observation of the traced `mixed_dataset` partition (so the mix's page lists
its traces).
"""


from dagster import AssetKey, AssetObservation, Config, MetadataValue, OpExecutionContext, Output, job, op
from pydantic import Field

from resources import SluiceSettings


class TraceConfig(Config):
    """Run config of `trace_batch` (the options of `sluice trace`)."""

    mix: str | None = Field(None, description="the mix (default: the first in the config)")
    split: str = Field("train", description="train | validation")
    step: int | None = Field(None, description="the global step (with a checkpoint: default its next step)")
    batch_size: int | None = Field(None, description="samples per rank per step, as the loader had")
    world_size: int = Field(1, description="ranks, as the loader had")
    ranks: list[int] | None = Field(None, description="trace only these ranks (default: every rank)")
    seed: int | None = Field(None, description="the loader's seed (default: the checkpoint's, else the mix's)")
    checkpoint: str | None = Field(None, description="a loader checkpoint file (JSON state, or a torch/JSON file with 'loader')")
    provenance: list[str] = Field(default_factory=list, description="saved batch provenance JSON files (globs allowed)")
    doc_ids: list[str] = Field(default_factory=list, description="trace these documents (no batch)")
    margin: float = Field(0.1, description="relative distance to a threshold that counts as near")
    measures: bool = Field(True, description="replay cleaning to recompute the filter values")


@op(name="trace_batch", description="Trace a training batch (or documents) back to the crawl; writes JSON / Parquet / Markdown.")
def trace_batch_op(context: OpExecutionContext, config: TraceConfig, settings: SluiceSettings) -> Output[dict]:
    from data_assets.trace_cli import run_trace

    trace, written = run_trace(settings.path, config.model_dump())
    context.log.info(trace.table())
    summary = {
        "mix": trace.meta["mix"], "label": trace.meta["label"], "documents": len(trace.documents), "segments": len(trace.segments),
        "near_threshold": sum(1 for doc in trace.documents if doc.get("near_thresholds")), "files": written,
    }
    metadata = {
        "trace": MetadataValue.md(trace.markdown()),
        "documents": len(trace.documents),
        "segments": len(trace.segments),
        "documents_near_a_threshold": summary["near_threshold"],
        "seconds": round(trace.meta["seconds"], 3),
        "trace_json": MetadataValue.path(written["json"]),
        "trace_parquet": MetadataValue.path(written["parquet"]),
    }
    context.log_event(AssetObservation(asset_key=AssetKey("mixed_dataset"), partition=trace.meta["mix"],
                                       metadata={"batch_trace": MetadataValue.md(trace.markdown(max_rows=50)), "label": trace.meta["label"],
                                                 "trace_json": MetadataValue.path(written["json"])}))
    return Output(summary, metadata=metadata)


@job(name="trace_batch_job", description="Which documents a training batch held, where they came from, why the filters kept them.")
def trace_batch_job() -> None:
    trace_batch_op()
