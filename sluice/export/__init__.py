"""Export one split of a built mix as Parquet, WebDataset or MosaicML MDS shards, for other training stacks.

    export_split(store, "default", "train", "mds", open_store("s3://bucket/exports/default"))

Rows: sample r of an export is the r-th sample the training loader (`sluice.loader`) yields at world size 1
in epoch 0 with the export's seed (default: the mix's seed, as `TrainingLoaderResource`), packed as the
loader packs it. Every row has the same fields in every format:

    sample_id    int64       the sample's index in the split (its natural position: sort by it to undo the shuffle)
    input_ids    int32 [L]   tokens [sample_id * L, sample_id * L + L) of the split's stream
    labels       int32 [L]   the next token of each input (-100 at document boundaries with mask_document_boundaries)
    cu_seqlens   int32 [k+1] 0, where each further document starts inside the sample, L
    doc_ids      str [k]     the document of each of the k segments (tokenized_shards' doc_id)

Metadata, in the Parquet schema (key `sluice`) and in every export's `_manifest.json`: mix name, mix version
(SHA-256 of its manifest), index SHA-256, tokenizer SHA-256, vocabulary size, EOS id, sequence length, order
(seed, epoch, world size), column descriptions, and, in the manifest, each file's rows, bytes and SHA-256.

Layout: `<destination>/<split>/` holds `part-NNNNN.parquet` (Parquet), `shard-NNNNNN.tar` (WebDataset) or
`shard.NNNNN.mds` + `index.json` (MDS), and `_manifest.json`. Files are cut at `shard_bytes` of
uncompressed sample data and each is published whole (temp + rename, or one S3 upload); MDS's
`index.json`, then the manifest come last, and a re-export first withdraws the old ones, then deletes the
files its manifest no longer lists. A folder holding other files is refused. Memory stays bounded: samples
are produced a block of ~2^18 tokens at a time, one shard is open, and document ids are read from a
scratch table (`sluice.export.samples`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sluice.export.errors import ExportError

if TYPE_CHECKING:
    from sluice.export.run import FORMATS, SHARD_BYTES, export_split

__all__ = ["FORMATS", "SHARD_BYTES", "ExportError", "export_split"]


def __getattr__(name: str) -> object:
    # The writers need the loader (torch); the code location imports this package for ExportError alone.
    if name in ("FORMATS", "SHARD_BYTES", "export_split"):
        from sluice.export import run

        return getattr(run, name)
    raise AttributeError(f"module 'sluice.export' has no attribute {name!r}")
