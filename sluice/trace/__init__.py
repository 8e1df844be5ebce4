"""From a training batch back to the crawl: which documents a batch held, where they came from, why the
filters kept them (`sluice trace`, the `trace_batch` Dagster job).

    from sluice.trace import BatchSpec, trace_batch
    trace = trace_batch(store, config, BatchSpec(mix="default", step=1234, batch_size=8, world_size=64))
    print(trace.table()); trace.write(store, "batch_traces/mix=default/step=1234")

What names the batch (`BatchSpec`), any of:
- a step alone, with the loader's batch size, world size (and seed, default the mix's): the loader's order
  is a pure function of seed and position, so global batch s is positions [s G, (s + 1) G);
- a loader checkpoint (`TrainingLoader.state_dict()`): its position, step counter and skip list, so step s
  (default: the next one) is global batch s - step of the kept stream from there (`sluice.loader.skip`);
- a saved batch provenance (`provenance` rows and `positions`, what a loss-spike hook writes);
- document ids (the documents alone, without a batch).
Ranks: all of them (the global batch), or the ones listed.

For each document: the segments of it the batch holds (rank, row, stream position, token span), its source,
snapshot, URL, raw file and record (ordinal, WARC-Record-ID / JSONL id), fetch date, language and score,
quality / perplexity / toxicity / code-share values, every filter statistic recomputed from its raw record
with the ones near a threshold flagged (`sluice.trace.measures`), its global dedup cluster and size (every
indexed partition, later copies included: `sluice.dedup.lookup`), its token count and a decoded preview of
the traced span. Output: a text table, JSON, Parquet and Markdown (`Trace`).

Cost: the positions are computed, not searched; each sample is one probe of the mix index; each document is
read from one row group of its shard's docs, deduplicated part and raw part (`sluice.mix.lineage`), its cluster by
probes of the dedup index. Nothing grows with the number of documents or partitions of the mix
(benchmarks/trace_lookup.py).
"""

from sluice.trace.batch import BatchSpec, Segment, batch_segments
from sluice.trace.report import Trace, trace_batch, trace_documents

__all__ = ["BatchSpec", "Segment", "Trace", "batch_segments", "trace_batch", "trace_documents"]
