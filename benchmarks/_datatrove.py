"""datatrove's side of the benchmarks; runs inside the datatrove peer environment (no sluice imports).

    python _datatrove.py chain    PAGES.jsonl LID_MODEL EXTRACTOR [EXTRAS.json] OUT.json   # extraction + LID + four filters
    python _datatrove.py filters  TEXTS.jsonl OUT.json                       # the four filters on given texts
    python _datatrove.py pipeline WARC_FOLDER LID_MODEL TOKENIZER WORK WORKERS OUT.json   # the whole pipeline

PAGES.jsonl: {"id", "url", "html"} per page; TEXTS.jsonl: {"id", "text"}. EXTRACTOR: `resiliparse` (the
extractor below, configured as sluice's) or `trafilatura` (datatrove's, favour_precision). Every filter runs
with its defaults (datatrove 0.10.1), in the order of datatrove's FineWeb example: GopherRepetition,
GopherQuality, C4Quality, FineWebQuality.

EXTRAS.json adds datatrove's closest equivalents of sluice's issue-19 steps after the four filters:
{"badwords": {lang: words file}} -> C4BadWordsFilter (its defaults: drop a page with any listed word) reading
the given word lists (sluice's toxicity lists) instead of downloading LDNOOBW's; {"kenlm": {lang: ARPA}} ->
datatrove's CCNet perplexity code (utils.perplexity.KenlmModel.get_perplexity: CCNet normalisation, one KenLM
score per line) with the document's language model (sluice's models), recorded in metadata, every page kept
(as CCNetPerplexityStats computes it). Its SentencePiece step is skipped (no CCNet .sp.model offline): the
normalised text is scored as whitespace tokens, which makes this side cheaper, not dearer. datatrove has no
code-share step.

`pipeline` is the FineWeb example's shape on a WARC crawl, one LocalPipelineExecutor per stage with
WORKERS tasks and workers (MinHash buckets: one task per bucket; clustering: one task):
  1. WarcReader -> Resiliparse -> LanguageFilter -> the four filters -> JsonlWriter
  2-5. MinhashDedupSignature, MinhashDedupBuckets, MinhashDedupCluster (MinhashConfig defaults: 5-grams,
     14 buckets x 8 hashes, as sluice's), then JsonlReader -> MinhashDedupFilter -> DocumentTokenizer (the given
     tokenizer.json, EOS after each document, no in-file shuffle: sluice's shards are not shuffled either).

Offline and input fixes, both documented in ../shared/ENVIRONMENT.md: the language filter's model lookup is
pointed at the local lid.176.ftz (it would download lid.176.bin); WarcReader keeps a record only when its
`WARC-Identified-Payload-Type` is HTML and asks libmagic when the header is absent (these WARC files have none,
and libmagic calls XHTML `text/xml`, which would drop every page), so the header is filled from the HTTP
Content-Type first. Executors fork their workers, so both patches reach them.
"""

import json
import os
import resource
import sys
import time

from datatrove.pipeline.extractors.base import BaseExtractor

# sluice's extractor call (sluice/clean/steps/extract.py: extract_resiliparse), the same arguments.
RESILIPARSE_ARGS = {"main_content": True, "alt_texts": False, "links": False, "comments": False, "post_meta": False}


def cpu_seconds() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def best_of(repeats: int, run):
    """`run()`'s result and the least wall and CPU seconds of `repeats` calls (as sluice's side times)."""
    elapsed, cpu = float("inf"), float("inf")
    for _ in range(repeats):
        started, cpu_start = time.perf_counter(), cpu_seconds()
        result = run()
        elapsed, cpu = min(elapsed, time.perf_counter() - started), min(cpu, cpu_seconds() - cpu_start)
    return result, elapsed, cpu


def read_jsonl(path: str) -> list[dict]:
    with open(path, encoding="utf-8") as stream:
        return [json.loads(line) for line in stream]


def write_json(path: str, value: dict) -> None:
    with open(path, "w", encoding="utf-8") as stream:
        json.dump(value, stream)


def offline_patches(model_path: str) -> None:
    import datatrove.pipeline.readers.warc as warc
    import datatrove.utils.lid as lid

    lid.cached_asset_path_or_download = lambda *args, **kwargs: model_path
    original = warc.process_record
    if getattr(original, "patched", False):
        return

    def process_record(record):
        if record.rec_headers.get_header("WARC-Identified-Payload-Type") is None and record.http_headers is not None:
            mime = (record.http_headers.get_header("Content-Type") or "").split(";")[0].strip().lower()
            if mime:
                record.rec_headers.add_header("WARC-Identified-Payload-Type", mime)
        return original(record)

    process_record.patched = True
    warc.process_record = process_record


class Resiliparse(BaseExtractor):
    """A datatrove extractor running resiliparse as sluice runs it. datatrove 0.10.1 ships none; its main
    branch has one built the same way (a BaseExtractor whose extract() calls extract_plain_text with
    main_content=True). It runs in datatrove's extraction sandbox (a helper process with a per-document
    timeout), as every datatrove extractor does; the timeout is sluice's (cleaning.extraction.timeout_s)."""

    name = "⛏ Resiliparse"
    _requires_dependencies = ["resiliparse"]

    def __init__(self, timeout: float = 5.0):
        super().__init__(timeout)

    def extract(self, text: str) -> str:
        from resiliparse.extract.html2text import extract_plain_text
        from resiliparse.parse.html import HTMLTree

        return extract_plain_text(HTMLTree.parse(text), **RESILIPARSE_ARGS)


def extractor(name: str):
    if name == "resiliparse":
        return Resiliparse()
    from datatrove.pipeline.extractors import Trafilatura

    return Trafilatura(favour_precision=True)


def filters():
    from datatrove.pipeline.filters import (
        C4QualityFilter,
        FineWebQualityFilter,
        GopherQualityFilter,
        GopherRepetitionFilter,
    )

    return [GopherRepetitionFilter(), GopherQualityFilter(), C4QualityFilter(), FineWebQualityFilter()]


def run_filters(texts_path: str, out_path: str, repeats: int = 1) -> None:
    from datatrove.data import Document

    steps = filters()
    docs = read_jsonl(texts_path)

    def decide(item: dict) -> list[str]:
        doc = Document(text=item["text"], id=item["id"])
        for step in steps:
            result = step.filter(doc)
            passed, reason = (result, "") if isinstance(result, bool) else result
            if not passed:
                return [step.name, reason]
        return ["kept", ""]

    if docs:
        decide(docs[0])  # warm-up outside the timing: spaCy's tokenizer loads on first use
    decisions, elapsed, cpu = best_of(repeats, lambda: {item["id"]: decide(item) for item in docs})
    write_json(out_path, {"decisions": decisions, "seconds": elapsed, "cpu_seconds": cpu})


def badwords_filter(files: dict[str, str]):
    """C4BadWordsFilter reading the given per-language word files (only those languages have a list)."""
    import datatrove.pipeline.filters.c4_filters as c4

    c4._BADWORDS_LANGS = sorted(files)
    c4.cached_asset_path_or_download = lambda url, **kwargs: files[url.rsplit("/", 1)[-1]]
    step = c4.C4BadWordsFilter(fail_on_missing_language=False)
    for language in files:
        step._get_badwords(language)  # compiled before the timing, as sluice's matchers are
    return step


class _Untokenized:
    def tokenize(self, text: str) -> str:
        return text


def perplexity_step(arpas: dict[str, str]):
    """A filter keeping every page that records datatrove's CCNet perplexity under the page's language model."""
    import kenlm
    from datatrove.pipeline.filters.base_filter import BaseFilter
    from datatrove.utils.perplexity import KenlmModel

    models = {}
    for language, path in arpas.items():
        model = KenlmModel("local", language)
        model._model, model._tokenizer = kenlm.Model(path), _Untokenized()
        models[language] = model

    class CCNetPerplexity(BaseFilter):
        name = "CCNet perplexity"

        def filter(self, doc) -> bool:
            model = models.get(doc.metadata.get("language"))
            if model is not None:
                doc.metadata["ccnet_perplexity"] = model.get_perplexity(doc.text)
            return True

    return CCNetPerplexity()


def extra_steps(extras_path: str | None) -> list:
    if not extras_path:
        return []
    with open(extras_path, encoding="utf-8") as stream:
        extras = json.load(stream)
    return [badwords_filter(extras["badwords"]), perplexity_step(extras["kenlm"])]


def run_chain(
    pages_path: str, model_path: str, extractor_name: str, out_path: str, extras_path: str | None = None, repeats: int = 1
) -> None:
    from datatrove.data import Document
    from datatrove.pipeline.filters import LanguageFilter

    offline_patches(model_path)
    pages = read_jsonl(pages_path)
    pipeline = [extractor(extractor_name), LanguageFilter(), *filters(), *extra_steps(extras_path)]
    # Warm-up outside the timing: model load and imports, as sluice's side does before timing.
    pipeline[1].model.model  # noqa: B018
    list(pipeline[0].run(iter([Document(text="<p>warm up</p>", id="warm")]), rank=0, world_size=1))

    def documents():
        for page in pages:
            yield Document(text=page["html"], id=page["id"], metadata={"url": page["url"]})

    def one_pass() -> dict[str, str]:
        data = documents()
        for step in pipeline:
            data = step.run(data, rank=0, world_size=1)
        return {doc.id: doc.metadata.get("language", "unknown") for doc in data}

    kept, elapsed, cpu = best_of(repeats, one_pass)
    write_json(out_path, {"kept": kept, "documents": len(pages), "seconds": elapsed, "cpu_seconds": cpu})


def count_jsonl_gz(folder: str) -> int:
    import gzip

    count = 0
    for name in sorted(os.listdir(folder)):
        if name.endswith(".jsonl.gz"):
            with gzip.open(os.path.join(folder, name), "rt", encoding="utf-8") as stream:
                count += sum(1 for _ in stream)
    return count


def folder_bytes(folder: str) -> int:
    return sum(os.path.getsize(os.path.join(root, name)) for root, _, names in os.walk(folder) for name in names)


def run_pipeline(warc_folder: str, model_path: str, tokenizer: str, work: str, workers: int, out_path: str) -> None:
    from datatrove.executor import LocalPipelineExecutor
    from datatrove.pipeline.dedup import (
        MinhashDedupBuckets,
        MinhashDedupCluster,
        MinhashDedupFilter,
        MinhashDedupSignature,
    )
    from datatrove.pipeline.dedup.minhash import MinhashConfig
    from datatrove.pipeline.filters import LanguageFilter
    from datatrove.pipeline.readers import JsonlReader, WarcReader
    from datatrove.pipeline.tokens import DocumentTokenizer
    from datatrove.pipeline.writers import JsonlWriter

    offline_patches(model_path)
    config = MinhashConfig()
    folder = {name: os.path.join(work, name) for name in ("cleaned", "signatures", "buckets", "remove_ids", "tokens", "logs")}
    stages = [
        ("cleaning", workers, [WarcReader(warc_folder, glob_pattern="*/*.warc.gz"), Resiliparse(), LanguageFilter(), *filters(), JsonlWriter(folder["cleaned"])]),
        ("minhash_signatures", workers, [JsonlReader(folder["cleaned"]), MinhashDedupSignature(output_folder=folder["signatures"], config=config)]),
        ("minhash_buckets", config.num_buckets, [MinhashDedupBuckets(input_folder=folder["signatures"], output_folder=folder["buckets"], config=config)]),
        ("minhash_cluster", 1, [MinhashDedupCluster(input_folder=folder["buckets"], output_folder=folder["remove_ids"], config=config)]),
        (
            "minhash_filter_tokenize",
            workers,
            [
                JsonlReader(folder["cleaned"]),
                MinhashDedupFilter(input_folder=folder["remove_ids"]),
                DocumentTokenizer(output_folder=folder["tokens"], tokenizer_name_or_path=tokenizer, eos_token="<|endoftext|>", shuffle_documents=False),
            ],
        ),
    ]
    seconds, stage_cpu = {}, {}
    started, cpu = time.perf_counter(), cpu_seconds()
    for name, tasks, pipeline in stages:
        stage_start, stage_cpu_start = time.perf_counter(), cpu_seconds()
        LocalPipelineExecutor(
            pipeline=pipeline, tasks=tasks, workers=min(workers, tasks), logging_dir=os.path.join(folder["logs"], name), start_method="fork"
        ).run()
        seconds[name] = time.perf_counter() - stage_start
        stage_cpu[name] = cpu_seconds() - stage_cpu_start  # its forked workers are reaped by then
    elapsed, cpu = time.perf_counter() - started, cpu_seconds() - cpu
    tokens = sum(os.path.getsize(os.path.join(folder["tokens"], p)) // 2 for p in os.listdir(folder["tokens"]) if p.endswith(".ds"))
    result = {
        "seconds": elapsed,
        "cpu_seconds": cpu,
        "stage_seconds": seconds,
        "stage_cpu_seconds": stage_cpu,
        "cleaned_documents": count_jsonl_gz(folder["cleaned"]),
        "tokens": tokens,
        "bytes": {name: folder_bytes(path) for name, path in folder.items() if name != "logs"},
    }
    write_json(out_path, result)


if __name__ == "__main__":
    mode = sys.argv[1]
    if mode == "filters":
        run_filters(sys.argv[2], sys.argv[4], int(sys.argv[3]))
    elif mode == "chain":
        pages, lid, extractor_name, repeats, *extras, out = sys.argv[2:]
        run_chain(pages, lid, extractor_name, out, *extras, repeats=int(repeats))
    elif mode == "pipeline":
        run_pipeline(sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5], int(sys.argv[6]), sys.argv[7])
    else:
        sys.exit(f"unknown mode {mode!r}")
