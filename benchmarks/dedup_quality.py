"""Near-duplicate detection quality: recall at Jaccard >= 0.8 and precision, against exact Jaccard.

The set: base pages from ../shared/corpus (every `--stride`-th page of all WARC files: many
languages, including zh/ja, which sluice shingles by character), each with `--variants` copies made
by controlled word edits (`benchmarks/minhash_corpus.py: edit_words`) at a rate drawn uniformly from
0 to `--max-rate` (0.10 gives true Jaccard from 1 down to about 0.3, so the set holds many pairs just
under and just over the 0.8 line, the hard case). The true Jaccard of EVERY pair of documents is
computed exactly from the shingle sets (sluice's normalization and word 5-grams): an inverted index
on the exact shingle strings (Polars self-join) gives every pair's intersection size; pairs with no
shared shingle have Jaccard 0.

A pair is flagged when sluice's LSH (14 bands x 8 rows, the dedup defaults) puts both documents in a
common bucket; with `dedup.verify_min_jaccard: 0.8` (the default) a flagged pair is also checked on
its texts (the headline figures; `..._lsh_only`: without the check, datatrove's rule). recall = flagged pairs with J >= 0.8 / pairs with J >= 0.8; precision = flagged pairs
with J >= 0.8 / flagged pairs. Also printed: the flag rate per Jaccard bucket next to the LSH
S-curve 1 - (1 - J^8)^14 it should follow, and precision counting J >= 0.7 as near duplicates.

Cost of verification (on by default): the same documents, dealt round robin into `--partitions` cleaned
partitions (so an edited copy usually lands in another partition than its base page), are deduplicated
whole with `sluice.dedup.deduplicate_partition` (exact + near, incremental over the band indexes, in
this process) once with `verify_min_jaccard: null` and once with 0.8; the CPU-time ratio is the
`verification_time_overhead` figure (informational).

    PYTHONPATH=. .venv/bin/python benchmarks/dedup_quality.py [--stride 10 --variants 2 --max-rate 0.10 --partitions 4]
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.minhash_corpus import corpus_texts, edit_words  # noqa: E402
from benchmarks.peers import figure  # noqa: E402

THRESHOLD = 0.8


def write_partitions(folder: str, texts: list[str], partitions: int) -> None:
    """Cleaned partitions web/s00000... holding texts[i] in partition i % partitions."""
    from datetime import UTC, datetime

    import pyarrow as pa

    from sluice.clean import CLEANED_SCHEMA, text_hash
    from sluice.layout import PartitionRef, partition_prefix, write_manifest, write_parquet
    from sluice.storage import open_store

    store = open_store(folder)
    for index in range(partitions):
        ref = PartitionRef("web", f"s{index:05d}")
        rows = [
            {
                "doc_id": f"d{doc}", "source": ref.source, "snapshot": ref.snapshot, "url": None,
                "fetch_date": datetime(2026, 1, 1, tzinfo=UTC), "text": texts[doc], "language": "en",
                "language_score": 1.0, "n_chars": len(texts[doc]), "text_hash": text_hash(texts[doc]),
                "pii_redactions": 0, "quality_score": None,
            }
            for doc in range(index, len(texts), partitions)
        ]
        prefix = partition_prefix("cleaned_documents", ref)
        entry = write_parquet(store, f"{prefix}/part-00000.parquet", pa.Table.from_pylist(rows, schema=CLEANED_SCHEMA))
        write_manifest(store, prefix, {"asset": "cleaned_documents", "files": [entry]})


def time_whole_dedup(texts: list[str], partitions: int, verify: float | None) -> dict[str, float]:
    """Deduplicate all partitions in order (fresh storage); CPU and wall seconds, removal counts."""
    from sluice.config import DedupSettings
    from sluice.dedup import deduplicate_partition
    from sluice.layout import list_partitions, partition_prefix, write_manifest
    from sluice.storage import open_store

    settings = DedupSettings(verify_min_jaccard=verify)
    with tempfile.TemporaryDirectory(prefix="sluice-dedup-quality-") as folder:
        write_partitions(folder, texts, partitions)
        store = open_store(folder)
        cpu, wall = time.process_time(), time.perf_counter()
        exact = fuzzy = 0
        for ref in list_partitions(store, "cleaned_documents"):
            prefix = partition_prefix("deduped_documents", ref)
            result = deduplicate_partition(store, ref, prefix, settings=settings)
            write_manifest(store, prefix, {"files": result.files, "side_files": result.side_files, "band_index": result.band_index})
            exact += result.removed_exact
            fuzzy += result.removed_fuzzy
        return {"cpu": time.process_time() - cpu, "wall": time.perf_counter() - wall, "exact": exact, "fuzzy": fuzzy}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--stride", type=int, default=10)
    parser.add_argument("--variants", type=int, default=2)
    parser.add_argument("--max-rate", type=float, default=0.10)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--partitions", type=int, default=4)
    args = parser.parse_args()

    import numpy as np
    import polars as pl

    from sluice.config import DedupSettings
    from sluice.minhash import MinHasher, candidate_probability, shingles

    rng = random.Random(args.seed)
    bases = corpus_texts()[:: args.stride]
    texts = []
    for base in bases:
        texts.append(base)
        texts.extend(edit_words(base, rng.uniform(0, args.max_rate), rng) for _ in range(args.variants))
    print(f"{len(bases)} base pages, {len(texts)} documents ({args.variants} edited copies each, edit rate U(0, {args.max_rate}))")

    started = time.perf_counter()
    rows = [(doc, s) for doc, text in enumerate(texts) for s in set(shingles(text, 5))]
    sets = pl.DataFrame({"doc": [r[0] for r in rows], "shingle": [r[1] for r in rows]}, schema={"doc": pl.Int32, "shingle": pl.Binary})
    sizes = sets.group_by("doc").agg(pl.len().alias("size"))
    pairs = (
        sets.join(sets, on="shingle", suffix="_b")
        .filter(pl.col("doc") < pl.col("doc_b"))
        .group_by("doc", "doc_b")
        .agg(pl.len().alias("common"))
        .join(sizes, on="doc")
        .join(sizes.rename({"doc": "doc_b", "size": "size_b"}), on="doc_b")
        .with_columns(jaccard=pl.col("common") / (pl.col("size") + pl.col("size_b") - pl.col("common")))
    )
    total_pairs = len(texts) * (len(texts) - 1) // 2
    print(f"exact Jaccard of all {total_pairs:,} pairs ({pairs.height:,} share a shingle) in {time.perf_counter() - started:.1f} s")

    settings = DedupSettings()
    hasher = MinHasher.from_settings(settings)
    bands = hasher.band_hashes(hasher.signatures(texts))
    band_rows = pl.DataFrame(
        {"doc": np.repeat(np.arange(len(texts), dtype=np.int32), settings.bands), "band": np.tile(np.arange(settings.bands), len(texts)), "hash": bands.reshape(-1)}
    )
    flagged = (
        band_rows.join(band_rows, on=["band", "hash"], suffix="_b")
        .filter(pl.col("doc") < pl.col("doc_b"))
        .select("doc", "doc_b")
        .unique()
        .with_columns(flagged=pl.lit(True))
    )
    judged = pairs.join(flagged, on=["doc", "doc_b"], how="full", coalesce=True).with_columns(
        pl.col("jaccard").fill_null(0.0), pl.col("flagged").fill_null(False)
    )
    positives = judged.filter(pl.col("jaccard") >= THRESHOLD)
    true_positives = positives.filter("flagged").height
    flagged_count = judged.filter("flagged").height
    recall = true_positives / positives.height
    precision = true_positives / flagged_count if flagged_count else 1.0
    precision_07 = judged.filter(pl.col("flagged") & (pl.col("jaccard") >= 0.7)).height / flagged_count if flagged_count else 1.0

    print(f"\n  pairs with J >= {THRESHOLD}: {positives.height:,}; flagged pairs: {flagged_count:,}; both: {true_positives:,}")
    print(f"  {'Jaccard':>12} {'pairs':>9} {'flagged':>9} {'rate':>7} {'S-curve':>8}")
    edges = [0.0, 0.3, 0.5, 0.6, 0.7, 0.75, 0.8, 0.85, 0.9, 0.95, 1.0001]
    for low, high in zip(edges[:-1], edges[1:], strict=True):
        bucket = judged.filter((pl.col("jaccard") >= low) & (pl.col("jaccard") < high))
        if low == 0.0:
            count = total_pairs - judged.filter(pl.col("jaccard") >= high).height
            hit = bucket.filter("flagged").height
        else:
            count, hit = bucket.height, bucket.filter("flagged").height
        middle = (low + min(high, 1.0)) / 2
        rate = hit / count if count else float("nan")
        print(f"  {low:5.2f}-{min(high, 1.0):4.2f} {count:>11,} {hit:>9,} {rate:7.3f} {candidate_probability(middle):8.3f}")
    print(f"  precision counting J >= 0.7 as near duplicates: {precision_07:.4f}")
    # What a second filter on the flagged pairs by the signatures' own Jaccard estimate (share of equal
    # values; standard deviation ~0.04 at J = 0.8 with 112 values) would give: not used by sluice.
    signatures = hasher.signatures(texts)
    candidates = judged.filter("flagged")
    estimate = (signatures[candidates["doc"].to_numpy()] == signatures[candidates["doc_b"].to_numpy()]).mean(axis=1)
    true_jaccard = candidates["jaccard"].to_numpy()
    for bound in (0.75, 0.8, 0.85):
        kept = estimate >= bound
        hits = int((kept & (true_jaccard >= THRESHOLD)).sum())
        print(f"  flagged and estimated J >= {bound}: recall {hits / positives.height:.3f}, precision {hits / max(1, kept.sum()):.3f}")

    # dedup.verify_min_jaccard = 0.8 (the default): flagged pairs are linked only if the Jaccard of their
    # shingle-hash sets (sluice.dedup.ShingleSets / pair_jaccard, the code the ExactJaccardFilter runs) reaches 0.8.
    from sluice.dedup import ShingleSets, pair_jaccard

    started = time.perf_counter()
    sets = ShingleSets.of(texts, settings)
    verified = pair_jaccard(sets, candidates["doc"].to_numpy(), candidates["doc_b"].to_numpy()) >= THRESHOLD
    verified_hits = int((verified & (true_jaccard >= THRESHOLD)).sum())
    verified_recall = verified_hits / positives.height
    verified_precision = verified_hits / max(1, int(verified.sum()))
    print(f"  with verify_min_jaccard = {THRESHOLD}: {int(verified.sum())} of {len(verified)} flagged pairs linked "
          f"({time.perf_counter() - started:.1f} s): recall {verified_recall:.3f}, precision {verified_precision:.4f}")

    # The cost: whole dedup of the same documents as partitions, verification off, then on (the default).
    timings = {verify: time_whole_dedup(texts, args.partitions, verify) for verify in (None, THRESHOLD)}
    for verify, timing in timings.items():
        print(f"  whole dedup, {args.partitions} partitions, verify_min_jaccard = {verify}: {timing['cpu']:.2f} s CPU "
              f"({timing['wall']:.2f} s wall), removed {timing['exact']} exact + {timing['fuzzy']} near duplicates")
    overhead = timings[THRESHOLD]["cpu"] / timings[None]["cpu"]

    # The default configuration verifies (verify_min_jaccard 0.8); LSH only is datatrove's rule.
    figure("near_dup_recall_at_j0.8", verified_recall, ">= 0.95")
    figure("near_dup_precision_at_j0.8", verified_precision, ">= 0.99")
    figure("near_dup_recall_at_j0.8_lsh_only", recall, "informational")
    figure("near_dup_precision_at_j0.8_lsh_only", precision, "informational")
    figure("verification_time_overhead", overhead, "informational: whole-dedup CPU time, verify 0.8 / LSH only")


if __name__ == "__main__":
    main()
