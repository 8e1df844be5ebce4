"""Near-duplicate detection quality: recall at Jaccard >= 0.8 and precision, against exact Jaccard.

The set: base pages from ../shared/corpus (every `--stride`-th page of all WARC files: many
languages, including zh/ja, which sluice shingles by character), each with `--variants` copies made
by controlled word edits (`benchmarks/minhash_corpus.py: edit_words`) at a rate drawn uniformly from
0 to `--max-rate` (0.10 gives true Jaccard from 1 down to about 0.3, so the set holds many pairs just
under and just over the 0.8 line, the hard case). The true Jaccard of EVERY pair of documents is
computed exactly from the shingle sets (sluice's normalization and word 5-grams): an inverted index
on the exact shingle strings (Polars self-join) gives every pair's intersection size; pairs with no
shared shingle have Jaccard 0.

The headline figures judge what the shipped algorithm REMOVED. The documents are dealt round robin into
`--partitions` cleaned partitions (so an edited copy usually lands in another partition than its base
page) and deduplicated in the global order exactly as the deduped_documents asset does
(`sluice.dedup.deduplicate_partition`: exact, LSH, verification against the first `verify_anchors`
members of a bucket, earlier documents represented by their cluster's kept document, incremental over
the band indexes); the removed documents are read back from the removed-documents files the deduped
manifests publish. A document SHOULD be removed when an earlier document in that order has Jaccard >=
0.8 with it: recall = such documents removed / such documents, precision = such documents removed /
documents removed. Both can fail: a document whose only near copy was itself removed (chains), an anchor
rule that skips a pair, or a cluster linked through a third document all show up. Run once with
`verify_min_jaccard: 0.8` (the default: the headline) and once with null (LSH only, datatrove's rule);
the CPU-time ratio of the two runs is `verification_time_overhead`.

Informational, before any clustering: the LSH candidate pairs (sharing a band of 14 x 8) against the
pairs at J >= 0.8, the flag rate per Jaccard bucket next to the S-curve 1 - (1 - J^8)^14 it should
follow, and what filtering candidates by the signatures' own Jaccard estimate would give.

    PYTHONPATH=. .venv/bin/python benchmarks/dedup_quality.py [--stride 10 --variants 2 --max-rate 0.10 --partitions 4]
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from pathlib import Path

import polars as pl

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.minhash_corpus import corpus_texts, edit_words  # noqa: E402
from benchmarks.peers import figure  # noqa: E402

THRESHOLD = 0.8


def write_partitions(folder: str, texts: list[str], partitions: int) -> None:
    """Cleaned partitions web/s00000... holding texts[i] in partition i % partitions."""
    from datetime import UTC, datetime

    import pyarrow as pa

    from sluice.clean import CLEANED_SCHEMA, text_hash
    from sluice.io.layout import PartitionRef, partition_prefix, write_manifest, write_parquet
    from sluice.io.storage import open_store

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


def run_shipped_dedup(store, settings) -> None:
    """Deduplicate every cleaned partition in the global order as the deduped_documents asset does:
    `deduplicate_partition`, then publish the partition's manifest. (The one place that calls the dedup API.)"""
    from sluice.dedup import deduplicate_partition
    from sluice.io.layout import list_partitions, partition_prefix, write_manifest

    for ref in list_partitions(store, "cleaned_documents"):
        prefix = partition_prefix("deduped_documents", ref)
        result = deduplicate_partition(store, ref, prefix, settings=settings)
        write_manifest(store, prefix, {"files": result.files, "side_files": result.side_files, "band_index": result.band_index})


def removed_documents(store) -> pl.DataFrame:
    """What dedup removed (doc_id, kind, duplicate_of), read from the removed-documents files that the
    deduped partitions' manifests publish (wherever they live: `entry_key` follows an entry's `prefix`)."""
    from sluice.io.layout import (
        entry_key,
        list_partitions,
        partition_prefix,
        read_manifest,
        read_parquet_file,
    )

    frames = []
    for ref in list_partitions(store, "deduped_documents"):
        prefix = partition_prefix("deduped_documents", ref)
        for entry in (read_manifest(store, prefix) or {}).get("side_files", []):
            if entry["key"].startswith("removed"):
                frames.append(pl.from_arrow(read_parquet_file(store, entry_key(prefix, entry), columns=["doc_id", "kind", "duplicate_of"])))
    return pl.concat(frames) if frames else pl.DataFrame(schema={"doc_id": pl.String, "kind": pl.String, "duplicate_of": pl.String})


def whole_dedup(texts: list[str], partitions: int, verify: float | None) -> dict:
    """Deduplicate all partitions in order (fresh storage): CPU and wall seconds, and what was removed."""
    from sluice.config import DedupSettings
    from sluice.io.storage import open_store

    with tempfile.TemporaryDirectory(prefix="sluice-dedup-quality-") as folder:
        write_partitions(folder, texts, partitions)
        store = open_store(folder)
        cpu, wall = time.process_time(), time.perf_counter()
        run_shipped_dedup(store, DedupSettings(verify_min_jaccard=verify))
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
        return {"cpu": cpu, "wall": wall, "removed": removed_documents(store)}


def judge_removals(removed: pl.DataFrame, pairs: pl.DataFrame, documents: int, partitions: int) -> dict:
    """Document-level recall and precision of what dedup removed, against exact Jaccard.

    A document SHOULD go when an earlier document (in dedup's global order: partition, then row) has
    Jaccard >= THRESHOLD with it. recall = such documents removed / such documents; precision = such
    documents removed / documents removed. Also: removed documents whose named keeper (`duplicate_of`, a
    kept document) itself reaches THRESHOLD with them."""
    import polars as pl

    position = pl.DataFrame({"doc": range(documents)}).with_columns(
        order=(pl.col("doc") % partitions) * documents + pl.col("doc") // partitions
    )
    ordered = (
        pairs.join(position, on="doc").join(position.rename({"doc": "doc_b", "order": "order_b"}), on="doc_b")
        .select(
            later=pl.when(pl.col("order") > pl.col("order_b")).then("doc").otherwise("doc_b"),
            jaccard="jaccard",
        )
    )
    best_earlier = ordered.group_by("later").agg(pl.col("jaccard").max().alias("best"))
    should = set(best_earlier.filter(pl.col("best") >= THRESHOLD)["later"].to_list())
    gone = {int(doc_id[1:]) for doc_id in removed["doc_id"].to_list()}
    keeper_jaccard = dict(zip(zip(pairs["doc"].to_list(), pairs["doc_b"].to_list(), strict=True), pairs["jaccard"].to_list(), strict=True))
    keeper_ok = 0
    for doc_id, keeper in zip(removed["doc_id"].to_list(), removed["duplicate_of"].to_list(), strict=True):
        a, b = sorted((int(doc_id[1:]), int(keeper[1:])))
        keeper_ok += keeper_jaccard.get((a, b), 0.0) >= THRESHOLD
    best = dict(zip(best_earlier["later"].to_list(), best_earlier["best"].to_list(), strict=True))
    missed = sorted(best[doc] for doc in should - gone)
    wrong = sorted(best.get(doc, 0.0) for doc in gone - should)
    return {
        "should": len(should), "removed": len(gone), "hits": len(should & gone),
        "recall": len(should & gone) / len(should) if should else 1.0,
        "precision": len(should & gone) / len(gone) if gone else 1.0,
        "keeper_precision": keeper_ok / len(gone) if gone else 1.0,
        "missed_best_jaccard": missed, "wrong_best_jaccard": wrong,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--stride", type=int, default=10)
    parser.add_argument("--variants", type=int, default=2)
    parser.add_argument("--max-rate", type=float, default=0.10)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--partitions", type=int, default=4)
    args = parser.parse_args()

    import numpy as np

    from sluice.config import DedupSettings
    from sluice.dedup.minhash import MinHasher, candidate_probability, shingles

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
    b, r = settings.bands, settings.rows_per_band
    half = (1 - 0.5 ** (1 / b)) ** (1 / r)  # the Jaccard at which a pair becomes a candidate half the time
    print(f"LSH S-curve 1 - (1 - J^{r})^{b}: 0.5 at J = {half:.3f}; " + ", ".join(f"{candidate_probability(j, b, r):.4g} at J = {j}" for j in (0.7, 0.72, 0.8, 0.9)))
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

    # What dedup actually removed: the whole shipped algorithm (exact, LSH, verification against the
    # first verify_anchors members of a bucket, keepers = earlier kept documents, incremental across the
    # partitions), LSH only, then verified at 0.8 (the default); the same runs give the cost.
    runs = {verify: whole_dedup(texts, args.partitions, verify) for verify in (None, THRESHOLD)}
    verdicts = {}
    for verify, run in runs.items():
        verdict = verdicts[verify] = judge_removals(run["removed"], pairs, len(texts), args.partitions)
        kinds = run["removed"]["kind"].value_counts()
        counts = dict(zip(kinds["kind"].to_list(), kinds["count"].to_list(), strict=True))
        print(
            f"\n  whole dedup, {args.partitions} partitions, verify_min_jaccard = {verify}: {run['cpu']:.2f} s CPU ({run['wall']:.2f} s wall); "
            f"removed {counts.get('exact', 0)} exact + {counts.get('fuzzy', 0)} near duplicates\n"
            f"    documents with an earlier document at J >= {THRESHOLD}: {verdict['should']}; removed: {verdict['removed']}; both: {verdict['hits']}\n"
            f"    recall {verdict['recall']:.4f}, precision {verdict['precision']:.4f}; removed documents at J >= {THRESHOLD} to their named "
            f"keeper: {verdict['keeper_precision']:.4f}"
        )
        if verdict["missed_best_jaccard"]:
            print(f"    missed (best J to an earlier document): {', '.join(f'{j:.3f}' for j in verdict['missed_best_jaccard'][:12])}")
        if verdict["wrong_best_jaccard"]:
            print(f"    removed without an earlier document at J >= {THRESHOLD} (their best J): {', '.join(f'{j:.3f}' for j in verdict['wrong_best_jaccard'][:12])}")
    overhead = runs[THRESHOLD]["cpu"] / runs[None]["cpu"]

    config = f"{len(bases)} corpus pages + {args.variants} edited copies each at U(0, {args.max_rate}), {args.partitions} partitions, removals vs exact Jaccard"
    # The default configuration verifies (verify_min_jaccard 0.8); LSH only is datatrove's rule.
    figure("near_dup_recall_at_j0.8", verdicts[THRESHOLD]["recall"], ">= 0.95", config + ", default (verify 0.8, 4 anchors)")
    figure("near_dup_precision_at_j0.8", verdicts[THRESHOLD]["precision"], ">= 0.99", config + ", default (verify 0.8, 4 anchors)")
    figure("near_dup_recall_at_j0.8_lsh_only", verdicts[None]["recall"], "informational", config + ", verify_min_jaccard null")
    figure("near_dup_precision_at_j0.8_lsh_only", verdicts[None]["precision"], "informational", config + ", verify_min_jaccard null")
    figure("lsh_candidate_pair_recall_at_j0.8", recall, "informational", "all pairs, 14x8 bands, before clustering")
    figure("lsh_candidate_pair_precision_at_j0.8", precision, "informational", "all pairs, 14x8 bands, before clustering")
    figure("verification_time_overhead", overhead, "informational", "whole-dedup CPU time, verify 0.8 / LSH only")


if __name__ == "__main__":
    main()
