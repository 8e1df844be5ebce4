"""Token-weighted data mixes over tokenized shards, written as an index (no copy of the tokens).

A mix gives each component -- a source (`web`) or a source's documents in one language (`web:en`) -- a
share of a token budget. A share of each source's documents (chosen by a hash of the document id, so the
same ones for every mix and rebuild) is held out for validation, and documents flagged by decontamination
(`decontamination` partitions, `sluice.dedup.decontaminate`) are left out of both splits. Each component repeats
its documents whole for floor(E) epochs and takes a seeded fraction of them for the rest, the last document
cut so the target is met exactly; E may not exceed `max_epochs` (`MixError` names the component). Copies
are placed by seeded keys so every component is spread evenly over the stream and no two copies of one
document share a sample (`sluice.mix.plan`, `sluice.mix.order`). Same shards + config -> same bytes.

Build cost grows with the documents of the mix's sources and the ranges of the mix, in bounded memory: one
scan over the shards' `.idx` / `.docs.parquet` files (numpy columns, per shard), spill files, and an external
sort by key (`sluice.mix.scan`, `sluice.mix.order`).

Output (one `mixed_dataset` partition, `mix=<name>`):
    mixed_dataset/mix=<name>/train.parquet, validation.parquet    the ranges as a Parquet dataset: split, offset
                                (stream position), shard, doc, start, length, component, copy
    mixed_dataset/mix=<name>/_manifest.json    the shard table's name and size, components (weight, target, tokens, epochs, validation,
                                removed), splits {train, validation: {index, ranges_count, tokens, samples}},
                                dtype, seed, sequence_length, check values
    mixed_index/mix=<name>/train.idx, validation.idx    what the loader reads (format: `sluice.mix.index`)
    mixed_index/mix=<name>/shards.parquet    the shards the indexes name, one row per shard id, read by row
                                group (`sluice.mix.shard_table`)
    mixed_contaminated/mix=<name>/contaminated.parquet  documents left out: doc_id, source, partition, matched_ngrams
A split's token stream is its ranges concatenated; sample i is stream[i*L : i*L + L + 1] (inputs and labels
shifted by one), L = sequence_length. Every range is one document or the cut head of one, so the range
boundaries inside a sample are its document boundaries.
"""

from sluice.mix.build import BLOCKED, CONTAMINATED, INDEX, MIXED, build_mix, index_prefix, mix_prefix
from sluice.mix.plan import MixError, targets, validation_mask
from sluice.mix.scan import read_docs_table
from sluice.mix.shard_table import ShardTable
from sluice.mix.stream import iter_split_tokens, split_index

__all__ = [
    "BLOCKED",
    "CONTAMINATED",
    "INDEX",
    "MIXED",
    "MixError",
    "ShardTable",
    "build_mix",
    "index_prefix",
    "iter_split_tokens",
    "mix_prefix",
    "read_docs_table",
    "split_index",
    "targets",
    "validation_mask",
]
