"""datatrove's side of benchmarks/cleaning.py; runs inside the datatrove peer environment (no sluice imports).

    python _datatrove_clean.py chain   PAGES.jsonl LID_MODEL OUT.json   # extraction + LID + filters
    python _datatrove_clean.py filters TEXTS.jsonl OUT.json             # the four filters on given texts

PAGES.jsonl: {"id", "url", "html"} per page; TEXTS.jsonl: {"id", "text"}. Every filter runs with its
defaults (datatrove 0.10.1), in the order of datatrove's FineWeb example. Offline patch: the language
filter's model lookup is pointed at the local lid.176.ftz (it would download lid.176.bin).
"""

import json
import resource
import sys
import time


def cpu_seconds() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def read_jsonl(path: str) -> list[dict]:
    with open(path, encoding="utf-8") as stream:
        return [json.loads(line) for line in stream]


def write_json(path: str, value: dict) -> None:
    with open(path, "w", encoding="utf-8") as stream:
        json.dump(value, stream)


def filters():
    from datatrove.pipeline.filters import (
        C4QualityFilter,
        FineWebQualityFilter,
        GopherQualityFilter,
        GopherRepetitionFilter,
    )

    return [GopherRepetitionFilter(), GopherQualityFilter(), C4QualityFilter(), FineWebQualityFilter()]


def run_filters(texts_path: str, out_path: str) -> None:
    from datatrove.data import Document

    steps = filters()
    docs = read_jsonl(texts_path)
    decisions = {}
    started, cpu = time.perf_counter(), cpu_seconds()
    for item in docs:
        doc = Document(text=item["text"], id=item["id"])
        outcome = ["kept", ""]
        for step in steps:
            result = step.filter(doc)
            passed, reason = (result, "") if isinstance(result, bool) else result
            if not passed:
                outcome = [step.name, reason]
                break
        decisions[item["id"]] = outcome
    elapsed, cpu = time.perf_counter() - started, cpu_seconds() - cpu
    write_json(out_path, {"decisions": decisions, "seconds": elapsed, "cpu_seconds": cpu})


def run_chain(pages_path: str, model_path: str, out_path: str) -> None:
    import datatrove.utils.lid as lid
    from datatrove.data import Document
    from datatrove.pipeline.extractors import Trafilatura
    from datatrove.pipeline.filters import LanguageFilter

    lid.cached_asset_path_or_download = lambda *args, **kwargs: model_path
    pages = read_jsonl(pages_path)
    pipeline = [Trafilatura(favour_precision=True), LanguageFilter(), *filters()]
    # Warm-up outside the timing: model load and imports, as sluice's side does before timing.
    pipeline[1].model.model  # noqa: B018

    def documents():
        for page in pages:
            yield Document(text=page["html"], id=page["id"], metadata={"url": page["url"]})

    started, cpu = time.perf_counter(), cpu_seconds()
    data = documents()
    for step in pipeline:
        data = step.run(data, rank=0, world_size=1)
    kept = {doc.id: doc.metadata.get("language", "unknown") for doc in data}
    elapsed, cpu = time.perf_counter() - started, cpu_seconds() - cpu
    write_json(out_path, {"kept": kept, "documents": len(pages), "seconds": elapsed, "cpu_seconds": cpu})


if __name__ == "__main__":
    if sys.argv[1] == "filters":
        run_filters(sys.argv[2], sys.argv[3])
    elif sys.argv[1] == "chain":
        run_chain(sys.argv[2], sys.argv[3], sys.argv[4])
    else:
        sys.exit(f"unknown mode {sys.argv[1]!r}")
