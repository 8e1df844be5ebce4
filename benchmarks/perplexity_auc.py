"""Does perplexity under the reference source's n-gram model separate reference text from low-quality pages?

    python benchmarks/perplexity_auc.py [--data sample|corpus]

Reference documents (`sample`: the bundled sample's `reference` source, both snapshots; `corpus`: the shared
corpus's Debian Reference pages) are split by a hash of their id: 80 % train one KenLM model per language
(lmplz, order 5, the perplexity_model code path), 20 % are held out. Low-quality pages: the web pages
(`sample`: the bundled handbook snapshots; `corpus`: ../shared/corpus/web/2026-01) that sluice's heuristic
filters (Gopher, C4, FineWeb) drop, scored on their extracted text. AUC = the probability that a held-out
reference document has a lower perplexity than a low-quality page of the same language (pairs within each
language, pooled; ties count half). The kept web pages are compared too: perplexity measures closeness to
the reference text (CCNet's intent), so pages the heuristics keep separate from it as well; the gap between the
two AUCs is what is specific to low quality. The bundled sample holds few reference documents per language
(2-5 to train, 6 held out in all), so its figure is noisy; `--data corpus` has 62. Its "low-quality" pages are
also not low-fluency text: they are real Debian handbook prose (the same documentation family as the
reference), dropped almost all by `gopher_below_alpha_threshold` (too many words without a letter: commands,
paths, version numbers), which perplexity is not meant to see; the drop reasons are printed. On the sample
the figure stays near 0.66 whatever the model (order 3 or 5, whole-document or per-paragraph scoring).
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
import tempfile
from collections import Counter, defaultdict
from pathlib import Path

import xxhash
import zstandard

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.cleaning import load_pages  # noqa: E402
from benchmarks.peers import SHARED, figure  # noqa: E402


def sample_reference() -> list[tuple[str, str]]:
    docs = []
    for path in sorted((ROOT / "sample_data" / "reference").glob("*/*")):
        raw = path.read_bytes()
        data = gzip.decompress(raw) if path.suffix == ".gz" else zstandard.ZstdDecompressor().decompressobj().decompress(raw)
        for line in data.decode("utf-8").splitlines():
            item = json.loads(line)
            docs.append((f"{path.parent.name}:{item['id']}", item["text"]))
    return docs


def warc_pages(folder: Path) -> list[dict]:
    from warcio.archiveiterator import ArchiveIterator

    pages = []
    for path in sorted(folder.glob("*.warc.gz")):
        with open(path, "rb") as stream:
            for index, record in enumerate(ArchiveIterator(stream)):
                if record.rec_type == "response":
                    pages.append({"id": f"{path.name}:{index}", "url": record.rec_headers.get_header("WARC-Target-URI"), "content": record.content_stream().read(), "charset": None})
    return pages


def auc(positives: dict[str, list[float]], negatives: dict[str, list[float]]) -> tuple[float, int]:
    """P(positive < negative) over same-language pairs (ties count half), and the number of pairs."""
    wins = pairs = 0.0
    for language, low in positives.items():
        for p in low:
            for n in negatives.get(language, []):
                wins += 1.0 if p < n else 0.5 if p == n else 0.0
                pairs += 1
    return (wins / pairs if pairs else float("nan")), int(pairs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", choices=["sample", "corpus"], default="sample")
    args = parser.parse_args()

    from sluice.clean import CleaningPipeline
    from sluice.config import CleaningSettings, CodeShareSettings, PIISettings, ToxicitySettings
    from sluice.extract import DecodeText, extract_resiliparse
    from sluice.langid import LanguageIdentifier
    from sluice.perplexity import load_model, perplexity, text_line, train_arpa
    from sluice.steps import Document

    identifier = LanguageIdentifier()
    if args.data == "sample":
        reference = sample_reference()
        web = warc_pages(ROOT / "sample_data" / "web" / "2026-01") + warc_pages(ROOT / "sample_data" / "web" / "2026-02")
    else:
        reference = []
        for page in load_pages("reference/2026-01", 10_000):
            doc = Document(page["id"], "r", "r", None, None, "text/html", page["content"], page["charset"])
            if DecodeText().apply(doc) is None:
                reference.append((page["id"], extract_resiliparse(doc.text)))
        web = load_pages("web/2026-01", 10_000)
    train: dict[str, list[str]] = defaultdict(list)
    held: dict[str, list[str]] = defaultdict(list)
    for doc_id, text in reference:
        if not text.strip():
            continue
        language = identifier.predict(text)[0]
        (held if xxhash.xxh3_64_intdigest(doc_id.encode()) % 5 == 0 else train)[language].append(text_line(text))

    settings = CleaningSettings(min_chars=0, pii=PIISettings(enabled=False), toxicity=ToxicitySettings(enabled=False), code_share=CodeShareSettings(enabled=False))
    pipeline = CleaningPipeline.from_settings(settings)
    quality_steps = {"gopher_quality", "gopher_repetition", "c4", "fineweb_quality"}
    low: dict[str, list[str]] = defaultdict(list)
    kept: dict[str, list[str]] = defaultdict(list)
    reasons: Counter[str] = Counter()
    for page in web:
        doc = Document(page["id"], "w", "w", page["url"], None, "text/html", page["content"], page["charset"])
        outcome = pipeline.run(doc)  # a dropping filter leaves the text as it found it
        if outcome is None:
            kept[doc.language].append(text_line(doc.text or ""))
        elif outcome[0].name in quality_steps:
            low[doc.language].append(text_line(doc.text or ""))
            reasons[outcome[1].reason] += 1
    pipeline.close()
    print("low-quality pages by drop reason: " + ", ".join(f"{reason} {count}" for reason, count in reasons.most_common()))

    with tempfile.TemporaryDirectory() as scratch:
        ref_pp: dict[str, list[float]] = {}
        low_pp: dict[str, list[float]] = {}
        kept_pp: dict[str, list[float]] = {}
        print(f"{args.data}: {sum(map(len, train.values()))} reference documents to train, {sum(map(len, held.values()))} held out; "
              f"{sum(map(len, low.values()))} low-quality and {sum(map(len, kept.values()))} kept web pages")
        print(f"  {'language':8s} {'train':>5s} {'held':>5s} {'low':>5s} {'kept':>5s} {'ref median':>10s} {'low median':>10s} {'AUC low':>8s} {'AUC kept':>8s}")
        for language in sorted(train):
            if len(train[language]) < 2 or not held.get(language):
                continue
            path = f"{scratch}/{language}.arpa"
            train_arpa(train[language], path, order=5)
            model = load_model(path)
            ref_pp[language] = [perplexity(model, line) for line in held[language]]
            low_pp[language] = [perplexity(model, line) for line in low.get(language, [])]
            kept_pp[language] = [perplexity(model, line) for line in kept.get(language, [])]
            median = lambda v: sorted(v)[len(v) // 2] if v else float("nan")  # noqa: E731
            one_low = auc({language: ref_pp[language]}, low_pp)[0]
            one_kept = auc({language: ref_pp[language]}, kept_pp)[0]
            print(f"  {language:8s} {len(train[language]):5d} {len(held[language]):5d} {len(low_pp[language]):5d} {len(kept_pp[language]):5d} "
                  f"{median(ref_pp[language]):10.1f} {median(low_pp[language]):10.1f} {one_low:8.3f} {one_kept:8.3f}")
    value, pairs = auc(ref_pp, low_pp)
    value_kept, pairs_kept = auc(ref_pp, kept_pp)
    print(f"  pooled: AUC held-out reference vs low-quality pages {value:.3f} ({pairs} pairs), vs kept web pages {value_kept:.3f} ({pairs_kept} pairs)")
    print()
    figure(f"perplexity_auc_reference_vs_low_quality_{args.data}", value, ">= 0.8")
    figure(f"perplexity_auc_reference_vs_kept_web_{args.data}", value_kept, "- (closeness to the reference, not quality)")


if __name__ == "__main__":
    if not SHARED.exists():
        print(f"note: {SHARED} not found; --data corpus needs it", file=sys.stderr)
    main()
