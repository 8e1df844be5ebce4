"""Cleaning settings: datatrove's defaults, per-source overrides, errors naming the key."""

from __future__ import annotations

import pytest

from sluice.config import CleaningSettings, ConfigError, load_config
from tests.conftest import PROJECT_ROOT
from tests.sluice.config.conftest import load


def test_defaults_are_datatroves():
    s = CleaningSettings()
    assert (s.gopher_quality.min_doc_words, s.gopher_quality.max_doc_words) == (50, 100_000)
    assert (s.gopher_quality.min_avg_word_length, s.gopher_quality.max_avg_word_length) == (3, 10)
    assert (s.gopher_quality.max_symbol_word_ratio, s.gopher_quality.max_non_alpha_words_ratio) == (0.1, 0.8)
    assert (s.gopher_quality.max_bullet_lines_ratio, s.gopher_quality.max_ellipsis_lines_ratio, s.gopher_quality.min_stop_words) == (0.9, 0.3, 2)
    assert s.gopher_repetition.top_n_grams == {2: 0.2, 3: 0.18, 4: 0.16}
    assert s.gopher_repetition.dup_n_grams == {5: 0.15, 6: 0.14, 7: 0.13, 8: 0.12, 9: 0.11, 10: 0.10}
    assert (s.gopher_repetition.dup_line_frac, s.gopher_repetition.dup_para_char_frac) == (0.3, 0.2)
    assert (s.c4.min_num_sentences, s.c4.min_words_per_line, s.c4.max_word_length) == (5, 3, 1000)
    assert (s.fineweb_quality.line_punct_thr, s.fineweb_quality.short_line_thr, s.fineweb_quality.short_line_length) == (0.12, 0.67, 30)
    assert (s.fineweb_quality.char_duplicates_ratio, s.fineweb_quality.new_line_ratio) == (0.01, 0.3)
    assert s.min_language_score == 0.65


def test_preset_datatrove_sets_datatroves_rule_definitions_under_explicit_keys(tmp_path):
    sluice, datatrove = CleaningSettings(), CleaningSettings(preset="datatrove")
    assert (sluice.word_splitting, sluice.gopher_quality.alpha_words) == ("multilingual", "whitespace")
    assert (datatrove.word_splitting, datatrove.gopher_quality.alpha_words) == ("english", "tokens")
    assert (sluice.c4.curly_bracket_code_lines, datatrove.c4.curly_bracket_code_lines) == ("remove_line", "drop_document")
    # Only the rule definitions change; thresholds and the other steps stay as they are.
    assert (sluice.fineweb_quality.variant, datatrove.fineweb_quality.variant) == ("fineweb", "datatrove")
    assert (sluice.gopher_quality.stop_word_count, datatrove.gopher_quality.stop_word_count) == ("occurrences", "distinct")
    rules = {"preset", "word_splitting", "gopher_quality", "c4", "fineweb_quality"}
    assert datatrove.model_dump(exclude=rules) == sluice.model_dump(exclude=rules)
    assert datatrove.c4.model_copy(update={"curly_bracket_code_lines": "remove_line"}) == sluice.c4
    assert datatrove.fineweb_quality.model_copy(update={"variant": "fineweb"}) == sluice.fineweb_quality
    assert datatrove.gopher_quality.model_copy(update={"alpha_words": "whitespace", "stop_word_count": "occurrences"}) == sluice.gopher_quality
    # Keys a config gives explicitly win over the preset, also inside a section.
    config = load(tmp_path, {"preset": "datatrove", "word_splitting": "multilingual", "gopher_quality": {"min_doc_words": 20}})
    s = config.cleaning
    assert (s.word_splitting, s.gopher_quality.alpha_words, s.gopher_quality.min_doc_words) == ("multilingual", "tokens", 20)
    # A source's preset replaces the global one's choices; the other sources keep the global preset.
    config = load(tmp_path, {"preset": "datatrove", "per_source": {"reference": {"preset": "sluice"}}})
    reference, web = config.cleaning.for_source("reference"), config.cleaning.for_source("web")
    assert (reference.word_splitting, reference.gopher_quality.alpha_words) == ("multilingual", "whitespace")
    assert (web.word_splitting, web.gopher_quality.alpha_words) == ("english", "tokens")


def test_per_source_overrides_merge_deeply(tmp_path):
    config = load(tmp_path, {"c4": {"min_num_sentences": 3}, "per_source": {"reference": {"c4": {"filter_curly_bracket": False}, "extraction": {"extractor": "trafilatura"}}}})
    reference, web = config.cleaning.for_source("reference"), config.cleaning.for_source("web")
    assert reference.c4.filter_curly_bracket is False and reference.c4.min_num_sentences == 3
    assert reference.extraction.extractor == "trafilatura" and reference.extraction.timeout_s == 5.0
    assert web.c4.filter_curly_bracket is True and web.extraction.extractor == "resiliparse"
    assert web.per_source == {} and reference.per_source == {}


def test_project_config_blocklist_path_is_resolved():
    config = load_config(PROJECT_ROOT / "sluice.yaml")
    assert config.cleaning.url_blocklist == str(PROJECT_ROOT / "blocklists" / "urls.txt")


@pytest.mark.parametrize(
    ("cleaning", "expected"),
    [
        ({"per_source": {"forum": {}}}, "cleaning.per_source: names unknown source 'forum'"),
        ({"per_source": {"web": {"gopher_quality": {"min_doc_wordz": 3}}}}, "cleaning.per_source.web: gopher_quality.min_doc_wordz: Extra inputs"),
        ({"per_source": {"web": {"extraction": {"extractor": "lynx"}}}}, "extraction.extractor: Input should be 'resiliparse' or 'trafilatura'"),
        ({"word_splitting": "klingon"}, "cleaning.word_splitting"),
        ({"drop_rate_bounds": [0.9, 0.1]}, "cleaning.drop_rate_bounds: must be [low, high]"),
    ],
)
def test_bad_cleaning_settings_name_the_key(tmp_path, cleaning, expected):
    with pytest.raises(ConfigError) as error:
        load(tmp_path, cleaning)
    assert expected in str(error.value)
