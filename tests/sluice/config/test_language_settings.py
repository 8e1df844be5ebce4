"""Per-language settings (cleaning.languages.<code>): validated at load, merged with the documented
precedence, applied by the document's language through the chain, and the old keep-list spelling."""

from __future__ import annotations

import pytest
import yaml

from sluice.clean import CleaningPipeline, LanguageFilter
from sluice.clean.steps import ByLanguage, Document
from sluice.clean.steps.filters import GopherQualityFilter
from sluice.config import CleaningSettings, ConfigError, load_config
from tests.conftest import base_config
from tests.sluice.config.conftest import load


@pytest.mark.parametrize(
    ("cleaning", "expected"),
    [
        ({"languages": {"xx": {"c4": {"min_num_sentences": 3}}}}, "cleaning.languages key 'xx' is not a lid.176 language code"),
        ({"languages": {"de": {"extraction": {"extractor": "trafilatura"}}}}, "cleaning.languages.de: extraction cannot be set per language"),
        ({"languages": {"de": {"c4": {"min_num_sentencez": 3}}}}, "cleaning.languages.de: c4.min_num_sentencez: Extra inputs"),
        ({"languages": {"de": {"toxicity": {"max_score": 2}}}}, "cleaning.languages.de: toxicity.max_score"),
        ({"per_source": {"web": {"languages": {"qq": {}}}}}, "'qq' is not a lid.176 language code"),
        ({"toxicity": {"extra_languages": ["vi"]}}, "no word list for 'vi'"),
        ({"languages": ["en"], "keep_languages": ["de"]}, "list them in keep_languages only"),
    ],
)
def test_bad_language_settings_fail_at_load_naming_the_key(tmp_path, cleaning, expected):
    with pytest.raises(ConfigError) as error:
        load(tmp_path, cleaning)
    assert expected in str(error.value)


def test_precedence_defaults_global_source_language_source_language(tmp_path):
    config = load(
        tmp_path,
        {
            "c4": {"min_num_sentences": 4},
            "gopher_quality": {"min_doc_words": 40},
            "languages": {"de": {"c4": {"min_num_sentences": 3}, "gopher_quality": {"stop_words": ["der", "und"]}}},
            "per_source": {
                "reference": {"c4": {"min_num_sentences": 2}, "gopher_quality": {"min_doc_words": 30}, "languages": {"de": {"gopher_quality": {"min_doc_words": 10}}}},
            },
        },
    )
    web, reference = config.cleaning.for_source("web"), config.cleaning.for_source("reference")
    assert web.for_language("en").c4.min_num_sentences == 4  # global over the default (5)
    assert web.for_language("de").c4.min_num_sentences == 3  # language over global
    assert reference.for_language("en").c4.min_num_sentences == 2  # source over global
    assert reference.for_language("de").c4.min_num_sentences == 3  # language over source
    assert reference.for_language("de").gopher_quality.min_doc_words == 10  # source's language over all
    assert web.for_language("de").gopher_quality.min_doc_words == 40
    assert reference.for_language("de").gopher_quality.stop_words == ("der", "und")  # merged per key
    assert reference.for_language("de").gopher_quality.min_avg_word_length == 3  # untouched keys stay


def test_old_keep_list_spelling_still_reads(tmp_path):
    config = load(tmp_path, {"languages": ["en", "de"]})
    assert config.cleaning.keep_languages == ("en", "de") and config.cleaning.languages == {}


GERMAN = " ".join(["Das Haus steht am Fluss und die Leute kommen mit dem Brot zum Markt."] * 8)


def test_the_documents_language_picks_its_thresholds_in_the_chain():
    settings = CleaningSettings(
        min_language_score=0.5,
        languages={"de": {"min_language_score": 0.99, "gopher_quality": {"stop_words": ["xylophon"], "min_stop_words": 1}}},
    )
    steps = {step.name: step for step in CleaningPipeline.from_settings(settings).steps}
    language = steps["language"]
    assert isinstance(language, LanguageFilter) and language.min_scores == {"de": 0.99}
    gopher = steps["gopher_quality"]
    assert isinstance(gopher, ByLanguage) and isinstance(gopher.by_language["de"], GopherQualityFilter)
    assert set(gopher.by_language) == {"de"} and steps["c4"].name == "c4"  # only what differs is per language
    pipeline = CleaningPipeline([gopher])
    german, other = Document.from_text(GERMAN, language="de"), Document.from_text(GERMAN, language="sw")
    assert pipeline.run(german)[1].reason == "gopher_enough_stop_words"  # the German list has no word here
    assert pipeline.run(other) is None  # the default rules: no built-in Swahili list, the rule is skipped
    assert pipeline.stats.reached == {"gopher_quality": 2} and pipeline.stats.drops == {"gopher_enough_stop_words": 1}


def test_project_config_loads_with_its_language_table():
    from tests.conftest import PROJECT_ROOT

    config = load_config(PROJECT_ROOT / "sluice.yaml")
    assert config.cleaning.for_source("web").for_language("zh") is not None


def test_a_quality_threshold_set_for_one_language_needs_the_quality_model(tmp_path):
    """A threshold under cleaning.languages.<code> alone is a use of the quality model: the config must be
    able to train it (else a load error, as for a global threshold) and cleaning depends on it."""
    raw = base_config(str(tmp_path / "data"))
    raw["cleaning"] = {"languages": {"de": {"quality_threshold": 0.5}}}
    raw["quality_model"] = {"positive_source": None}
    path = tmp_path / "sluice.yaml"
    path.write_text(yaml.safe_dump(raw))
    with pytest.raises(ConfigError) as error:
        load_config(path)
    assert "cleaning.quality_threshold: set (sources ['web', 'reference']) but the quality model cannot be trained" in str(error.value)

    config = load(tmp_path, {"languages": {"de": {"quality_threshold": 0.5}}})
    from data_assets.cleaned import model_deps

    assert [dep.asset_key.to_user_string() for dep in model_deps(config)] == ["quality_model"]
    assert config.cleaning.for_source("web").uses_quality_model and not config.cleaning.for_source("web").for_language("en").uses_quality_model


def test_perplexity_enabled_for_one_language_needs_the_perplexity_model(tmp_path):
    config = load(tmp_path, {"languages": {"de": {"perplexity": {"enabled": True}}}})
    from data_assets.cleaned import model_deps

    assert [dep.asset_key.to_user_string() for dep in model_deps(config)] == ["perplexity_model"]
