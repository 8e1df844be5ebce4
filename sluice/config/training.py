"""Everything after cleaning: tokenizer, compute, dedup, blocklist, checks, export and the training mixes."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, field_validator

from sluice.config.base import (
    _Model,
    check_name,
)


class TokenizerSettings(_Model):
    path: str | None = None  # an existing tokenizer.json; None = train byte-level BPE on `train_sources`
    vocab_size: int = Field(8192, ge=256, le=1 << 22)
    train_sources: tuple[str, ...] = ()  # empty = every source
    # BPE training reads the deduplicated documents of `train_sources` in the global partition order, up to
    # both bounds. HF's BPE trainer holds every distinct word it is given (its memory grows with the text
    # read), so `max_training_bytes` (UTF-8 bytes of text; the document that reaches it is cut there) is what
    # keeps the tokenizer step's memory flat as the crawl grows.
    max_training_documents: int = Field(20_000, ge=1)
    max_training_bytes: int = Field(16_000_000, ge=1)
    eos_token: str = "<|endoftext|>"
    # A tokenized shard is closed when the next document would take it past this many tokens
    # (2**28 tokens = 512 MiB of uint16); one document longer than this gets a shard of its own.
    max_shard_tokens: int = Field(1 << 28, ge=1024)


class ComputeSettings(_Model):
    backend: Literal["local", "ray"] = "local"
    max_workers: int = Field(2, ge=1, le=4096)  # processes of the local pool / CPUs of a local Ray
    ray_address: str | None = None  # None with backend=ray starts a local Ray; "auto" or ray://host:10001 joins one


class OrchestrationSettings(_Model):
    """How Dagster batches the work (read when the code location loads: a change needs a reload)."""

    # Partitions of one stage that one Dagster run holds (the asset's backfill policy). Larger: fewer runs, less
    # fixed cost per partition (each run is a process that loads the code location); smaller: a failure or a
    # cancellation touches fewer partitions, and more runs can go in parallel. None: one run per stage range.
    max_partitions_per_run: int | None = Field(25, ge=1, le=100_000)


MIN_BAND_RANGES, MAX_BAND_RANGES = 16, 4096  # the automatic dedup.band_ranges' bounds


class DedupSettings(_Model):
    """Near-duplicate detection (MinHash LSH, see sluice.dedup.minhash); defaults as datatrove's."""

    fuzzy: bool = True  # False: exact dedup only
    ngram_size: int = Field(5, ge=1, le=64)  # words per shingle
    bands: int = Field(14, ge=1, le=255)  # LSH bands; candidates share at least one band
    rows_per_band: int = Field(8, ge=1, le=64)  # signature values per band (num_perm = bands * rows)
    seed: int = Field(1, ge=0, lt=1 << 32)  # seed of the permutations (datasketch's default is 1)
    hash_function: Literal["poly", "sha1"] = "poly"  # shingle hash; sha1 = datasketch's default (slow)
    # A candidate pair (sharing an LSH bucket) is linked only if the Jaccard similarity of the two shingle
    # sets, computed from their texts, is at least this: the false-positive check of NeMo Curator's fuzzy
    # dedup. 0.8 by default (LSH alone links many pairs below 0.8: precision 0.53 vs 1.0 on
    # benchmarks/dedup_quality.py); reads only the candidates' texts. None: documents sharing a bucket are
    # near duplicates (datatrove's rule, no texts read).
    verify_min_jaccard: float | None = Field(0.8, ge=0.0, le=1.0)
    # With verification, each document of a bucket is checked against the bucket's first `verify_anchors`
    # documents in the global order (its anchors), not against every member: the pairs to verify grow
    # linearly with a bucket, not quadratically (NeMo Curator's num_anchors, 2 there). Members near-equal to
    # an anchor are linked through it.
    verify_anchors: int = Field(4, ge=1, le=1024)
    # The global index (sluice/dedup/index.py): keys are split into this many hash ranges (a power of two;
    # a probe reads only the row groups of the ranges its keys fall in, a merge holds one range in memory).
    # The newest partitions stay separate delta runs until there are `index_max_deltas`; the others form
    # leveled runs, each level `index_fanout` times the one below (a partition's rows are rewritten at most
    # fanout - 1 times per level; a probe reads one file per level and delta).
    index_shards: int = Field(16, ge=1, le=4096)
    index_fanout: int = Field(8, ge=2, le=1024)
    index_max_deltas: int = Field(8, ge=1, le=1024)
    # The shuffle (sluice/dedup/shuffle.py): signing writes each part's band rows in this many band-hash
    # ranges (a power of two: the hash's top bits), and clustering runs one task per range, which holds that
    # range's band rows of the partition only (about documents x bands / band_ranges rows, ~550 bytes each
    # at the task's peak). null (the default): chosen per partition from its document count
    # (`ranges_for`), so that a range task holds about `band_rows_per_range` rows whatever the partition's
    # size, between 16 and 4,096 ranges. It changes no decision, only the cut. The target trades a task's
    # memory (2^20 rows: ~550 MiB) against reads: every range task reads its row group of every part's
    # sidecars, so a partition's dedup makes about 5 x parts x ranges reads (CHANGELOG: why 2^20).
    band_ranges: int | None = Field(None, ge=1, le=4096)
    band_rows_per_range: int = Field(1 << 20, ge=1)

    def ranges_for(self, documents: int) -> int:
        """The band-hash ranges of a partition of `documents` documents: `band_ranges` when set, else the
        power of two that keeps a range near `band_rows_per_range` band rows (16 to 4,096)."""
        if self.band_ranges is not None:
            return self.band_ranges
        wanted = -(-documents * self.bands // self.band_rows_per_range)
        return min(MAX_BAND_RANGES, max(MIN_BAND_RANGES, 1 << max(wanted - 1, 0).bit_length()))

    def for_partition(self, documents: int) -> DedupSettings:
        """These settings with `band_ranges` resolved for a partition of `documents` documents (what every
        task of its signing, clustering and rewrite is given, so all cut it alike)."""
        return self.model_copy(update={"band_ranges": self.ranges_for(documents)})

    @field_validator("index_shards", "band_ranges")
    @classmethod
    def _power_of_two(cls, value: int | None) -> int | None:
        if value is not None and value & (value - 1):
            lower = 1 << (max(value, 1).bit_length() - 1)
            nearest = min(4096, lower if value - lower <= 2 * lower - value else 2 * lower)
            raise ValueError(f"must be a power of two (1, 2, 4, ... 4096), got {value}; fix: use {nearest} (or another power of two)")
        return value
    # Share of a partition's documents removed (exact + fuzzy) outside these bounds makes the
    # `removed_share_within_bounds` check warn.
    min_removed_share: float = Field(0.0, ge=0.0, le=1.0)
    max_removed_share: float = Field(0.8, ge=0.0, le=1.0)


class BlocklistSettings(_Model):
    """The training blocklist (see sluice.blocklist): documents, URLs, domains and text patterns that no mix
    may contain. Matched once per deduplicated partition (`blocklist_matches`) and left out of every mix."""

    path: str | None = None  # the blocklist file; null = none (an empty list)
    regex_timeout_s: float = Field(0.05, gt=0.0)  # per document and pattern; a search that runs out counts as a match


class CheckSettings(_Model):
    max_quarantined_file_share: float = Field(0.25, ge=0.0, le=1.0)
    min_cleaned_drop_rate: float = Field(0.0, ge=0.0, le=1.0)
    max_cleaned_drop_rate: float = Field(0.95, ge=0.0, le=1.0)
    mix_share_tolerance: float = Field(0.01, gt=0.0, le=1.0)  # realized vs configured token share, absolute
    tokenized_sample_documents: int = Field(16, ge=1)


class ExportSettings(_Model):
    """`sluice export` and `export_job`: a mix split as Parquet, WebDataset or MDS shards (`sluice.export`)."""

    root: str | None = None  # default destination (local or s3://); None = <storage.root>/mixed_export
    # Uncompressed sample bytes per shard file (Parquet files are smaller after zstd); MDS offsets are 32-bit
    shard_bytes: int = Field(1 << 27, ge=1 << 12, lt=1 << 32)
    mask_document_boundaries: bool = False  # labels = -100 where the next token starts another document (the loader's option)
    seed: int | None = None  # order of the rows: the loader's with this seed; None = the mix's seed


LANGUAGE_PATTERN = re.compile(r"^[a-z]{2,3}(_[a-z]+)?$")


def split_weight_key(key: str) -> tuple[str, str | None]:
    """`web` -> ("web", None): all of a source; `web:en` -> ("web", "en"): its documents in one language."""
    source, _, language = key.partition(":")
    return source, (language or None)


class MixSettings(_Model):
    """A named training mix; each is one partition of `mixed_dataset`."""

    # Share of the mix's training tokens per source (`web`) or per source and lid.176 language (`web:en`),
    # normalised to sum 1. A source is given either whole or by language, not both.
    weights: dict[str, float]
    token_budget: int = Field(ge=1)  # training tokens, met exactly
    sequence_length: int = Field(2048, ge=8)
    seed: int = 0
    max_epochs: float = Field(4.0, ge=1.0)  # how often a source's tokens may repeat to meet its weight
    # Share of each source's documents held out for validation, chosen by a hash of the document id, so the
    # same documents are held out by every mix and every rebuild; validation never shares a document with training.
    validation_share: float = Field(0.0, ge=0.0, le=0.5)
    # JSONL files (local or s3://) of evaluation texts; training and validation documents sharing a word
    # n-gram of `decontamination_ngram` words with any of them are removed from the mix and counted.
    eval_sets: tuple[str, ...] = ()
    eval_text_field: str = "text"
    decontamination_ngram: int = Field(13, ge=3, le=64)

    @field_validator("weights")
    @classmethod
    def _weights(cls, value: dict[str, float]) -> dict[str, float]:
        if not value:
            raise ValueError("a mix needs at least one source weight; fix: add one, e.g. weights: {web: 1.0}")
        whole, by_language = set(), set()
        for key, weight in value.items():
            source, language = split_weight_key(key)
            check_name(source, "source name")
            if language is not None:
                if not LANGUAGE_PATTERN.match(language):
                    raise ValueError(f"{key!r}: language {language!r} must be a lid.176 code; fix: use one such as 'en' or 'zh'")
                by_language.add(source)
            else:
                whole.add(source)
            if weight < 0:
                raise ValueError(f"weight of {key!r} must be >= 0, got {weight}; fix: use a weight >= 0 (0 leaves it out)")
        if whole & by_language:
            raise ValueError(f"source(s) {sorted(whole & by_language)} are weighted both whole and by language; fix: keep either the whole-source weight or the per-language ones")
        if sum(value.values()) <= 0:
            raise ValueError("the weights must not all be zero; fix: give at least one source a weight > 0")
        return value

    @property
    def sources(self) -> list[str]:
        return sorted({split_weight_key(key)[0] for key in self.weights})
