"""Decontamination: word n-gram overlap with evaluation texts."""

from __future__ import annotations

from sluice.dedup.decontaminate import EvalNgrams, words

PASSAGE = (
    "Some of the expected changes are documented in the release notes: beyond the usual deprecation of some "
    "software components, it is worth pointing out that the project is switching to a new init system"
)


def test_words_are_casefolded_and_cjk_characters_are_words():
    assert words("Hello, WORLD! it's 42") == ["hello", "world", "it", "s", "42"]
    assert words("配置 APT：网络") == ["配", "置", "apt", "网", "络"]


def test_a_document_quoting_13_words_of_an_evaluation_text_is_flagged():
    ngrams = EvalNgrams.from_texts([f"Question: what does the passage say? {PASSAGE}"], 13)
    quoted = "An unrelated introduction. " + " ".join(PASSAGE.split()[3:20]).upper() + " and more text after."
    assert ngrams.matches(quoted) > 0


def test_twelve_shared_words_are_not_enough():
    ngrams = EvalNgrams.from_texts([PASSAGE], 13)
    twelve = " ".join(PASSAGE.split()[:12])
    assert ngrams.matches(f"prefix words here {twelve} unrelated ending words") == 0
    assert ngrams.matches("A page about something else entirely, sharing only common words like the and of.") == 0


def test_chinese_passages_match_by_character_ngrams():
    text = "保持系统在最新状态是管理员的重要任务之一，自动升级可以帮助完成这项工作"
    ngrams = EvalNgrams.from_texts([text], 13)
    assert ngrams.matches("前言。" + text[5:25] + "。后记") > 0
    assert ngrams.matches("完全不同的中文句子，没有共同的长片段。") == 0


def test_short_evaluation_texts_are_counted_and_cannot_match():
    ngrams = EvalNgrams.from_texts(["What is the capital of Australia? Canberra", PASSAGE], 13)
    assert ngrams.texts == 2 and ngrams.short_texts == 1
    assert ngrams.matches("What is the capital of Australia? Canberra, of course, as everyone knows well.") == 0


def test_a_bad_evaluation_file_line_is_named(tmp_path):
    import pytest

    from sluice.dedup.decontaminate import read_eval_texts

    path = tmp_path / "eval.jsonl"
    path.write_text('{"text": "fine"}\n{"text": broken\n')
    with pytest.raises(ValueError, match=r"eval\.jsonl line 2: not valid JSON"):
        list(read_eval_texts(str(path), "text"))
    with pytest.raises(FileNotFoundError, match="does not exist"):
        list(read_eval_texts(str(tmp_path / "missing.jsonl"), "text"))
