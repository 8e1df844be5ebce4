"""Tokenizer resource: the tokenizer the `tokenizer` asset published, as a HF `tokenizers.Tokenizer`."""

from __future__ import annotations

import json
from typing import Any

from dagster import ConfigurableResource

from resources.storage import StorageResource

TOKENIZER_PREFIX = "tokenizer"


class TokenizerResource(ConfigurableResource):
    storage: StorageResource

    def manifest(self) -> dict[str, Any]:
        store = self.storage.store()
        key = f"{TOKENIZER_PREFIX}/_manifest.json"
        if not store.exists(key):
            raise FileNotFoundError(f"{store.uri(key)} does not exist: materialize the `tokenizer` asset first")
        return json.loads(store.read_bytes(key))

    def tokenizer_json(self) -> str:
        store = self.storage.store()
        return store.read_bytes(f"{TOKENIZER_PREFIX}/tokenizer.json").decode("utf-8")

    def load(self):
        from sluice.tokens.tokenize import load_tokenizer

        return load_tokenizer(self.tokenizer_json())
