"""Real pages: extraction against trafilatura, and what the default filters keep of real articles.

    python benchmarks/real_pages.py [--repeats 3] [--show-drops] [--corpus-snapshot web/2026-01] [--sets tuned,heldout,dev]

Two sets. The tuned set: `benchmarks/data/readability-pages.tar.xz`, the 93 real pages of Mozilla Readability's
test set (news, blogs, docs and wikis in English and eight other languages; Apache-2.0, see readability-NOTICE;
built by scripts/build_readability_pages.py), on which sluice's extraction settings were chosen. Each page has its
source HTML and its article as reviewed HTML; pages marked `readerable: false` are not articles and are left out
of sections 1 and 2 (91 remain). The held-out set (section 4): `benchmarks/data/trafilatura-pages.tar.xz`, 267
annotated pages of trafilatura's own evaluation (Apache-2.0, see trafilatura-NOTICE; built by
scripts/build_trafilatura_pages.py), none in the tuned set, never used to choose a setting. The development set
(`--sets dev`, not in the default run): `.bench_data/trafilatura-dev-pages.tar.xz`, another quarter of those pages,
disjoint from the held-out one, on which extraction settings may be chosen; it is not committed (built by
`scripts/build_trafilatura_pages.py TRAFILATURA_GIT_DIR --split dev`) and scored as section 4, without figures.

1. Extraction. Gold text = the article HTML's text (lxml; block elements end lines: neither extractor's
   code). Per page, token precision / recall / F1 of the extracted text against the gold text, as bags of
   lower-cased word tokens (`\\w+`, each CJK character a token); mean and median over pages. Speed = pages
   per CPU second of this process (one core), best of `--repeats` passes, each extractor called at the same
   level (a function from HTML string to text). Extractors: sluice's default (resiliparse with sluice's
   options and the trafilatura second opinion, sluice.clean.steps.extract.extractor_for), resiliparse's defaults
   (`extract_plain_text(main_content=True)`), trafilatura's defaults (`extract(html)`) and trafilatura with
   `favor_precision` (datatrove's call: favor_precision, no comments, deduplicate). The F1 difference to
   trafilatura `favor_precision` is printed with a 95 % paired bootstrap interval over pages.
2. Filters. The articles whose gold text is over 500 characters, through the default cleaning chain
   (CleaningSettings(): language ID, Gopher, C4, FineWeb, toxicity ...), fed (a) the gold text and (b) the
   page's HTML (the default extraction first): the share kept and the drop reasons. The same with
   `preset: datatrove` (datatrove's rule definitions), to show what the defaults' departures buy.
3. What the departures cost elsewhere: the default chain's keep/drop decision on every page of a corpus
   snapshot (`../shared/corpus/<--corpus-snapshot>`, handbook pages in 13 languages) and on the set's
   non-article pages, with each of sluice's extraction and C4 departures reverted (`post_meta: true`,
   `skip_elements: []`, `link_density: null`, `trailing_labels: 0` with `empty_space_lines: false`,
   `curly_bracket_code_lines: drop_document`): the decisions that differ from the defaults'.
4. The held-out set, scored as trafilatura's own evaluation scores it (tests/eval_common.py there): per page, each
   must-contain snippet found in the extracted text (whitespace-normalized, case-sensitive substring) is a true
   positive, each missed one a false negative, each must-not-contain snippet found a false positive; the counts
   are summed over all pages, precision = TP / (TP + FP), recall = TP / (TP + FN), F1 = 2 TP / (2 TP + FP + FN),
   with a 95 % bootstrap interval (pages resampled) of the F1 difference to trafilatura `favor_precision`. Speed
   as in section 1. Filters: the set has no reviewed article text, so its articles are the pages where
   trafilatura's default extraction holds every must-contain snippet and no must-not-contain one (a text the
   annotations vouch for, written by neither sluice nor its settings) and is over 500 characters; that text and
   the page's HTML go through the default chain as in section 2. The set has no pages marked as non-articles: the
   non-article figure is the tuned set's.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import tarfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.peers import figure  # noqa: E402

DATA = ROOT / "benchmarks" / "data" / "readability-pages.tar.xz"
HELDOUT = ROOT / "benchmarks" / "data" / "trafilatura-pages.tar.xz"
DEV = ROOT / ".bench_data" / "trafilatura-dev-pages.tar.xz"  # git-ignored: scripts/build_trafilatura_pages.py --split dev
MIN_ARTICLE_CHARS = 500
_BLOCK = frozenset(
    ["p", "div", "br", "li", "ul", "ol", "h1", "h2", "h3", "h4", "h5", "h6", "pre", "blockquote", "table", "tr", "td", "th", "section", "article", "header", "footer", "figure", "figcaption", "dd", "dt", "dl", "hr"]
)
_WORD = re.compile(r"\w+")
_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u9fff\uac00-\ud7af]")


def load_pages(articles: bool = True) -> list[dict]:
    """The articles of the set (name, source HTML, gold text, metadata), or with `articles=False` its pages
    marked as not articles (no gold text)."""
    files: dict[str, dict[str, bytes]] = {}
    with tarfile.open(DATA, "r:xz") as archive:
        for member in archive.getmembers():
            name, file = member.name.split("/")
            files.setdefault(name, {})[file] = archive.extractfile(member).read()  # type: ignore[union-attr]
    pages = []
    for name in sorted(files):
        meta = json.loads(files[name]["expected-metadata.json"])
        if (meta.get("readerable") is not False) != articles:
            continue
        html = files[name]["source.html"].decode("utf-8", "replace")
        gold = gold_text(files[name]["expected.html"]) if articles else ""
        pages.append({"name": name, "html": html, "gold": gold, "lang": meta.get("lang")})
    return pages


def gold_text(article_html: bytes) -> str:
    """The article's text, each block element on its own lines (lxml; independent of the extractors)."""
    import lxml.html

    root = lxml.html.fromstring(article_html.decode("utf-8"))
    for element in root.iter():
        if isinstance(element.tag, str) and element.tag.lower() in _BLOCK:
            element.text = "\n" + (element.text or "")
            element.tail = "\n" + (element.tail or "")
    return re.sub(r"\n\s*\n\s*", "\n\n", root.text_content()).strip()


def tokens(text: str) -> Counter[str]:
    words: list[str] = []
    for word in _WORD.findall(text.lower()):
        words.extend(word) if _CJK.search(word) else words.append(word)
    return Counter(words)


def scores(extracted: str, gold: str) -> tuple[float, float, float]:
    """Token (precision, recall, F1) of `extracted` against `gold`."""
    found, wanted = tokens(extracted), tokens(gold)
    common = sum((found & wanted).values())
    precision = common / sum(found.values()) if found else 0.0
    recall = common / sum(wanted.values()) if wanted else 0.0
    return precision, recall, 2 * precision * recall / (precision + recall) if common else 0.0


def load_heldout(path: Path = HELDOUT) -> list[dict]:
    """The held-out pages (or the development set's, `path` = DEV): name = trafilatura's file name, URL, HTML
    decoded as the chain would, must-contain `with` and must-not-contain `without` snippets, in URL order."""
    from sluice.clean.steps.extract import detect_charset

    with tarfile.open(path, "r:xz") as archive:
        files = {member.name: archive.extractfile(member).read() for member in archive.getmembers()}  # type: ignore[union-attr]
    pages = []
    for url, item in sorted(json.loads(files["annotations.json"]).items()):
        content = files[f"pages/{item['file']}"]
        charset, _ = detect_charset(content, None, True)
        html = content.decode(charset, "replace")
        pages.append({"name": item["file"], "url": url, "html": html, "with": item["with"], "without": item["without"]})
    return pages


def _norm(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


def snippet_counts(extracted: str, page: dict) -> tuple[int, int, int, int]:
    """(TP, FP, FN, TN) of one page as trafilatura's evaluation counts them: a must-contain snippet found in the
    whitespace-normalized text is a TP (missed: FN), a must-not-contain snippet found is an FP (absent: TN)."""
    text = _norm(extracted)
    tp = sum(_norm(snippet) in text for snippet in page["with"])
    fp = sum(_norm(snippet) in text for snippet in page["without"])
    return tp, fp, len(page["with"]) - tp, len(page["without"]) - fp


def pooled_scores(counts: list[tuple[int, int, int, int]]) -> tuple[float, float, float]:
    """(precision, recall, F1) of per-page (TP, FP, FN, TN) summed over pages (trafilatura's ConfusionMatrix)."""
    tp, fp, fn = (sum(row[i] for row in counts) for i in range(3))
    precision = tp / (tp + fp) if tp + fp else 0.0
    recall = tp / (tp + fn) if tp + fn else 0.0
    return precision, recall, 2 * tp / (2 * tp + fp + fn) if tp else 0.0


def pooled_bootstrap(ours: list[tuple], theirs: list[tuple], rounds: int = 10_000, seed: int = 0) -> tuple[float, float]:
    """95 % interval of pooled F1 ours - theirs, resampling pages (the same pages for both; seeded)."""
    import numpy as np

    a, b = np.array(ours)[:, :3], np.array(theirs)[:, :3]
    picks = np.random.default_rng(seed).integers(0, len(a), size=(rounds, len(a)))

    def f1(counts: np.ndarray) -> np.ndarray:
        sums = counts[picks].sum(axis=1)
        return 2 * sums[:, 0] / np.maximum(2 * sums[:, 0] + sums[:, 1] + sums[:, 2], 1)

    differences = f1(a) - f1(b)
    return float(np.quantile(differences, 0.025)), float(np.quantile(differences, 0.975))


def extractors() -> dict[str, Callable[[str], str]]:
    import trafilatura
    from resiliparse.extract.html2text import extract_plain_text
    from resiliparse.parse.html import HTMLTree

    from sluice.clean.steps.extract import extract_trafilatura, extractor_for
    from sluice.config import ExtractionSettings

    return {
        "sluice default": extractor_for(ExtractionSettings()),
        "resiliparse defaults": lambda html: extract_plain_text(HTMLTree.parse(html), main_content=True),
        "trafilatura default": lambda html: trafilatura.extract(html) or "",
        "trafilatura favor_precision": extract_trafilatura,
    }


def timed_texts(extract: Callable[[str], str], pages: list[dict], repeats: int) -> tuple[list[str], float]:
    """The extractor's text of each page in the first pass, and pages per CPU second of this process (best of
    `repeats` passes). trafilatura's `deduplicate` (favor_precision's call, and sluice's second opinion) counts
    paragraphs across calls in a process-wide cache: it is emptied before each pass, so that no pass, and no
    extractor, has text cut because an earlier pass or extractor saw the same pages (within a pass it works
    across pages, as in a datatrove worker)."""
    from trafilatura.deduplication import LRU_TEST

    best, texts = float("inf"), []
    for attempt in range(repeats):
        LRU_TEST.clear()
        started = time.process_time()
        output = [extract(page["html"]) for page in pages]
        best = min(best, time.process_time() - started)
        texts = output if attempt == 0 else texts
    return texts, len(pages) / best


def token_result(texts: list[str], pages: list[dict], pages_per_s: float) -> dict:
    """Token scores of one extractor's texts against the gold texts: mean and median over pages, F1 by page."""
    per_page = [scores(text, page["gold"]) for text, page in zip(texts, pages, strict=True)]
    result = {"pages_per_s": pages_per_s, "texts": texts}
    for index, measure in enumerate(("precision", "recall", "f1")):
        values = [row[index] for row in per_page]
        result[measure], result[f"{measure}_median"] = statistics.fmean(values), statistics.median(values)
    result["f1_by_page"] = {page["name"]: row[2] for page, row in zip(pages, per_page, strict=True)}
    return result


def paired_bootstrap(ours: dict[str, float], theirs: dict[str, float], rounds: int = 10_000, seed: int = 0) -> tuple[float, float]:
    """95 % interval of the mean per-page difference ours - theirs, resampling pages (seeded)."""
    import numpy as np

    differences = np.array([ours[name] - theirs[name] for name in sorted(ours)])
    rng = np.random.default_rng(seed)
    means = differences[rng.integers(0, len(differences), size=(rounds, len(differences)))].mean(axis=1)
    return float(np.quantile(means, 0.025)), float(np.quantile(means, 0.975))


def page_documents(pages: list[dict], field: str) -> list[tuple]:
    """(id, URL (the page's own where the set has one), content type, bytes, charset) of each page's gold text
    (`field` = gold) or HTML (`html`)."""
    content_type = "text/html" if field == "html" else "text/plain"
    return [(page["name"], page.get("url", f"https://example.org/{page['name']}"), content_type, page[field].encode(), "utf-8") for page in pages]


def chain_drops(documents: list[tuple], overrides: dict) -> list:
    """The default chain's (CleaningSettings(**overrides)) outcome for each (id, URL, content type, bytes,
    charset): None where it keeps the document, else its Drop."""
    from sluice.clean import CleaningPipeline
    from sluice.clean.steps import Document
    from sluice.config import CleaningSettings

    pipeline = CleaningPipeline.from_settings(CleaningSettings(**overrides))
    outcomes = []
    for doc_id, url, content_type, content, charset in documents:
        result = pipeline.run(Document(doc_id, "web", "s", url, None, content_type, content, charset))
        outcomes.append(None if result is None else result[1])
    pipeline.close()
    return outcomes


def decisions(documents: list[tuple], overrides: dict) -> list[str]:
    """"kept" or the drop reason for each document (see chain_drops)."""
    return ["kept" if drop is None else drop.reason for drop in chain_drops(documents, overrides)]


def filter_articles(articles: list[dict], preset: str, field: str) -> tuple[int, Counter[str], list[tuple[str, str, str]]]:
    """(kept, drop reasons, dropped (name, reason, detail)) of the default chain (with `preset`) over the
    articles, fed their gold text (`field` = gold) or their HTML (`field` = html)."""
    drops = chain_drops(page_documents(articles, field), {"preset": preset})
    dropped = [(page["name"], drop.reason, drop.detail) for page, drop in zip(articles, drops, strict=True) if drop is not None]
    return len(articles) - len(dropped), Counter(reason for _, reason, _ in dropped), dropped


DEPARTURES = {"extraction.post_meta: true": {"extraction": {"post_meta": True}},
              "extraction.skip_elements: []": {"extraction": {"skip_elements": []}},
              "extraction.link_density: null": {"extraction": {"link_density": None}},
              "extraction.trailing_labels: 0, empty_space_lines: false": {"extraction": {"trailing_labels": 0, "empty_space_lines": False}},
              "c4.curly_bracket_code_lines: drop_document": {"c4": {"curly_bracket_code_lines": "drop_document"}}}


def departures_elsewhere(snapshot: str) -> None:
    """Section 3: decisions on the corpus snapshot and the non-article pages with each departure reverted."""
    from benchmarks.minhash_corpus import load_pages as corpus_pages

    corpus = [(p["id"], p["url"], "text/html", p["content"], p["charset"]) for p in corpus_pages(snapshot, 10**9)]
    junk = page_documents(load_pages(articles=False), "html")
    print(f"\n3. The departures elsewhere: {len(corpus)} pages of {snapshot}, {len(junk)} non-article pages of the set")
    for label, documents in (("corpus", corpus), ("non-articles", junk)):
        default = decisions(documents, {})
        print(f"  {label:12s} defaults: kept {default.count('kept')}/{len(documents)}")
        for name, overrides in DEPARTURES.items():
            other = decisions(documents, overrides)
            changed = Counter(f"{a} -> {b}" for a, b in zip(default, other, strict=True) if a != b)
            print(f"  {label:12s} with {name}: kept {other.count('kept')}; decisions that differ: {sum(changed.values())} {dict(changed)}")


def run_extractors(pages: list[dict], repeats: int, score: Callable[[list[str], list[dict], float], dict]) -> dict[str, dict]:
    """Each extractor's `score(texts, pages, pages_per_s)` on the pages (imports and lazy state warmed up first)."""
    results = {}
    for name, extract in extractors().items():
        extract(pages[0]["html"])
        texts, pages_per_s = timed_texts(extract, pages, repeats)
        results[name] = score(texts, pages, pages_per_s)
    return results


def tuned_section(args: argparse.Namespace) -> None:
    """Sections 1 to 3 on the tuned set, and its figures."""
    pages = load_pages()
    print(f"{len(pages)} articles from {DATA.name} (one core, best of {args.repeats} passes)")
    print("\n1. Extraction: token precision / recall / F1 against the gold article text (mean, median), pages per CPU second")
    results = run_extractors(pages, args.repeats, token_result)
    for name, r in results.items():
        print(
            f"  {name:28s} P {r['precision']:.3f} ({r['precision_median']:.3f})  R {r['recall']:.3f} ({r['recall_median']:.3f})  "
            f"F1 {r['f1']:.3f} ({r['f1_median']:.3f})  {r['pages_per_s']:7.1f} pages/s"
        )
    ours, peer = results["sluice default"], results["trafilatura favor_precision"]
    low, high = paired_bootstrap(ours["f1_by_page"], peer["f1_by_page"])
    print(f"  F1 sluice - trafilatura favor_precision: {ours['f1'] - peer['f1']:+.3f} (95 % paired bootstrap interval {low:+.3f} .. {high:+.3f})")
    worst = sorted(ours["f1_by_page"].items(), key=lambda item: item[1])[:5]
    print("  sluice's five lowest F1: " + ", ".join(f"{name} {f1:.2f} (trafilatura {peer['f1_by_page'][name]:.2f})" for name, f1 in worst))

    articles = [page for page in pages if len(page["gold"]) > MIN_ARTICLE_CHARS]
    print(f"\n2. Filters: the {len(articles)} articles over {MIN_ARTICLE_CHARS} characters through the default chain")
    kept_share = {}
    for preset in ("sluice", "datatrove"):
        for field, label in (("gold", "gold text"), ("html", "extracted from HTML")):
            kept, reasons, dropped = filter_articles(articles, preset, field)
            kept_share[preset, field] = kept / len(articles)
            print(f"  preset {preset:9s} {label:20s} kept {kept}/{len(articles)} = {kept / len(articles):.1%}; drops: {dict(reasons.most_common())}")
            if args.show_drops:
                for name, reason, detail in dropped:
                    print(f"      {name:28s} {reason:30s} {detail[:100]}")
            if preset == "sluice" and field == "gold":
                toxic_drops = reasons["toxic_content"]

    junk = load_pages(articles=False)
    junk_kept = decisions(page_documents(junk, "html"), {}).count("kept")
    print(f"  non-article pages (readerable: false) kept by the default chain: {junk_kept}/{len(junk)}")
    if args.corpus_snapshot:
        departures_elsewhere(args.corpus_snapshot)

    config = f"readability test pages, {len(pages)} articles, 1 core"
    figure("real_pages_extraction_f1", round(ours["f1"], 3), f">= {peer['f1']:.3f} (trafilatura favor_precision's)", config)
    figure("real_pages_extraction_speedup_vs_trafilatura", round(ours["pages_per_s"] / peer["pages_per_s"], 1), ">= 5", config)
    figure("real_pages_articles_kept_gold", round(kept_share["sluice", "gold"], 3), ">= 0.95", config)
    figure("real_pages_articles_kept_extracted", round(kept_share["sluice", "html"], 3), "report; datatrove preset "
           f"{kept_share['datatrove', 'html']:.3f}", config)
    figure("real_pages_articles_dropped_by_toxicity", toxic_drops, "report; none for terms in a reporting context", config)
    figure("real_pages_nonarticles_kept", junk_kept, f"report; of {len(junk)} pages marked readerable: false, "
           "no more after a default change", config)


def snippet_result(texts: list[str], pages: list[dict], pages_per_s: float) -> dict:
    counts = [snippet_counts(text, page) for text, page in zip(texts, pages, strict=True)]
    precision, recall, f1 = pooled_scores(counts)
    return {"precision": precision, "recall": recall, "f1": f1, "pages_per_s": pages_per_s, "counts": counts, "texts": texts}


def heldout_articles(pages: list[dict], vouched: list[str]) -> list[dict]:
    """The held-out pages whose `vouched` text (trafilatura default's) holds every must-contain snippet and no
    must-not-contain one and is over MIN_ARTICLE_CHARS, with that text as their gold text."""
    articles = []
    for page, text in zip(pages, vouched, strict=True):
        tp, fp, fn, _ = snippet_counts(text, page)
        if fn == 0 and fp == 0 and len(text) > MIN_ARTICLE_CHARS:
            articles.append(page | {"gold": text})
    return articles


def heldout_section(args: argparse.Namespace, dev: bool = False) -> None:
    """Section 4: the held-out set, and its figures; with `dev`, the development set scored the same way,
    without figures (its pages chose settings, so its scores are no evidence for them)."""
    pages = load_heldout(DEV if dev else HELDOUT)
    if dev:
        print(f"\nDevelopment set: {len(pages)} annotated pages from {DEV.name} (settings may be chosen on it)")
    else:
        print(f"\n4. Held out: {len(pages)} annotated pages from {HELDOUT.name} (never used to choose a setting)")
    print("  Extraction: must-contain / must-not-contain snippets, counts pooled over pages (trafilatura's evaluation)")
    results = run_extractors(pages, args.repeats, snippet_result)
    for name, r in results.items():
        print(f"  {name:28s} P {r['precision']:.3f}  R {r['recall']:.3f}  F1 {r['f1']:.3f}  {r['pages_per_s']:7.1f} pages/s")
    ours, peer = results["sluice default"], results["trafilatura favor_precision"]
    low, high = pooled_bootstrap(ours["counts"], peer["counts"])
    print(f"  F1 sluice - trafilatura favor_precision: {ours['f1'] - peer['f1']:+.3f} (95 % bootstrap interval {low:+.3f} .. {high:+.3f})")

    articles = heldout_articles(pages, results["trafilatura default"]["texts"])
    print(f"  Filters: the {len(articles)} pages whose trafilatura default text meets every annotation and is over "
          f"{MIN_ARTICLE_CHARS} characters, through the default chain")
    kept_share = {}
    for field, label in (("gold", "that text"), ("html", "extracted from HTML")):
        kept, reasons, dropped = filter_articles(articles, "sluice", field)
        kept_share[field] = kept / len(articles)
        print(f"  preset sluice    {label:20s} kept {kept}/{len(articles)} = {kept / len(articles):.1%}; drops: {dict(reasons.most_common())}")
        if args.show_drops:
            for name, reason, detail in dropped:
                print(f"      {name[:40]:40s} {reason:30s} {detail[:100]}")
    if dev:
        return

    config = f"trafilatura evaluation pages (held out), {len(pages)} pages, 1 core"
    figure("real_pages_heldout_extraction_f1", round(ours["f1"], 3), f">= {peer['f1']:.3f} (trafilatura favor_precision's)", config)
    figure("real_pages_heldout_speedup_vs_trafilatura", round(ours["pages_per_s"] / peer["pages_per_s"], 1), ">= 5", config)
    figure("real_pages_heldout_articles_kept_extracted", round(kept_share["html"], 3), ">= 0.92", f"{config}, {len(articles)} articles")
    figure("real_pages_heldout_articles_kept_text", round(kept_share["gold"], 3), ">= 0.92", f"{config}, {len(articles)} articles")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3, help="timed passes per extractor (the best counts)")
    parser.add_argument("--show-drops", action="store_true", help="list every dropped article with its reason")
    parser.add_argument("--corpus-snapshot", default="web/2026-01", help="corpus snapshot of section 3 ('' skips it)")
    parser.add_argument("--sets", default="tuned,heldout", help="which sets: tuned (sections 1-3), heldout (section 4), dev "
                        "(the development set, scored as section 4)")
    args = parser.parse_args()
    sets = set(args.sets.split(","))
    from benchmarks.peers import SHARED

    if "dev" in sets and not DEV.exists():
        parser.error(f"no {DEV} (--sets dev): build it with scripts/build_trafilatura_pages.py TRAFILATURA_GIT_DIR --split dev")
    if "tuned" in sets and args.corpus_snapshot and not any((SHARED / "corpus" / args.corpus_snapshot).glob("*.warc.gz")):
        parser.error(f"no *.warc.gz under {SHARED / 'corpus' / args.corpus_snapshot} (section 3): --corpus-snapshot '' skips it")
    if "tuned" in sets:
        tuned_section(args)
    if "heldout" in sets:
        heldout_section(args)
    if "dev" in sets:
        heldout_section(args, dev=True)


if __name__ == "__main__":
    main()
