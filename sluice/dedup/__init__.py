"""Deduplication, global across all source x snapshot partitions: exact, then near duplicates (MinHash LSH).

**Order** (deterministic, independent of worker count, engine and run timing): partitions are ordered by
(snapshot, source); inside one, documents keep their order (cleaned part, row). A document's position is
`doc = part << 24 | row`.

**Rule.** Documents are linked when their normalized text hashes are equal (`sluice.clean.text_hash`) or
when they are a verified candidate pair (they share an LSH band bucket, `sluice.dedup.minhash`, and, with
`dedup.verify_min_jaccard`, the Jaccard similarity of their shingle sets reaches it; pairs are each bucket
member with the bucket's first `verify_anchors` members, see `sluice.dedup.candidates`). A document of
partition P is removed when its connected component in the graph of all documents of P and of the
partitions before P holds an earlier document: `kind` exact when an earlier document has its text hash
(`duplicate_of` is that first copy), else fuzzy (`duplicate_of` is the cluster's kept document).

**Incremental = one batch.** The index holds the keys of every document, kept or removed, so a new
document can link to a removed one and chains resolve: K, X (edit of K), C (edit of X, not of K) in three
partitions keep K and remove X and C, as one batch over the three does, wherever the partition boundaries
fall. Partition P's result is exactly the one-batch result over P and the partitions before it. What one
batch over *later* partitions can differ in: a later document that links two clusters kept apart so far
(a bridge) merges them in a batch, so the batch would remove the second cluster's first document; here
that document stays kept, as published when its partition ran (outputs are never rewritten by later
partitions), the bridge itself is removed, and later members of either cluster name the kept document
their own links lead to.

**Steps per partition** (`sluice.dedup.partition`; each a Dagster asset in `data_assets/deduped.py`):
`sign_partition` (signatures.py) -> `index_partition` (index.py: the global LSM index; runs.py reads its files) ->
`cluster_partition` (shuffle.py: one task per band-hash range, reading it with ranges.py; candidates.py,
clusters.py) -> `dedup_partition`. Step 3 of P reads only index rows of
partitions ordered before P, so it is a pure function of those partitions whatever else was indexed since:
the only order to enforce is "every earlier partition indexed before P is clustered" and "every earlier
partition clustered before P's outputs are written" (`data_assets` declares both to Dagster).
`deduplicate_in_order` runs the steps for a list of partitions one after the other.

Datasets and columns: `sluice.dedup.schemas`. A document's global cluster, later partitions' copies
included, by probes of the index: `sluice.dedup.lookup` (what `sluice trace` reports).
"""

from sluice.dedup.candidates import (
    ExactJaccardFilter,
    ShingleSets,
    candidate_pairs,
    jaccard,
    pair_jaccard,
    shingle_sets,
)
from sluice.dedup.clusters import components, resolve_roots
from sluice.dedup.index import DedupIndex, IndexIncomplete
from sluice.dedup.partition import (
    ClusterResult,
    DedupResult,
    InOrderResult,
    cluster_partition,
    dedup_partition,
    deduplicate_in_order,
    deduplicate_partition,
    earlier_partitions,
    index_partition,
    kept_duplicates,
    publish_deduped,
    remaining_exact_duplicates,
)
from sluice.dedup.schemas import (
    CLEANED,
    CLUSTERS,
    DEDUPED,
    INDEX,
    REMOVED,
    REMOVED_SCHEMA,
    ROW_BITS,
    SHINGLES,
    SIGNATURES,
    cluster_identity,
    minhash_identity,
)
from sluice.dedup.signatures import SignResult, band_table, sign_partition

__all__ = [
    "CLEANED", "CLUSTERS", "DEDUPED", "INDEX", "REMOVED", "REMOVED_SCHEMA", "ROW_BITS", "SHINGLES", "SIGNATURES",
    "ClusterResult", "DedupIndex", "DedupResult", "ExactJaccardFilter", "InOrderResult", "IndexIncomplete", "ShingleSets", "SignResult",
    "band_table", "candidate_pairs", "cluster_identity", "cluster_partition", "components", "dedup_partition", "deduplicate_in_order",
    "deduplicate_partition", "earlier_partitions", "index_partition", "jaccard", "kept_duplicates", "minhash_identity", "pair_jaccard", "publish_deduped",
    "remaining_exact_duplicates", "resolve_roots", "shingle_sets", "sign_partition",
]
