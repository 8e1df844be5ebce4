"""sluice.clean.models.fasttext_predict against fastText itself: the decoded input rows, the n-gram ids of words, and the
predicted label and score, for lid.176 (quantized, pruned) and for a small model trained here (dense)."""

from __future__ import annotations

import os
import struct
import subprocess
import sys

import fasttext
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sluice.clean.models import fasttext_predict
from sluice.clean.models.fasttext_predict import CachedPredictor
from sluice.clean.models.langid import LanguageIdentifier, default_model_path

EXAMPLES = int(os.environ.get("SLUICE_HYPOTHESIS_EXAMPLES", "25"))
PROPERTY = settings(max_examples=EXAMPLES * 4, deadline=None, suppress_health_check=[HealthCheck.too_slow])

PAGES = [
    "The river runs past the old mill, and the town grew around it over three centuries.",
    "Der Fluss fließt an der alten Mühle vorbei, und die Stadt wuchs über drei Jahrhunderte um sie herum.",
    "Река течёт мимо старой мельницы, и город вырос вокруг неё за три столетия.",
    "河流流过旧磨坊，小镇在三个世纪里围绕着它发展起来。",
    "النهر يمر بجانب الطاحونة القديمة، ونمت المدينة حولها على مدى ثلاثة قرون.",
    "O rio passa pelo velho moinho e a cidade cresceu à sua volta ao longo de três séculos. 🙂",
    "sudo apt-get install -y nginx && systemctl restart nginx.service # 2024-05-01",
    "",
]
WORDS = st.one_of(
    st.text(st.sampled_from(list("aeiouxyzAEÉßçñ-_.'0123") + ["ё", "ж", "河", "流", "の", "ا", "ل", "🙂", "\u0301", "ᄀ"]), min_size=1, max_size=12),
    st.sampled_from(["__label__0", "__label__en", "__label__xyz", "the", "und", "и"]),
)


def train(folder, **options) -> str:
    """A model trained by fastText's train_supervised on the pages above, in a fresh process, tried again with
    another seed where this build's trainer stops at "Encountered NaN" (it does now and then on a few dozen
    lines, and every time in some processes of the test run)."""
    lines = [f"__label__{k % 3} {page}" for k, page in enumerate(PAGES * 20) if page]
    (folder / "train.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    script = (
        "import sys, fasttext\n"
        "for seed in range(1, 6):\n"
        "    try:\n"
        f"        model = fasttext.train_supervised(sys.argv[1], minCount=1, thread=1, seed=seed, verbose=0, **{options!r})\n"
        "        break\n"
        "    except RuntimeError:\n"
        "        if seed == 5: raise\n"
        "model.save_model(sys.argv[2])\n"
    )
    subprocess.run([sys.executable, "-c", script, str(folder / "train.txt"), str(folder / "model.bin")], check=True)
    return str(folder / "model.bin")


@pytest.fixture(scope="module")
def lid():
    path = str(default_model_path())
    return fasttext.load_model(path), CachedPredictor.load(path)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A small dense hierarchical-softmax model (no pruning, no quantization), trained on the pages above."""
    path = train(tmp_path_factory.mktemp("ft"), loss="hs", dim=8, minn=1, maxn=3, bucket=5000, epoch=3)
    fasttext.FastText.eprint = lambda *args, **kwargs: None
    return fasttext.load_model(path), CachedPredictor.load(path)


def word_rows(predictor: CachedPredictor, word: str) -> list[int]:
    ids, _ = predictor._ngram_rows([b"<" + word.encode("utf-8") + b">"])
    own = predictor.word_ids.get(word.encode("utf-8"))
    return sorted(ids.tolist() + ([own] if own is not None else []))


def test_decoded_input_rows_are_fasttexts_rows(lid):
    model, predictor = lid
    assert predictor.rows.shape == (50_000, 16)
    assert all(np.array_equal(model.get_input_vector(i), predictor.rows[i]) for i in range(len(predictor.rows)))


@PROPERTY
@given(WORDS)
def test_word_ngram_rows_are_fasttexts_subword_ids(lid, trained, word):
    for model, predictor in (lid, trained):
        if word.startswith("__label__"):
            continue  # fastText's get_subwords hashes these; its predict skips them as labels
        assert word_rows(predictor, word) == sorted(model.get_subwords(word)[1].tolist())


def agrees(model, predictor, words: list[str]) -> None:
    """The same label (unless fastText's two best are within 1e-5) and the score to 1e-5."""
    labels, scores = model.predict(" ".join(words), k=2)
    label, score = predictor.predict(words)
    if label != labels[0].removeprefix("__label__"):
        assert abs(scores[0] - scores[1]) < 1e-5
    assert abs(score - min(1.0, scores[0])) < 1e-5


@pytest.mark.parametrize("page", PAGES)
def test_predictions_on_pages_agree_with_fasttext(lid, trained, page):
    for model, predictor in (lid, trained):
        agrees(model, predictor, page.split())


@PROPERTY
@given(st.lists(st.one_of(WORDS, st.sampled_from(" ".join(PAGES).split())), max_size=60))
def test_predictions_on_generated_words_agree_with_fasttext(lid, trained, words):
    for model, predictor in (lid, trained):
        agrees(model, predictor, words)


def test_results_do_not_depend_on_what_the_cache_holds(lid, monkeypatch):
    _, predictor = lid
    page = PAGES[1].split()
    predictor.clear()
    cold = predictor.predict(page)
    for other in PAGES:
        predictor.predict(other.split())
    assert predictor.predict(page) == cold  # exactly: a word's sum is computed on its own
    monkeypatch.setattr(fasttext_predict, "_MAX_WORDS", 8)  # starts afresh before every page
    assert [predictor.predict(p.split()) for p in PAGES] == [CachedPredictor.predict(predictor, p.split()) for p in PAGES]
    assert predictor.predict(page) == cold


def test_lines_fasttext_reads_specially_go_to_fasttext():
    identifier = LanguageIdentifier()
    for text in ("Der Fluss </s> fließt an der Mühle vorbei", "The river\0runs past the mill", "__label__de the river"):
        labels, scores = identifier.model.predict(" ".join(text.split()), k=1)
        label, score = identifier.predict(text)
        assert label == labels[0].removeprefix("__label__")
        if "\0" in text or "</s>" in text:
            assert score == float(min(1.0, scores[0]))  # exactly: fastText's own predict
        else:
            assert abs(score - scores[0]) < 1e-5


def test_models_of_other_kinds_are_left_to_fasttext(trained, tmp_path):
    """A model file whose arguments say softmax, word bigrams or no subwords (the hs model's file, those
    arguments changed) gets no predictor."""
    model, _ = trained
    model.save_model(str(tmp_path / "hs.bin"))
    data = (tmp_path / "hs.bin").read_bytes()
    assert CachedPredictor.load(tmp_path / "hs.bin") is not None
    arg = {"wordNgrams": 5, "loss": 6, "maxn": 10}  # position among the twelve i32 after magic and version
    for name, value in (("loss", 2), ("loss", 3), ("wordNgrams", 2), ("maxn", 0)):
        at = 8 + 4 * arg[name]
        (tmp_path / "other.bin").write_bytes(data[:at] + struct.pack("<i", value) + data[at + 4 :])
        assert CachedPredictor.load(tmp_path / "other.bin") is None, name
