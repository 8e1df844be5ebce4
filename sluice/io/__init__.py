"""Bytes in and out: local and S3 stores, bounded decompression, Parquet page guards, where each dataset lives."""
