"""Dedup cost of a new partition as history grows (P = 10, 100, 1,000 earlier partitions), local and S3.

History: P partitions (4 sources x P/4 snapshots) of `--docs` documents each. A document is a chunk of
`--doc-words` words of a real ../shared/corpus page (main text, as cleaning extracts it) with 30 % of its
words substituted, drawn from a seed per (partition, row), so any document's text can be rebuilt and
unplanted documents are far below Jaccard 0.8 of each other (two substituted copies of one chunk share
~3 % of their 5-gram shingles). History partitions are built fast, through the indexing path directly:
their signatures, shingle sidecars and clusters (all kept: they hold no duplicates) are written and the
index gets them in bulk (`DedupIndex.insert_many`, one compaction per batch).

Measured: at each level, `--window` new partitions (default 8 = dedup.index_max_deltas: any 8 consecutive
partitions form exactly one new batch of the index, so the window holds one merge of leveled runs, of
whatever levels that batch carries into) go through the same
steps as the Dagster assets, in this process (executor inline): `sign_partition`, `index_partition`
(under what would be the pool), `cluster_partition` (against every earlier partition, the registered
list passed as the asset does), `dedup_partition` + `publish_deduped`, and the no_exact_duplicates check
(`remaining_exact_duplicates`). Each new partition plants `--exact` exact copies (one case-folded) and
`--near` near copies (2 % word edits) of documents of `--source-partitions` (8) partitions drawn
uniformly from all history partitions (a fixed number, so the earlier partitions a new one links to, whose
clusters and shingle sets it reads, are the same work at every P; with copies drawn from every history
partition they would number min(20, P): fewer at P = 10 only).

- requests_per_new_partition: storage requests of those steps (writing the partition's cleaned input is
  not counted). S3: every HTTP request botocore sends (event hook), against the SeaweedFS server of the
  test suite. Local: calls of the store's methods (a file open, read, write, listing, existence check,
  deletion; consecutive opens of one file count once).
- bytes_read_per_new_partition (S3 only): the body bytes of the GET answers of those steps. The line before
  it splits them by kind of file; S3 probes GET runs from threads, so that split is approximate (the total
  is exact).
- seconds_per_new_partition: wall seconds of those steps, the mean over the window (amortized: the merge in
  it included; the goal figure), and the median (the partitions without a merge); also CPU seconds in this
  process (on a shared machine the steadier of the two; S3's server side is not in it), and the index rows
  the window's inserts wrote (deltas and merged runs) per new partition.
- recall / precision of the shipped algorithm's actual removals (the rows of deduped_removed) over the
  measured windows, against exact-Jaccard truth: a planted exact copy, or a planted near copy whose
  Jaccard of word 5-gram shingle *strings* to its source is >= 0.8 (computed here, brute force), should go;
  a removed unplanted document counts as correct only if its exact Jaccard to the document named as its
  duplicate reaches 0.8.
- incremental_equals_batch: the K/X/C chain (K, X = K with a block edited, C = X with another block
  edited; J K-X and X-C in [0.81, 0.83], K-C < 0.7: `make_chain`) in every order and every cut into 1-3 partitions, deduplicated
  partition by partition, compared with the independent oracle (all-pairs exact Jaccard + union-find over
  each partition and the earlier ones): share of cases equal (goal 1).

    PYTHONPATH=. .venv/bin/python benchmarks/dedup_history.py [--levels 10,100,1000 --stores local,s3 --docs 200]
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import os
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.peers import figure  # noqa: E402

SOURCES = ("alpha", "beta", "gamma", "delta")
SUBSTITUTION = 0.3
NEAR_EDIT = 0.02


def ref_of(index: int):
    from sluice.io.layout import PartitionRef

    return PartitionRef(sorted(SOURCES)[index % len(SOURCES)], f"s{index // len(SOURCES):05d}")


class Corpus:
    """Chunks of real text, and the seeded documents built from them."""

    def __init__(self, doc_words: int, seed: int) -> None:
        from benchmarks.minhash_corpus import corpus_texts

        self.seed = seed
        self.chunks = []
        for text in corpus_texts(min_chars=200):
            words = text.split()
            self.chunks.extend(words[start : start + doc_words] for start in range(0, len(words) - doc_words + 1, doc_words))
        if not self.chunks:
            raise SystemExit(f"no page of ../shared/corpus has {doc_words} words")

    def text(self, partition: int, row: int) -> str:
        rng = random.Random(f"{self.seed}/{partition}/{row}")
        words = self.chunks[rng.randrange(len(self.chunks))]
        return " ".join(f"v{rng.randrange(10**9)}" if rng.random() < SUBSTITUTION else word for word in words)


class RequestCounter:
    """Storage requests of this process: botocore's HTTP requests (S3) and the local store's calls."""

    COUNTED = ("exists", "size", "open_read", "write_bytes", "put_file", "delete", "list_files", "list_dirs", "fetch")

    def __init__(self) -> None:
        self.count = 0
        self.bytes_read = 0  # S3: body bytes of the GET answers
        self.bytes_by: dict[str, int] = {}  # ... by kind of file (the asset folder; index runs, key files)
        self._get_key = ""
        self._last_path: str | None = None

    def s3_hook(self, **_: object) -> None:
        self.count += 1

    def s3_get_hook(self, params: dict | None = None, **_: object) -> None:
        key = str((params or {}).get("Key", "")).split("/", 1)[-1]  # without the store's prefix
        self._get_key = key.split("/")[0] + ("/" + key.rsplit("/", 1)[-1].split("-")[0].split(".")[-1] if key.startswith("dedup_index") else "")
        self._get_key += " (ranged)" if (params or {}).get("Range") else ""

    def s3_read_hook(self, parsed: dict | None = None, **_: object) -> None:
        read = int((parsed or {}).get("ContentLength") or 0)
        self.bytes_read += read
        self.bytes_by[self._get_key] = self.bytes_by.get(self._get_key, 0) + read

    @contextlib.contextmanager
    def local(self) -> Iterator[None]:
        from sluice.io.storage import LocalStore

        originals = {name: getattr(LocalStore, name) for name in (*self.COUNTED, "local_path")}

        def counted(name):
            def call(store, *args, **kwargs):
                self.count += 1
                self._last_path = None
                return originals[name](store, *args, **kwargs)

            return call

        def local_path(store, key):
            if key != self._last_path:
                self.count += 1
                self._last_path = key
            return originals["local_path"](store, key)

        for name in self.COUNTED:
            setattr(LocalStore, name, counted(name))
        LocalStore.local_path = local_path  # type: ignore[method-assign]
        try:
            yield
        finally:
            for name, function in originals.items():
                setattr(LocalStore, name, function)


def write_history_partition(store, index: int, corpus: Corpus, docs: int, settings) -> object:
    """One history partition through the indexing path: signatures, sidecar, clusters (all kept)."""
    import numpy as np
    import polars as pl
    import pyarrow as pa

    from sluice.clean import text_hash
    from sluice.dedup.candidates import ShingleSets, set_keys
    from sluice.dedup.clusters import CLUSTER_ROW_GROUP
    from sluice.dedup.index import IndexEntry, partition_rows
    from sluice.dedup.schemas import (
        CLUSTERS,
        CLUSTERS_FILE,
        CLUSTERS_SCHEMA,
        SHINGLE_ROW_GROUP,
        SHINGLES,
        SIGNATURES,
        cluster_identity,
        doc_positions,
        minhash_identity,
        signatures_schema,
    )
    from sluice.dedup.signatures import band_hashes, shingle_table, signatures_digest
    from sluice.io.layout import partition_prefix, side_prefix, write_manifest, write_parquet

    ref = ref_of(index)
    texts = [corpus.text(index, row) for row in range(docs)]
    ids = [f"{ref.key}#{row}" for row in range(docs)]
    blocks = [np.empty(0, np.uint64)]
    bands, has_words = band_hashes(texts, settings, lambda start, hashes, counts: blocks.append(set_keys(start, hashes, counts)))
    column = pa.FixedSizeListArray.from_arrays(pa.array(bands.reshape(-1), pa.uint64()), settings.bands, mask=pa.array(~has_words))
    signatures = pa.Table.from_arrays([pa.array(doc_positions(0, docs)), pa.array(ids), pa.array([text_hash(t) for t in texts]), column], schema=signatures_schema(settings.bands))
    entry = write_parquet(store, f"{partition_prefix(SIGNATURES, ref)}/part-00000.parquet", signatures)
    sets = ShingleSets.from_keys(np.concatenate(blocks), docs)
    sidecar = {**write_parquet(store, f"{side_prefix(SHINGLES, ref)}/shingles-00000.parquet", shingle_table(sets, 0), row_group_size=SHINGLE_ROW_GROUP), "prefix": side_prefix(SHINGLES, ref)}
    manifest = {"asset": SIGNATURES, "minhash": minhash_identity(settings), "cleaned_digest": "history", "files": [entry], "side_files": [sidecar], "documents": docs}
    write_manifest(store, partition_prefix(SIGNATURES, ref), manifest)
    clusters = pl.DataFrame({"doc": doc_positions(0, docs), "doc_id": ids}).with_columns(
        kind=pl.lit(None, pl.String), parent_partition=pl.lit(ref.key), parent_doc=pl.col("doc"), exact_of_partition=pl.lit(None, pl.String),
        exact_of_id=pl.lit(None, pl.String), cluster_size=pl.lit(1, pl.Int64),
    )
    clusters_entry = write_parquet(store, f"{partition_prefix(CLUSTERS, ref)}/{CLUSTERS_FILE}", clusters.to_arrow().cast(CLUSTERS_SCHEMA), row_group_size=CLUSTER_ROW_GROUP)
    write_manifest(store, partition_prefix(CLUSTERS, ref), {"asset": CLUSTERS, "files": [clusters_entry], "settings": cluster_identity(settings), "documents": docs})
    frame = pl.from_arrow(signatures)
    return IndexEntry(ref, signatures_digest(manifest), lambda frame=frame, ref=ref: partition_rows(frame, ref), docs)


class History:
    """A store grown partition by partition: history through the fast path, measured ones through the steps."""

    def __init__(self, store, s3, settings, corpus: Corpus, args) -> None:
        self.store, self.s3, self.settings, self.corpus, self.args = store, s3, settings, corpus, args
        self.count = 0  # partitions so far (history and measured)
        self.history: list[int] = []  # indexes of fast-path partitions (the planted copies' sources)
        self.truth: dict[str, bool] = {}  # doc_id -> should be removed
        self.planted_source: dict[str, str] = {}  # doc_id -> its source's text
        self.removed: dict[str, str] = {}  # doc_id -> duplicate_of (the shipped algorithm's removals)
        self.texts: dict[str, str] = {}  # doc_id -> text of the measured partitions' documents

    def grow_to(self, target: int) -> None:
        from sluice.dedup.index import DedupIndex

        index = DedupIndex(self.store, self.settings, self.s3)
        while self.count < target:
            stop = min(target, self.count + self.args.history_batch)
            entries = [write_history_partition(self.store, i, self.corpus, self.args.docs, self.settings) for i in range(self.count, stop)]
            index.insert_many(entries)
            self.history.extend(range(self.count, stop))
            self.count = stop

    def new_partition(self) -> tuple[object, list[tuple[str, str]]]:
        from benchmarks.minhash_corpus import edit_words
        from sluice.dedup.minhash import shingles

        index = self.count
        ref = ref_of(index)
        rng = random.Random(f"planted/{self.corpus.seed}/{index}")
        docs = []
        fresh = self.args.docs - self.args.exact - self.args.near
        # The copies come from a fixed number of history partitions drawn from all of history: the partitions
        # a new one links to (whose clusters and shingles it reads) are then the same work at every P.
        sources = rng.sample(self.history, min(self.args.source_partitions, len(self.history)))
        for row in range(self.args.docs):
            doc_id = f"{ref.key}#{row}"
            if row < fresh:
                docs.append((doc_id, self.corpus.text(index, row)))
                self.truth[doc_id] = False
                continue
            source = self.corpus.text(rng.choice(sources), rng.randrange(self.args.docs))
            if row < fresh + self.args.exact:
                text = source.upper() if row == fresh else source
                self.truth[doc_id] = True
            else:
                text = edit_words(source, NEAR_EDIT, rng)
                a, b = set(shingles(text, 5)), set(shingles(source, 5))
                self.truth[doc_id] = len(a & b) / len(a | b) >= 0.8
            self.planted_source[doc_id] = source
            docs.append((doc_id, text))
        return ref, docs

    def measure_one(self, counter: RequestCounter) -> tuple[int, float, float, int, int]:
        from benchmarks.dedup_oracle import write_cleaned
        from sluice.dedup import (
            cluster_partition,
            dedup_partition,
            index_partition,
            publish_deduped,
            remaining_exact_duplicates,
            sign_partition,
        )
        from sluice.runtime.compute import Executor

        ref, docs = self.new_partition()
        self.texts.update(docs)
        write_cleaned(self.store, ref, [docs])
        earlier = [ref_of(i) for i in range(self.count)]
        executor = Executor()
        before, started, cpu, read = counter.count, time.perf_counter(), time.process_time(), counter.bytes_read
        sign_partition(self.store, ref, self.settings, executor, self.s3)
        outcome = index_partition(self.store, ref, self.settings, executor, self.s3)
        cluster_partition(self.store, ref, self.settings, executor, self.s3, earlier=earlier)
        result = dedup_partition(self.store, ref, self.settings)
        publish_deduped(self.store, ref, result)
        within, against = remaining_exact_duplicates(self.store, ref, result.kept_hashes, self.settings, self.s3)
        seconds, requests, cpu = time.perf_counter() - started, counter.count - before, time.process_time() - cpu
        read = counter.bytes_read - read
        if within or against:
            raise AssertionError(f"{ref.key}: exact duplicates left ({within}, {against})")
        self.removed.update(zip(result.removed.column("doc_id").to_pylist(), result.removed.column("duplicate_of").to_pylist(), strict=True))
        self.count += 1
        return requests, seconds, cpu, outcome["rewritten_rows"], read


def quality(history: History) -> tuple[float, float]:
    """(recall, precision) of the removals over the measured documents, against exact-Jaccard truth."""
    from sluice.clean import normalize_for_hash
    from sluice.dedup.minhash import shingles

    index_of = {ref_of(i).key: i for i in range(history.count)}

    def text_of(doc_id: str) -> str:
        if doc_id in history.texts:
            return history.texts[doc_id]
        partition, row = doc_id.rsplit("#", 1)
        return history.corpus.text(index_of[partition], int(row))

    def duplicate(a: str, b: str) -> bool:
        sa, sb = set(shingles(a, 5)), set(shingles(b, 5))
        return normalize_for_hash(a) == normalize_for_hash(b) or (bool(sa | sb) and len(sa & sb) / len(sa | sb) >= 0.8)

    should = {doc for doc, value in history.truth.items() if value}
    removed = {doc: target for doc, target in history.removed.items() if doc in history.truth}
    # A removal is right when truth says so, or (an unplanted document) when it really is a near duplicate
    # of the document it names.
    correct = sum(doc in should or duplicate(text_of(doc), text_of(target)) for doc, target in removed.items())
    recall = len(should & set(removed)) / len(should) if should else 1.0
    precision = correct / len(removed) if removed else 1.0
    return recall, precision


def chain_equals_batch() -> tuple[float, int]:
    """Share of (order, cut) cases of the K/X/C chain where partition-by-partition dedup removes what the
    oracle does, and how many cases one batch over all partitions would differ in (bridges)."""
    from benchmarks.dedup_oracle import (
        deduped_view,
        exact_jaccard,
        make_chain,
        reference_removed,
        write_all,
    )
    from benchmarks.minhash_corpus import corpus_texts
    from sluice.dedup import deduplicate_in_order
    from sluice.io.layout import PartitionRef
    from sluice.io.storage import open_store

    chain = make_chain(max(corpus_texts(), key=lambda t: len(t.split())))
    print(
        f"  K/X/C chain from ../shared/corpus: J(K, X) {exact_jaccard(chain['K'], chain['X']):.3f}, J(X, C) "
        f"{exact_jaccard(chain['X'], chain['C']):.3f}, J(K, C) {exact_jaccard(chain['K'], chain['C']):.3f}"
    )
    refs = [PartitionRef("reference", "2026-01"), PartitionRef("web", "2026-01"), PartitionRef("reference", "2026-02")]
    equal = cases = bridges = 0
    with tempfile.TemporaryDirectory(prefix="sluice-chain-") as folder:
        for order in itertools.permutations("KXC"):
            for cuts in itertools.product([False, True], repeat=2):
                groups = [[order[0]]]
                for name, cut in zip(order[1:], cuts, strict=True):
                    groups.append([name]) if cut else groups[-1].append(name)
                store = open_store(os.path.join(folder, f"{''.join(order)}-{cases}"))
                partitions = [(refs[i], [[(doc, chain[doc]) for doc in group]]) for i, group in enumerate(groups)]
                write_all(store, partitions)
                deduplicate_in_order(store)
                _, removed = deduped_view(store)
                got = {doc: kind for doc, (kind, _) in removed.items()}
                equal += got == reference_removed(partitions)
                bridges += got != reference_removed([(refs[0], [[(d, chain[d]) for g in groups for d in g]])])
                cases += 1
    return equal / cases, bridges


@contextlib.contextmanager
def open_kind(kind: str, folder: str) -> Iterator[tuple[object, object, RequestCounter]]:
    from sluice.config import S3Settings
    from sluice.io.storage import open_store, s3_client

    counter = RequestCounter()
    if kind == "local":
        with counter.local():
            yield open_store(os.path.join(folder, "store")), None, counter
        return
    from benchmarks.s3_server import shared_server

    with shared_server() as server:
        os.environ.update(server.env())
        s3 = S3Settings(endpoint_url=server.endpoint_url)
        bucket = server.create_bucket("dedup-history")
        s3_client(s3).meta.events.register("before-send.s3", counter.s3_hook)
        s3_client(s3).meta.events.register("before-parameter-build.s3.GetObject", counter.s3_get_hook)
        s3_client(s3).meta.events.register("after-call.s3.GetObject", counter.s3_read_hook)
        yield open_store(f"s3://{bucket}/data", s3), s3, counter


def run_kind(kind: str, args, corpus: Corpus, settings) -> dict[int, dict[str, float]]:
    results = {}
    with tempfile.TemporaryDirectory(prefix=f"sluice-dedup-history-{kind}-") as folder, open_kind(kind, folder) as (store, s3, counter):
        history = History(store, s3, settings, corpus, args)
        for level in args.levels:
            started = time.perf_counter()
            history.grow_to(level)
            grown = time.perf_counter() - started
            counter.bytes_by.clear()
            samples = [history.measure_one(counter) for _ in range(args.window)]
            requests, seconds, cpu, rewritten, read = (sum(sample[i] for sample in samples) / len(samples) for i in range(5))
            median = statistics.median(sample[1] for sample in samples)
            if kind == "s3":  # what whole-run GETs (before ranged reads) would read: bands once, exact twice
                from sluice.dedup.index import DedupIndex, _runs_of

                files = [files for files, _ in _runs_of(DedupIndex(store, settings, s3).manifest())]
                whole = sum(f["bands"]["bytes"] for f in files if f.get("bands")) + 2 * sum(f["exact"]["bytes"] for f in files if f.get("exact"))
                print(f"  {kind:>5} P={level:>5}: whole-run GETs of every index file would read {whole / 1e6:.3f} MB per new partition; read "
                      + ", ".join(f"{name} {size / len(samples) / 1e6:.3f}" for name, size in sorted(counter.bytes_by.items(), key=lambda kv: -kv[1]))
                      + " MB per new partition (steps and merges)", flush=True)
            results[level] = {"requests": requests, "seconds": seconds, "median": median, "cpu": cpu, "bytes": read}
            print(
                f"  {kind:>5} P={level:>5}: {requests:6.1f} requests per new partition (min {min(s[0] for s in samples)}, max "
                f"{max(s[0] for s in samples)}: the merge), {seconds:.3f} s wall mean (median {median:.3f}, max {max(s[1] for s in samples):.3f}), "
                f"{cpu:.3f} s CPU per new partition; {rewritten:.0f} index rows written per new partition; "
                + (f"{read / 1e6:.3f} MB read per new partition (GET bodies); " if kind == "s3" else "")
                + f"history grown in {grown:.0f} s",
                flush=True,
            )
        recall, precision = quality(history)
        results[0] = {"recall": recall, "precision": precision, "measured": len(history.truth), "duplicates": sum(history.truth.values())}
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--levels", default="10,100,1000", help="history sizes P (increasing)")
    parser.add_argument("--stores", default="local,s3", help="local, s3 or both")
    parser.add_argument("--docs", type=int, default=200, help="documents per partition (>= 200 for the headline)")
    parser.add_argument("--doc-words", type=int, default=250)
    parser.add_argument("--window", type=int, default=8, help="new partitions measured per level (8 = a whole index cycle)")
    parser.add_argument("--exact", type=int, default=10, help="planted exact copies per new partition")
    parser.add_argument("--near", type=int, default=10, help="planted near copies per new partition")
    parser.add_argument("--source-partitions", type=int, default=8, help="history partitions (drawn from all of history) each new partition copies from")
    parser.add_argument("--history-batch", type=int, default=64, help="history partitions indexed per bulk insert")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    args.levels = [int(level) for level in args.levels.split(",")]

    from sluice.config import DedupSettings

    settings = DedupSettings()
    print(f"dedup defaults (verify_min_jaccard {settings.verify_min_jaccard}, index_shards {settings.index_shards}, index_max_deltas {settings.index_max_deltas}); "
          f"{args.docs} documents of {args.doc_words} words per partition, {args.exact} exact + {args.near} near copies planted per new partition; "
          f"window {args.window} new partitions per level", flush=True)
    share, bridges = chain_equals_batch()
    print(f"  K/X/C chain: {share:.3f} of the order x cut cases equal the oracle; one batch over all partitions differs in {bridges} (bridges, see sluice/dedup/__init__.py)")
    figure("incremental_equals_batch", share, "1")
    corpus = Corpus(args.doc_words, args.seed)
    print(f"  {len(corpus.chunks)} chunks of {args.doc_words} words from ../shared/corpus", flush=True)
    first, last = args.levels[0], args.levels[-1]
    quality_done = False
    for kind in args.stores.split(","):
        results = run_kind(kind, args, corpus, settings)
        for level in args.levels:
            figure(f"requests_per_new_partition_{kind}_P{level}", results[level]["requests"], "flat")
            figure(f"seconds_per_new_partition_{kind}_P{level}", results[level]["seconds"], "flat", "mean over the window, merge included")
            figure(f"median_seconds_per_new_partition_{kind}_P{level}", results[level]["median"], "flat")
        figure(f"requests_per_new_partition_{kind}_ratio_P{last}_over_P{first}", results[last]["requests"] / results[first]["requests"], "<= 1.2")
        figure(f"seconds_per_new_partition_{kind}_ratio_P{last}_over_P{first}", results[last]["seconds"] / results[first]["seconds"], "<= 2", "means (amortized): the goal figure")
        figure(f"median_seconds_per_new_partition_{kind}_ratio_P{last}_over_P{first}", results[last]["median"] / results[first]["median"], "<= 2")
        figure(f"cpu_seconds_per_new_partition_{kind}_ratio_P{last}_over_P{first}", results[last]["cpu"] / results[first]["cpu"], "<= 2")
        if kind == "s3":
            for level in args.levels:
                figure(f"bytes_read_per_new_partition_{kind}_P{level}", results[level]["bytes"], "flat", "S3 GET bodies")
            figure(f"bytes_read_per_new_partition_{kind}_ratio_P{last}_over_P{first}", results[last]["bytes"] / results[first]["bytes"], "<= 1.2")
        if not quality_done:
            q = results[0]
            print(f"  removals scored on {q['measured']} measured documents, {q['duplicates']} of them duplicates by exact Jaccard")
            figure("dedup_recall_actual_removals", q["recall"], ">= 0.95")
            figure("dedup_precision_actual_removals", q["precision"], ">= 0.99")
            quality_done = True


if __name__ == "__main__":
    main()
