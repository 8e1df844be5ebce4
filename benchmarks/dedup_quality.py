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
common bucket; with `dedup.verify_min_jaccard: 0.8` a flagged pair is also checked on its texts
(figures `..._verified`). recall = flagged pairs with J >= 0.8 / pairs with J >= 0.8; precision = flagged pairs
with J >= 0.8 / flagged pairs. Also printed: the flag rate per Jaccard bucket next to the LSH
S-curve 1 - (1 - J^8)^14 it should follow, and precision counting J >= 0.7 as near duplicates.

    PYTHONPATH=. .venv/bin/python benchmarks/dedup_quality.py [--stride 10 --variants 2 --max-rate 0.10]
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.minhash_corpus import corpus_texts, edit_words  # noqa: E402
from benchmarks.peers import figure  # noqa: E402

THRESHOLD = 0.8


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--stride", type=int, default=10)
    parser.add_argument("--variants", type=int, default=2)
    parser.add_argument("--max-rate", type=float, default=0.10)
    parser.add_argument("--seed", type=int, default=0)
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

    # dedup.verify_min_jaccard = 0.8: flagged pairs are linked only if the Jaccard of their shingle-hash
    # sets (sluice.dedup.shingle_sets / jaccard, the code the ExactJaccardFilter runs) reaches 0.8.
    from sluice.dedup import jaccard, shingle_sets

    started = time.perf_counter()
    sets = shingle_sets(texts, settings)
    verified = np.array([jaccard(sets[a], sets[b]) >= THRESHOLD for a, b in candidates.select("doc", "doc_b").iter_rows()], dtype=bool)
    verified_hits = int((verified & (true_jaccard >= THRESHOLD)).sum())
    verified_recall = verified_hits / positives.height
    verified_precision = verified_hits / max(1, int(verified.sum()))
    print(f"  with verify_min_jaccard = {THRESHOLD}: {int(verified.sum())} of {len(verified)} flagged pairs linked "
          f"({time.perf_counter() - started:.1f} s): recall {verified_recall:.3f}, precision {verified_precision:.4f}")

    figure("near_dup_recall_at_j0.8", recall, ">= 0.95")
    figure("near_dup_precision_at_j0.8", precision, ">= 0.99")
    figure("near_dup_recall_at_j0.8_verified", verified_recall, ">= 0.95")
    figure("near_dup_precision_at_j0.8_verified", verified_precision, ">= 0.99")


if __name__ == "__main__":
    main()
