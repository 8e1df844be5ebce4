"""Cost and effect of the curation steps of issue 19 (code share, toxicity, perplexity) inside sluice's
default cleaning chain, on the shared corpus's WARC pages.

    python benchmarks/curation_steps.py [--pages-per-file 40] [--snapshot web/2026-01]

1. Per-step CPU cost: the whole default chain (with perplexity on, models trained on the corpus's reference
   snapshot by the perplexity_model code path) runs over the pages; each step's `apply` is timed with the
   process CPU clock. Printed: microseconds per document reaching each step, and the new steps' share of the
   chain's CPU time. benchmarks/cleaning.py compares the chain with datatrove's; the new steps' share says
   how much of its ratio they take (ratio with them = ratio without / (1 + share)). The models' cut-offs here
   come from the reference pages themselves (no other-source sample), so nearly every web page lands in
   `tail`; the asset takes them from the other sources.
2. What the steps flag on the corpus: pages by code share (the Debian handbook has code listings), pages
   with listed terms and dropped by toxicity, perplexity buckets.

Pages whose HTML holds a run of five dots are skipped until the tokenizer fix of issue 13 lands (a dotted
leader is exponential in main's tokenizer regex); the count is printed.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.minhash_corpus import load_pages  # noqa: E402
from benchmarks.peers import figure  # noqa: E402

NEW_STEPS = ("code_share", "toxicity", "perplexity")


def train_models(snapshot: str, scratch: str) -> dict[str, dict]:
    """Per-language KenLM models on the corpus's reference pages (cut-offs from the reference itself)."""
    from sluice.clean.models.langid import LanguageIdentifier
    from sluice.clean.steps import Document
    from sluice.clean.steps.extract import DecodeText, extract_resiliparse
    from sluice.clean.steps.perplexity import load_model, perplexity, quantile_cutoffs, text_line, train_arpa

    identifier = LanguageIdentifier()
    lines: dict[str, list[str]] = defaultdict(list)
    for page in load_pages(snapshot, 10_000):
        if b"....." in page["content"]:
            continue
        doc = Document(page["id"], "r", "r", page["url"], None, "text/html", page["content"], page["charset"])
        if DecodeText().apply(doc) is None:
            text = extract_resiliparse(doc.text)
            if text.strip():
                lines[identifier.predict(text)[0]].append(text_line(text))
    models = {}
    for code, texts in sorted(lines.items()):
        if len(texts) >= 3:
            path = f"{scratch}/{code}.arpa"
            train_arpa(texts, path, order=5)
            values = [perplexity(load_model(path), t) for t in texts]
            models[code] = {"key": path, "cutoffs": list(quantile_cutoffs(values, (1 / 3, 2 / 3)))}
    return models


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pages-per-file", type=int, default=40)
    parser.add_argument("--snapshot", default="web/2026-01")
    parser.add_argument("--reference", default="reference/2026-01")
    args = parser.parse_args()

    from sluice.clean import CleaningPipeline, clear_text_caches
    from sluice.clean.steps import Document, Route
    from sluice.config import CleaningSettings, PerplexitySettings, PIISettings

    pages = load_pages(args.snapshot, args.pages_per_file)
    skipped = [p for p in pages if b"....." in p["content"]]
    pages = [p for p in pages if b"....." not in p["content"]]
    print(f"{len(pages)} pages from {args.snapshot} ({args.pages_per_file} per file), {len(skipped)} skipped (dotted leaders)")
    with tempfile.TemporaryDirectory() as scratch:
        models = train_models(args.reference, scratch)
        print(f"perplexity models for {sorted(models)} from {args.reference}")
        settings = CleaningSettings(min_chars=0, pii=PIISettings(enabled=False), perplexity=PerplexitySettings(enabled=True))
        pipeline = CleaningPipeline.from_settings(settings, perplexity_models=(models, lambda key: key))
        spent: Counter[str] = Counter()
        for step in pipeline.steps:
            apply = step.apply

            def timed(doc, apply=apply, name=step.name):
                started = time.process_time()
                try:
                    return apply(doc)
                finally:
                    spent[name] += time.process_time() - started

            step.apply = timed  # type: ignore[method-assign]
        warm = Document("warm", "b", "b", None, None, "text/html", b"<p>warm up the helper and the models</p>", "utf-8")
        pipeline.run(warm)
        clear_text_caches()  # training the models above split the reference pages: start the timing cold
        spent.clear()
        reached_before = dict(pipeline.stats.reached)
        shares, buckets, routed = [], Counter(), 0
        toxic_pages = 0
        for page in pages:
            doc = Document(page["id"], "b", "b", page["url"], None, "text/html", page["content"], page["charset"])
            outcome = pipeline.run(doc)
            values = doc.values  # what the steps measured (Step.columns)
            if values.get("code_share") is not None:
                shares.append(values["code_share"])
            if values.get("toxic_terms"):
                toxic_pages += 1
            if values.get("perplexity_bucket") and outcome is None:
                buckets[values["perplexity_bucket"]] += 1
            routed += outcome is not None and isinstance(outcome[1], Route)
        pipeline.close()
    stats = pipeline.stats
    reached = {name: stats.reached[name] - reached_before.get(name, 0) for name in stats.reached}
    total = sum(spent.values())
    print("\n1. CPU per step (microseconds per document reaching it; share of the chain's CPU)")
    for name in reached:
        per_doc = spent[name] / reached[name] * 1e6 if reached[name] else 0.0
        marker = "  <- new" if name in NEW_STEPS else ""
        print(f"  {name:22s} {reached[name]:5d} docs {per_doc:9.1f} us/doc {spent[name] / total:6.1%}{marker}")
    new_share = sum(spent[name] for name in NEW_STEPS) / (total - sum(spent[name] for name in NEW_STEPS))
    print(f"  chain: {total / len(pages) * 1e3:.2f} ms CPU per input document; the new steps add {new_share:.1%} to the rest")
    print("\n2. What they flag")
    flagged = {cut: sum(s > cut for s in shares) / len(shares) for cut in (0.1, 0.3, 0.5)}
    print(f"  code share: mean {sum(shares) / len(shares):.3f}; pages above 0.1 {flagged[0.1]:.1%}, 0.3 {flagged[0.3]:.1%}, 0.5 {flagged[0.5]:.1%}")
    print(f"  toxicity: {toxic_pages} pages with listed terms, {stats.drops.get('toxic_content', 0)} dropped")
    print(f"  perplexity buckets of kept pages: {dict(buckets)}")
    print(f"  drops: {dict(stats.drops.most_common(8))}")
    print()
    for name in NEW_STEPS:
        figure(f"step_us_per_doc_{name}", spent[name] / reached[name] * 1e6 if reached.get(name) else 0.0, "cheap: << the chain's per-document cost")
    figure("new_steps_added_cpu_share", new_share, "<= 0.2")
    figure("code_share_pages_above_0_3", flagged[0.3], "- (handbook pages with code listings)")


if __name__ == "__main__":
    main()
