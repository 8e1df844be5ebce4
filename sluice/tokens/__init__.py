"""Tokenization: training the tokenizer and writing token shards."""
