"""Cleaning speed and fidelity: sluice's default chain against datatrove's, same extractor, same WARC pages.

    python benchmarks/cleaning.py [--pages-per-file 40] [--snapshot web/2026-01] [--rounds 3] [--passes 2] [--repeats 3] [--trafilatura-peer]

The whole chains are timed in `--rounds` rounds (3). A round runs each side in a fresh process, one after
the other: an untimed warm-up (imports, models, the extraction helper), then `--passes` (2) timed passes over
the pages, of which the best counts (the first pass in a process also pays for lazily built per-language
state, which a cleaning run amortizes over its partition). The same code gives passes that differ by up to
~20 % between processes (memory layout, hash seeds) and over minutes (other jobs on a shared machine), so the
sides are interleaved in time and each is sampled in several processes. Printed per round: both sides' CPU
ms per page and their ratio. The headline ratio is the best pass of each side over all rounds; the median of
the rounds' ratios is printed beside it. The filters-only figures are the best of `--repeats` passes in one
process each.

1. Whole chain, same extractor and rule definitions on both sides (`cleaning.preset: datatrove`): sluice's
   (charset, resiliparse extraction within its budget,
   lid.176 (fastText's prediction from per-word sums, sluice/clean/models/fasttext_predict.py), Gopher repetition + quality,
   C4, FineWeb) against datatrove 0.10.1's (a Resiliparse extractor
   making sluice's resiliparse call with sluice's arguments, see benchmarks/_datatrove.py; LanguageFilter,
   GopherRepetition, GopherQuality, C4Quality, FineWebQuality; all defaults), a fresh process per side and
   round (plus the extraction helper processes both use). Docs/s per core = documents / CPU seconds (process + helper
   processes), which the other jobs on a shared machine disturb less than wall time; wall docs/s printed too.
   Both chains keep every language above the 0.65 language score; sluice's length, PII, toxicity and
   code-share steps are off (datatrove's chain has none of them). `--trafilatura-peer` also times datatrove
   with its own Trafilatura extractor (datatrove's default chain; informational: not the same work).
1b. The same chains with issue 19's steps on, measured directly: sluice adds toxicity, code share and
   perplexity (KenLM models per language trained on the corpus's reference snapshot, as
   benchmarks/curation_steps.py does); datatrove adds its closest equivalents: C4BadWordsFilter reading
   sluice's word lists, and its CCNet perplexity code (KenlmModel.get_perplexity) with the same ARPA models
   (benchmarks/_datatrove.py says what differs). datatrove has no code-share step.
2. Filters only, on identical texts: the same resiliparse-extracted texts through both filter chains (the
   four filters, per document, no extraction or language ID): speed (sluice with `english` word splitting,
   datatrove's rules as datatrove applies them, is the like-for-like figure; `multilingual` printed too)
   and the share of same keep/drop decisions (fidelity). `english` runs `preset: datatrove`; `multilingual`
   runs sluice's own rules (`preset: sluice`, e.g. the Gopher alpha rule over whitespace words).
3. Per-language kept counts of both chains, where non-English handling differs.
4. The cost of cleaned_attributes (issue 41): sluice's default chain (`CleaningSettings()`) on the same
   pages with and without every rule's statistic recorded (`CleaningPipeline(attributes=True)`: every rule
   of every table, and the steps after a drop run on the dropped page), interleaved passes in one process,
   best of `--passes` each: `cleaning_attributes_cpu_overhead` (goal <= 0.10). `--attributes-only` runs only
   this part (no peer needed).

datatrove runs in its own virtual environment (benchmarks/peers.py; pins in ../shared/ENVIRONMENT.md).
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.minhash_corpus import load_pages  # noqa: E402
from benchmarks.peers import SHARED, datatrove_python, ensure_peer_package, figure  # noqa: E402

if TYPE_CHECKING:
    from sluice.config import CleaningSettings

PEER = ROOT / "benchmarks" / "_datatrove.py"


def cpu_seconds() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def chain_settings(new_steps: bool) -> CleaningSettings:
    """The steps datatrove's chain has: no length or PII step; with `new_steps`, issue 19's toxicity,
    code-share and perplexity steps on (their defaults; perplexity scores and buckets, drops nothing), else off."""
    from sluice.config import (
        CleaningSettings,
        CodeShareSettings,
        ExtractionSettings,
        PerplexitySettings,
        PIISettings,
        ToxicitySettings,
    )

    # datatrove's rule definitions (`preset: datatrove`) and the same extractor call as the peer's (no
    # trafilatura second opinion, no skipped page chrome, no link-density pass): the same work on both sides.
    extraction = ExtractionSettings(second_opinion=None, skip_elements=[], link_density=None)
    same = {"preset": "datatrove", "min_chars": 0, "pii": PIISettings(enabled=False), "extraction": extraction}
    if new_steps:
        return CleaningSettings(**same, perplexity=PerplexitySettings(enabled=True))
    return CleaningSettings(**same, toxicity=ToxicitySettings(enabled=False), code_share=CodeShareSettings(enabled=False))


def sluice_chain(pages: list[dict], repeats: int, models: dict[str, dict] | None = None) -> tuple[dict[str, str], float, float]:
    """Kept page ids -> language, wall and CPU seconds of sluice's chain (best of `repeats` passes in this
    process); with perplexity `models` (benchmarks/curation_steps.train_models) the issue-19 steps are on."""
    from sluice.clean import CleaningPipeline, clear_text_caches
    from sluice.clean.steps import Document
    from sluice.clean.steps.perplexity import load_model

    settings = chain_settings(models is not None)
    for model in (models or {}).values():
        load_model(model["key"])  # every language's model loaded before the timing, as on datatrove's side
    passes: list[tuple[float, float]] = []  # (wall, CPU) seconds of each timed pass
    for _ in range(repeats):
        pipeline = CleaningPipeline.from_settings(settings, perplexity_models=(models, lambda key: key) if models else None)
        warm = Document("warm", "b", "b", None, None, "text/html", b"<p>warm up the helper and the model</p>", "utf-8")
        pipeline.run(warm)  # helper process start and model load, outside the timing (as on datatrove's side)
        clear_text_caches()  # each timed pass starts with the text caches empty (same pages as the last pass)
        kept: dict[str, str] = {}
        started, cpu_start = time.perf_counter(), cpu_seconds()
        for page in pages:
            doc = Document(page["id"], "b", "b", page["url"], None, "text/html", page["content"], page["charset"])
            if pipeline.run(doc) is None:
                kept[page["id"]] = doc.language
        pipeline.close()  # the extraction helper's CPU time is counted once it has exited
        passes.append((time.perf_counter() - started, cpu_seconds() - cpu_start))
    return kept, min(spent for spent, _ in passes), min(spent for _, spent in passes)


def attributes_overhead(pages: list[dict], passes: int) -> tuple[float, float, int, int]:
    """(CPU seconds without, with attributes, best of `passes` each, interleaved; kept pages; Parquet bytes of
    the attributes rows) of the default chain over `pages`."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from sluice.clean import CleaningPipeline, clear_text_caches
    from sluice.clean.attributes import attributes_row, attributes_schema
    from sluice.clean.steps import Document
    from sluice.config import CleaningSettings
    from sluice.io.layout import PARQUET_OPTIONS

    settings = CleaningSettings()
    best = {False: float("inf"), True: float("inf")}
    kept = {False: 0, True: 0}
    rows: list[dict] = []
    for _ in range(passes):
        for attributes in (False, True):
            pipeline = CleaningPipeline.from_settings(settings, attributes=attributes)
            pipeline.run(Document("warm", "b", "b", None, None, "text/html", b"<p>warm up the helper and the model</p>", "utf-8"))
            clear_text_caches()
            names = pipeline.attribute_names()
            rows = []
            kept[attributes] = 0
            cpu_start = cpu_seconds()
            for page in pages:
                doc = Document(page["id"], "b", "b", page["url"], None, "text/html", page["content"], page["charset"])
                outcome = pipeline.run(doc)
                kept[attributes] += outcome is None
                if attributes:
                    step, drop = outcome or (None, None)
                    text = doc.text if outcome is None else None
                    rows.append(attributes_row(doc, names, "kept" if outcome is None else "dropped", step and step.name, drop, text))
            pipeline.close()
            best[attributes] = min(best[attributes], cpu_seconds() - cpu_start)
    assert kept[False] == kept[True], "recording the attributes changed a decision"
    with tempfile.TemporaryDirectory() as scratch:
        path = Path(scratch, "attributes.parquet")
        pq.write_table(pa.Table.from_pylist(rows, schema=attributes_schema(names)), path, **PARQUET_OPTIONS)
        size = path.stat().st_size
    return best[False], best[True], kept[True], size


def report_attributes(pages: list[dict], passes: int) -> None:
    without, with_attributes, kept, size = attributes_overhead(pages, passes)
    n = len(pages)
    overhead = with_attributes / without - 1
    print(
        f"\n4. cleaned_attributes: default chain {n / without:.1f} docs/s per core without, {n / with_attributes:.1f} with "
        f"(+{overhead:.1%} CPU); kept {kept}; {size / n:.0f} bytes a row in Parquet = {size / n * 1e6 / 2**20:.0f} MiB per 10^6 documents"
    )
    config = f"{n} pages, default chain (CleaningSettings()), best of {passes} interleaved passes"
    figure("cleaning_attributes_cpu_overhead", overhead, "<= 0.10", config)
    figure("cleaning_attributes_mib_per_1e6_docs", size / n * 1e6 / 2**20, "-", config + ", zstd Parquet")


def chain_rounds(
    python: Path, pages: list[dict], pages_file: Path, lid_model: str, rounds: int, passes: int, models: dict[str, dict] | None = None,
    extras_file: Path | None = None,
) -> tuple[dict[str, str], dict, list[tuple[float, float, float, float]]]:
    """`rounds` interleaved rounds of both whole chains, each side in a fresh process per round (sluice: a
    spawned worker; datatrove: its peer environment) timing the best of `passes` passes: sluice's kept ids,
    datatrove's last result, and per round (sluice wall, sluice CPU, datatrove wall, datatrove CPU) seconds."""
    import multiprocessing

    spawn = multiprocessing.get_context("spawn")
    extras = [str(extras_file)] if extras_file else []
    timings, n = [], len(pages)
    for number in range(1, rounds + 1):
        with spawn.Pool(1) as pool:
            kept, wall, cpu = pool.apply(sluice_chain, (pages, passes, models))
        result = peer(python, "chain", str(pages_file), lid_model, "resiliparse", str(passes), *extras)
        timings.append((wall, cpu, result["seconds"], result["cpu_seconds"]))
        print(
            f"  round {number}: sluice {cpu / n * 1000:6.2f} ms CPU per page, datatrove {result['cpu_seconds'] / n * 1000:6.2f}, "
            f"ratio {result['cpu_seconds'] / cpu:5.2f}x"
        )
    return kept, result, timings


def chain_summary(
    label: str, n: int, kept_sluice: dict, kept_peer: dict, timings: list[tuple[float, float, float, float]]
) -> tuple[float, float, float, float]:
    """Print both sides' best passes; (sluice docs/s per core, datatrove docs/s per core, ratio of the best
    passes, median of the rounds' ratios)."""
    wall_sluice, cpu_sluice = min(t[0] for t in timings), min(t[1] for t in timings)
    wall_peer, cpu_peer = min(t[2] for t in timings), min(t[3] for t in timings)
    ratio, median_ratio = cpu_peer / cpu_sluice, statistics.median(t[3] / t[1] for t in timings)
    print(f"  sluice:                  {n / wall_sluice:8.1f} docs/s wall, {n / cpu_sluice:8.1f} docs/s per core, kept {len(kept_sluice)}")
    print(f"  datatrove (resiliparse): {n / wall_peer:8.1f} docs/s wall, {n / cpu_peer:8.1f} docs/s per core, kept {len(kept_peer)}")
    print(f"  {label} ratio (per core, best passes): {ratio:.1f}x; median of the rounds' ratios {median_ratio:.1f}x")
    return n / cpu_sluice, n / cpu_peer, ratio, median_ratio


def sluice_filters(texts: list[dict], word_splitting: str, repeats: int) -> tuple[dict[str, list[str]], float]:
    """Keep/drop decision per text through sluice's four filters, and the CPU seconds they took (best of
    `repeats` passes)."""
    from sluice.clean import clear_text_caches
    from sluice.clean.steps import Document
    from sluice.clean.steps.filters import (
        C4QualityFilter,
        FineWebQualityFilter,
        GopherQualityFilter,
        GopherRepetitionFilter,
    )
    from sluice.config import CleaningSettings

    s = CleaningSettings(preset="datatrove" if word_splitting == "english" else "sluice")
    multilingual = word_splitting == "multilingual"
    steps = [
        GopherRepetitionFilter(s.gopher_repetition, multilingual),
        GopherQualityFilter(s.gopher_quality, multilingual),
        C4QualityFilter(s.c4, multilingual),
        FineWebQualityFilter(s.fineweb_quality, multilingual),
    ]

    def decide(item: dict) -> list[str]:
        doc = Document.from_text(item["text"], language=item["language"], doc_id=item["id"])
        for step in steps:
            drop = step.apply(doc)
            if drop is not None:
                return [step.name, drop.reason]
        return ["kept", ""]

    if texts:
        decide(texts[0])  # warm-up outside the timing, as on datatrove's side
    best = float("inf")
    for _ in range(repeats):
        clear_text_caches()  # the same texts went through the chains before: start each timing with the cache empty
        cpu = time.process_time()
        decisions = {item["id"]: decide(item) for item in texts}
        best = min(best, time.process_time() - cpu)
    return decisions, best


def write_extras(folder: Path, models: dict[str, dict]) -> Path:
    """The datatrove side's inputs for its issue-19 equivalents (benchmarks/_datatrove.py EXTRAS.json): sluice's
    toxicity word lists (less the terms sluice ignores), one file per language, and the perplexity models."""
    from sluice.config import ToxicitySettings
    from sluice.config.toxicity_lists import LIST_LANGUAGES, load_terms

    ignored = set(ToxicitySettings().ignore_terms)
    badwords = {}
    for language in sorted(LIST_LANGUAGES):
        path = folder / f"badwords-{language}.txt"
        path.write_text("\n".join(t.lower() for t in load_terms(language) if t.lower() not in ignored) + "\n", encoding="utf-8")
        badwords[language] = str(path)
    extras = folder / "extras.json"
    extras.write_text(json.dumps({"badwords": badwords, "kenlm": {code: m["key"] for code, m in models.items()}}))
    return extras


def peer(python: Path, mode: str, *args: str) -> dict:
    """Run benchmarks/_datatrove.py `mode` in the peer environment; its JSON result."""
    with tempfile.TemporaryDirectory() as scratch:
        out = Path(scratch, "result.json")
        subprocess.run([str(python), str(PEER), mode, *args, str(out)], check=True)
        return json.loads(out.read_text())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pages-per-file", type=int, default=40)
    parser.add_argument("--snapshot", default="web/2026-01")
    parser.add_argument("--reference", default="reference/2026-01", help="corpus snapshot the perplexity models are trained on")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds of the whole chains (one fresh process per side each)")
    parser.add_argument("--passes", type=int, default=2, help="timed passes of each side per round (best of)")
    parser.add_argument("--repeats", type=int, default=3, help="filters only: timed passes per side (best of); untimed warm-up first")
    parser.add_argument("--trafilatura-peer", action="store_true", help="also time datatrove's default chain (Trafilatura)")
    parser.add_argument("--attributes-only", action="store_true", help="only part 4: the CPU cost of cleaned_attributes")
    args = parser.parse_args()
    if args.attributes_only:
        report_attributes(load_pages(args.snapshot, args.pages_per_file), max(args.passes, 3))
        return

    from benchmarks.curation_steps import train_models
    from sluice.clean.models.langid import LanguageIdentifier, default_model_path
    from sluice.clean.steps import Document
    from sluice.clean.steps.extract import DecodeText, extract_resiliparse

    python = datatrove_python()
    pages = load_pages(args.snapshot, args.pages_per_file)
    files = len(list((SHARED / "corpus" / args.snapshot).glob("*.warc.gz")))
    n = len(pages)
    print(f"{n} pages from {SHARED / 'corpus' / args.snapshot} ({args.pages_per_file} per file, {files} files = languages)")
    decode = DecodeText()
    for page in pages:
        doc = Document(page["id"], "b", "b", page["url"], None, "text/html", page["content"], page["charset"])
        page["html"] = doc.text if decode.apply(doc) is None else ""
    model = str(default_model_path())

    with tempfile.TemporaryDirectory() as scratch:
        pages_file, texts_file = Path(scratch, "pages.jsonl"), Path(scratch, "texts.jsonl")
        with open(pages_file, "w", encoding="utf-8") as out:
            for page in pages:
                out.write(json.dumps({"id": page["id"], "url": page["url"], "html": page["html"]}) + "\n")

        # 1. the whole chain, resiliparse on both sides
        print(f"\n1. Whole chain, resiliparse on both sides: {args.rounds} rounds, each side in a fresh process per round (+ extraction helpers)")
        kept_sluice, chain, timings = chain_rounds(python, pages, pages_file, model, args.rounds, args.passes)
        kept_peer = chain["kept"]
        per_core_sluice, per_core_peer, ratio, ratio_median = chain_summary("whole chain", n, kept_sluice, kept_peer, timings)
        # 1b. the same with issue 19's steps on (both sides' closest equivalents)
        print("\n1b. Whole chain with the issue-19 steps on (sluice: toxicity, code share, perplexity; datatrove: C4BadWordsFilter, CCNet perplexity)")
        models = train_models(args.reference, scratch)
        extras_file = write_extras(Path(scratch), models)
        ensure_peer_package(python, "kenlm", "kenlm==0.3.0")
        print(f"  perplexity models for {sorted(models)} from {args.reference}")
        kept_new, chain_new, timings_new = chain_rounds(python, pages, pages_file, model, args.rounds, args.passes, models, extras_file)
        *_, ratio_new, ratio_new_median = chain_summary("with the new steps", n, kept_new, chain_new["kept"], timings_new)
        repeats = str(args.repeats)
        if args.trafilatura_peer:
            default_chain = peer(python, "chain", str(pages_file), model, "trafilatura", repeats)
            per_core_trafilatura = n / default_chain["cpu_seconds"]
            print(f"  datatrove (trafilatura, its default extractor): {per_core_trafilatura:8.1f} docs/s per core, kept {len(default_chain['kept'])}")

        # 2. filters only, on identical texts
        print("\n2. Filters only: the same extracted texts (resiliparse) through both filter chains")
        identifier = LanguageIdentifier()
        texts = []
        for page in pages:
            text = extract_resiliparse(page["html"]) if page["html"] else ""
            if text.strip():
                texts.append({"id": page["id"], "text": text, "language": identifier.predict(text)[0]})
        with open(texts_file, "w", encoding="utf-8") as out:
            for item in texts:
                out.write(json.dumps({"id": item["id"], "text": item["text"]}) + "\n")
        filtered = peer(python, "filters", str(texts_file), repeats)
        peer_decisions = filtered["decisions"]
        peer_filter_rate = len(texts) / filtered["cpu_seconds"]
        print(f"  datatrove:              {peer_filter_rate:8.1f} docs/s per core")
        language_of = {item["id"]: item["language"] for item in texts}
        agreement, filter_rate = {}, {}
        for mode in ("english", "multilingual"):
            ours, cpu = sluice_filters(texts, mode, args.repeats)
            filter_rate[mode] = len(texts) / cpu
            same = {doc_id for doc_id in ours if (ours[doc_id][0] == "kept") == (peer_decisions[doc_id][0] == "kept")}
            agreement[mode] = len(same) / len(ours)
            english = [doc_id for doc_id in ours if language_of[doc_id] == "en"]
            same_en = sum(1 for doc_id in english if doc_id in same)
            print(
                f"  sluice {mode:12s}:    {filter_rate[mode]:8.1f} docs/s per core; same decision on {len(same)}/{len(ours)} = "
                f"{agreement[mode]:.3f} (English texts: {same_en}/{len(english)}); kept {sum(v[0] == 'kept' for v in ours.values())}, "
                f"datatrove kept {sum(v[0] == 'kept' for v in peer_decisions.values())}"
            )
            differing = Counter(
                (ours[d][1] or "kept", peer_decisions[d][1] or "kept", language_of[d])
                for d in ours
                if (ours[d][0] == "kept") != (peer_decisions[d][0] == "kept")
            )
            for (mine, theirs, language), count in differing.most_common(8):
                print(f"      {count:4d} x  sluice {mine:28s} datatrove {theirs:28s} [{language}]")

        # 3. per-language kept counts (whole chains)
        print("\n3. Kept documents per language (whole chains)")
        by_language_sluice, by_language_peer = Counter(kept_sluice.values()), Counter(kept_peer.values())
        pages_per_language = Counter(language_of.values())
        print(f"  {'language':8s} {'pages':>6s} {'sluice':>7s} {'datatrove':>10s}")
        for language in sorted(set(by_language_sluice) | set(by_language_peer) | set(pages_per_language)):
            print(f"  {language:8s} {pages_per_language.get(language, 0):6d} {by_language_sluice.get(language, 0):7d} {by_language_peer.get(language, 0):10d}")

    chain_config = f"resiliparse both sides, {n} pages, {files} langs, CPU time"
    filter_config = f"same resiliparse texts, 4 filters, {len(texts)} texts"
    print()
    figure("cleaning_docs_per_s_per_core_sluice", per_core_sluice, "-", chain_config)
    figure("cleaning_docs_per_s_per_core_datatrove", per_core_peer, "-", chain_config)
    figure("cleaning_docs_per_s_ratio", ratio, ">= 10", chain_config + f", best pass of {args.rounds} rounds x {args.passes} each side")
    figure("cleaning_docs_per_s_ratio_median_round", ratio_median, "-", chain_config + f", median of {args.rounds} interleaved rounds' ratios")
    new_config = (
        f"resiliparse both sides, {n} pages, {files} langs, CPU time; sluice + toxicity + code share + perplexity (KenLM order 5, "
        f"{len(models)} language models from {args.reference}, scoring only); datatrove + C4BadWordsFilter (sluice's word lists) + "
        "CCNet KenlmModel.get_perplexity (the same ARPA models, without its SentencePiece step); datatrove has no code-share step"
    )
    figure("cleaning_docs_per_s_ratio_new_steps", ratio_new, ">= 10", new_config + f"; best pass of {args.rounds} rounds x {args.passes} each side")
    figure("cleaning_docs_per_s_ratio_new_steps_median_round", ratio_new_median, "-", new_config + f"; median of {args.rounds} interleaved rounds' ratios")
    figure("cleaning_filters_docs_per_s_ratio", filter_rate["english"] / peer_filter_rate, "-", filter_config + ", english word splitting both sides, CPU time")
    figure("cleaning_filters_docs_per_s_ratio_multilingual", filter_rate["multilingual"] / peer_filter_rate, "-", filter_config + ", sluice multilingual, CPU time")
    figure("filter_decision_agreement", agreement["english"], ">= 0.97", filter_config + ", english word splitting both sides")
    figure("filter_decision_agreement_multilingual", agreement["multilingual"], "- (differs by design)", filter_config + ", sluice multilingual")
    report_attributes(pages, max(args.passes, 3))
    if args.trafilatura_peer:
        figure("cleaning_docs_per_s_ratio_vs_trafilatura", per_core_sluice / per_core_trafilatura, "- (not the same extractor)",
               f"sluice resiliparse vs datatrove Trafilatura, {n} pages, {files} langs, CPU time")


if __name__ == "__main__":
    main()
