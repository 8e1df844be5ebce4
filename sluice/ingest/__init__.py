"""Crawl files to raw documents: the streaming readers and the raw ingest of a source snapshot."""
