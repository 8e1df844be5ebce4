"""Preloaded by the forkservers that cleaning workers fork from (`sluice.runtime.workers.PRELOAD`, the budget's too):
importing it loads the default language-ID model into `sluice.clean.models.langid`'s per-process cache, so every forked
cleaning child starts with the model (and its pages shared with the server) instead of loading it again:
about 0.15 CPU s per child, one child per cleaning task (2 ms per page of a 100-page WARC file). A
source configured with another model loads that one in the child, as before; a missing default model is
left to the cleaning step to report."""

from __future__ import annotations

from sluice.clean.models.langid import LanguageIdentifier, default_model_path

if default_model_path().is_file():
    LanguageIdentifier()
