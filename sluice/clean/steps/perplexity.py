"""Perplexity under an n-gram language model of the reference text (CCNet's filter), one model per language.

Training (the `perplexity_model` asset): KenLM's `lmplz` (modified Kneser-Ney, order `order`, with
`--discount_fallback` so small corpora train too) on the documents of the configured reference source of
each language, one document per line. Scoring: KenLM's Python query module (`kenlm` on PyPI) on the ARPA
file. Text given to both: the tokens of sluice.words (multilingual: spaceless scripts one character per
token), lower-cased, ASCII digits mapped to 0, joined by spaces; a document is one sentence (`<s> ... </s>`).
Perplexity = 10 ** (-log10 P(document) / (tokens + 1)).

Buckets (CCNet's head / middle / tail): per language, the `quantiles` (1/3, 2/3) of the perplexity of a
seeded sample of the other sources' documents in that language are the cut-offs; a document at or below the
first is `head`, above the second `tail`, else `middle`.

lmplz is not in the `kenlm` wheel (its pip install builds only the query module): `python -m
sluice.clean.steps.perplexity build-lmplz` (run by `make`) downloads the same kenlm 0.3.0 source distribution with pip and
builds the `lmplz` target with cmake into `<venv>/bin/lmplz`. It needs cmake, a C++ compiler, zlib and
Boost's program_options / system / thread / test development packages (Debian: libboost-program-options-dev
libboost-system-dev libboost-thread-dev libboost-test-dev; the Makefile installs them with apt-get where it
can). `$SLUICE_LMPLZ` names another lmplz.
"""

from __future__ import annotations

import heapq
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Callable, Iterable
from itertools import chain, islice
from pathlib import Path
from typing import Any

import pyarrow as pa

from sluice.clean.steps import Document, Drop, Step
from sluice.config import PerplexitySettings

KENLM_REQUIREMENT = "kenlm==0.3.0"
LMPLZ_ENV_VAR = "SLUICE_LMPLZ"
BUILD_PACKAGES = ("libboost-program-options-dev", "libboost-system-dev", "libboost-thread-dev", "libboost-test-dev")
_DIGITS = str.maketrans("123456789", "000000000")
_BATCH_TOKENS = 4096
_WINDOW_CHARS = 1 << 16  # characters tokenized at a time


def lm_line(tokens: Iterable[str]) -> str:
    """The model's view of a text's tokens: lower-cased, digits as 0, space-separated.

    Lower-cased and translated in batches of tokens (a batch's string stays in the CPU caches): the same
    string as one `" ".join(tokens).lower()`, since a space between two tokens ends the context that
    lower-casing looks at (Greek final sigma)."""
    tokens = iter(tokens)
    parts = []
    while batch := list(islice(tokens, _BATCH_TOKENS)):
        parts.append(_zero_digits(" ".join(batch).lower()))
    return " ".join(parts)


def _zero_digits(text: str) -> str:
    """`text.translate(_DIGITS)` (ASCII digits 1-9 as 0) by nine `str.replace` passes: translate looks up
    every character in a dict once the text holds a non-ASCII one (about 50 ns a character); a replace pass
    is a C-speed scan."""
    for digit in "123456789":
        text = text.replace(digit, "0")
    return text


def text_line(text: str) -> str:
    """lm_line of the text's multilingual tokens, tokenized window by window (sluice.words.token_windows)."""
    from sluice.words import token_windows

    return lm_line(chain.from_iterable(token_windows(text, True, _WINDOW_CHARS)))


# --- lmplz ---------------------------------------------------------------------------------------------

def default_lmplz_path() -> Path:
    override = os.environ.get(LMPLZ_ENV_VAR)
    return Path(override) if override else Path(sys.prefix) / "bin" / "lmplz"


def find_lmplz() -> Path:
    path = default_lmplz_path()
    if not (path.is_file() and os.access(path, os.X_OK)):
        raise FileNotFoundError(
            f"KenLM's lmplz is missing at {path}: run `python -m sluice.clean.steps.perplexity build-lmplz` (make does this; "
            f"it needs cmake, a C++ compiler and {' '.join(BUILD_PACKAGES)}) or set ${LMPLZ_ENV_VAR}"
        )
    return path


def build_lmplz(target: Path | None = None, jobs: int = 2) -> Path:
    """Build KenLM's lmplz from the kenlm source distribution on PyPI into `target`."""
    target = target or default_lmplz_path()
    if target.is_file() and os.access(target, os.X_OK):
        return target
    for tool in ("cmake", "c++"):
        if shutil.which(tool) is None:
            raise RuntimeError(f"building lmplz needs {tool}; install cmake and a C++ compiler")
    with tempfile.TemporaryDirectory() as scratch:
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--no-binary=kenlm", "-d", scratch, KENLM_REQUIREMENT],
            check=True,
        )
        archive = next(Path(scratch).glob("kenlm-*.tar.gz"))
        with tarfile.open(archive) as tar:
            tar.extractall(scratch, filter="data")
        source = next(p for p in Path(scratch).iterdir() if p.is_dir() and p.name.startswith("kenlm-"))
        build = Path(scratch, "build")
        configure = subprocess.run(
            ["cmake", "-S", str(source), "-B", str(build), "-DCMAKE_BUILD_TYPE=Release", "-DCOMPILE_TESTS=OFF"],
            capture_output=True, text=True,
        )
        if configure.returncode != 0:
            raise RuntimeError(
                f"cmake could not configure KenLM (Boost missing? Debian: apt-get install {' '.join(BUILD_PACKAGES)}):\n"
                + configure.stderr[-2000:]
            )
        subprocess.run(["cmake", "--build", str(build), "--target", "lmplz", "-j", str(jobs)], check=True, capture_output=True)
        target.parent.mkdir(parents=True, exist_ok=True)
        temp = target.with_name(f".tmp-{target.name}")
        shutil.copyfile(build / "bin" / "lmplz", temp)
        temp.chmod(0o755)
        os.replace(temp, target)
    return target


def train_arpa(lines: Iterable[str], arpa_path: str, order: int = 5, memory: str = "256M") -> dict[str, int]:
    """Train a modified Kneser-Ney model with lmplz on `lines` (one document each) into an ARPA file."""
    lmplz = find_lmplz()
    with tempfile.TemporaryDirectory() as scratch:
        corpus = Path(scratch, "corpus.txt")
        documents = tokens = 0
        with open(corpus, "w", encoding="utf-8") as out:
            for line in lines:
                if line:
                    out.write(line + "\n")
                    documents += 1
                    tokens += line.count(" ") + 1
        with open(corpus, "rb") as stdin, open(arpa_path, "wb") as stdout:
            result = subprocess.run(
                [str(lmplz), "-o", str(order), "-S", memory, "-T", scratch, "--discount_fallback"],
                stdin=stdin, stdout=stdout, stderr=subprocess.PIPE,
            )
        if result.returncode != 0:
            raise RuntimeError(f"lmplz failed ({result.returncode}): {result.stderr.decode(errors='replace')[-2000:]}")
    return {"documents": documents, "tokens": tokens}


# --- scoring -------------------------------------------------------------------------------------------

_MODELS: dict[str, object] = {}


def load_model(path: str) -> object:
    """kenlm.Model for an ARPA file, loaded once per process."""
    if path not in _MODELS:
        import kenlm

        config = kenlm.Config()
        config.show_progress = False  # no progress bar on stderr per load
        _MODELS[path] = _quiet(lambda: kenlm.Model(path, config))
    return _MODELS[path]


def _quiet(load: Callable[[], object]) -> object:
    """Run `load` with file descriptor 2 on /dev/null: KenLM's C++ loader prints a hint per ARPA file
    ("Loading the LM will be faster if you build a binary file") that would fill every worker's log."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "wb") as null:
            os.dup2(null.fileno(), 2)
            try:
                return load()
            finally:
                os.dup2(saved, 2)
    finally:
        os.close(saved)


def perplexity(model: object, line: str) -> float:
    log10 = model.score(line, bos=True, eos=True)  # type: ignore[attr-defined]
    return float(10.0 ** (-log10 / (line.count(" ") + 2 if line else 1)))


def bucket(value: float, cutoffs: tuple[float, float]) -> str:
    return "head" if value <= cutoffs[0] else "middle" if value <= cutoffs[1] else "tail"


def quantile_cutoffs(values: list[float], quantiles: tuple[float, float]) -> tuple[float, float]:
    """The two quantiles of `values` (numpy's linear interpolation)."""
    import numpy as np

    low, high = np.quantile(np.asarray(values, dtype=np.float64), quantiles)
    return float(low), float(high)


class SeededSample:
    """At most `size` items per language: those of the documents with the smallest xxhash of `seed:doc_id`,
    so the sample does not depend on the order documents are read in, and memory stays bounded."""

    def __init__(self, size: int, seed: int) -> None:
        self.size, self.seed = size, seed
        self.heaps: dict[str, list[tuple[int, str, str]]] = {}

    def add(self, language: str, doc_id: str, item: str) -> None:
        import xxhash

        entry = (-xxhash.xxh3_64_intdigest(f"{self.seed}:{doc_id}".encode()), doc_id, item)
        heap = self.heaps.setdefault(language, [])
        if len(heap) < self.size:
            heapq.heappush(heap, entry)
        elif entry > heap[0]:
            heapq.heapreplace(heap, entry)

    def items(self, language: str) -> list[str]:
        """The sampled items, in document-id order."""
        return [item for _, _, item in sorted(self.heaps.get(language, []), key=lambda entry: entry[1])]


class ModelFetcher:
    """fetch(key) -> local path of a file of the perplexity_model asset, downloaded into `scratch` on first
    use (a plain object, so it pickles into a cleaning worker process)."""

    def __init__(self, url: str, s3: object, scratch: str) -> None:
        self.url, self.s3, self.scratch = url, s3, scratch
        self._paths: dict[str, str] = {}

    def __call__(self, key: str) -> str:
        if key not in self._paths:
            from sluice.io.storage import StoreSpec

            self._paths[key] = StoreSpec(self.url, self.s3).open().fetch(key, self.scratch)  # type: ignore[arg-type]
        return self._paths[key]


class PerplexityScorer(Step):
    """Records `perplexity` and `perplexity_bucket` for documents in a modelled language; drops above
    `max_perplexity` (`high_perplexity`) or in `drop_buckets` (`perplexity_<bucket>`)."""

    name = "perplexity"
    measured = False  # (a model: not run on documents dropped before it)
    reasons = ("high_perplexity",)  # and perplexity_<bucket> for cleaning.perplexity.drop_buckets
    columns = (
        pa.field("perplexity", pa.float32()),  # under the language's n-gram model; null when not scored
        pa.field("perplexity_bucket", pa.string()),  # head / middle / tail (per-language cut-offs)
    )

    def __init__(
        self,
        settings: PerplexitySettings,
        models: dict[str, dict],
        fetch: Callable[[str], str],
    ) -> None:
        self.s = settings
        self.models = models  # language -> manifest entry (key, cutoffs, ...)
        self.fetch = fetch  # manifest key -> local path
        self._loaded: dict[str, object] = {}

    def apply(self, doc: Document) -> Drop | None:
        entry = self.models.get(doc.language)
        if entry is None:
            return None
        if doc.language not in self._loaded:
            self._loaded[doc.language] = load_model(self.fetch(entry["key"]))
        value = perplexity(self._loaded[doc.language], lm_line(doc.tokens(True)))
        doc.values["perplexity"] = value
        which = doc.values["perplexity_bucket"] = bucket(value, tuple(entry["cutoffs"]))
        s = self.s
        if s.max_perplexity is not None and value > s.max_perplexity:
            return Drop("high_perplexity", f"{value:.1f} > {s.max_perplexity} ({doc.language})")
        if which in s.drop_buckets:
            return Drop(f"perplexity_{which}", f"{value:.1f}, cut-offs {entry['cutoffs']} ({doc.language})")
        return None

    def count_kept(self, doc: Document, stats: Any) -> None:
        if "perplexity" in doc.values:
            stats.perplexities.add(doc.values["perplexity"])
            stats.perplexity_buckets[doc.values["perplexity_bucket"] or ""] += 1


if __name__ == "__main__":
    if sys.argv[1:] == ["build-lmplz"]:
        print(build_lmplz())
    else:
        print("usage: python -m sluice.clean.steps.perplexity build-lmplz", file=sys.stderr)
        sys.exit(2)
