"""Where data lives: the storage root, S3 connection settings, and each source's location and input format."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from sluice.config.base import (
    _Model,
    check_location,
    check_name,
)


class S3Settings(_Model):
    """How to reach an S3-compatible store. Credentials never live here: boto3 reads them from the
    environment (AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY, AWS_PROFILE, instance roles)."""

    endpoint_url: str | None = None  # None = AWS; e.g. http://127.0.0.1:8333 for SeaweedFS/MinIO
    region: str = "us-east-1"
    max_attempts: int = Field(10, ge=1, le=50)  # botocore retries, counting the first attempt
    retry_mode: Literal["standard", "adaptive", "legacy"] = "standard"
    addressing_style: Literal["path", "virtual", "auto"] = "path"
    connect_timeout_s: float = Field(10.0, gt=0, le=600)  # per attempt; a timeout counts as a retryable error
    read_timeout_s: float = Field(60.0, gt=0, le=3600)
    # Ranged reads (the training loader's spans, Parquet pages): "presigned" sends them through presigned URLs
    # on a urllib3 pool (a fifth of botocore's CPU per GET; not behind a proxy), "botocore" through boto3.
    ranged_reads: Literal["presigned", "botocore"] = "presigned"

    @field_validator("endpoint_url")
    @classmethod
    def _endpoint(cls, value: str | None) -> str | None:
        if value is None:
            return value
        from urllib.parse import urlsplit

        parts = urlsplit(value)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"endpoint_url {value!r} must be an http:// or https:// URL with a host; fix: e.g. http://127.0.0.1:8333")
        if parts.username or parts.password:
            # Never echo the value: it holds a credential.
            raise ValueError(
                "endpoint_url must not carry credentials (user:password@); fix: remove them and set AWS_ACCESS_KEY_ID / "
                "AWS_SECRET_ACCESS_KEY in the environment instead"
            )
        return value


class StorageSettings(_Model):
    root: str = ".sluice_data"  # local folder or s3://bucket/prefix; every asset writes below it

    @field_validator("root")
    @classmethod
    def _root(cls, value: str) -> str:
        return check_location(value, "storage.root")


class RecordFields(_Model):
    """Which fields of a JSONL object / Parquet row hold a document's text, id, URL and date, and what the text is."""

    text_field: str = "text"
    id_field: str | None = "id"
    url_field: str | None = "url"
    date_field: str | None = "date"
    content_type: Literal["text/plain", "text/html"] = "text/plain"


class JsonlOptions(RecordFields):
    # A longer line (after decompression) is quarantined as record_too_large; reading goes on at the next.
    max_line_bytes: int = Field(64 << 20, ge=1024)
    # A compressed file (.gz/.zst/.bz2) whose decompressed bytes exceed this many times the compressed bytes
    # read (past its first GiB) stops there (`expansion_limit`): a decompression bomb costs bounded time.
    # Text rarely compresses 20-fold; gzip cannot exceed ~1,030-fold.
    max_expansion_ratio: float = Field(1000.0, ge=10.0)


class ParquetOptions(RecordFields):
    batch_rows: int = Field(1024, ge=1)
    # A longer text cell is quarantined as record_too_large; a row group whose page headers declare a page
    # larger than this (decompressed) is quarantined unread (Arrow allocates a page at once).
    max_record_bytes: int = Field(64 << 20, ge=1024)


class WarcOptions(_Model):
    # Response records with one of these HTTP content types are read; other records are counted and skipped.
    content_types: tuple[str, ...] = ("text/html", "application/xhtml+xml", "text/plain")
    # A longer record, or one whose HTTP payload decodes (Content-Encoding) to more, is quarantined as
    # record_too_large; reading resumes at the next record.
    max_record_bytes: int = Field(64 << 20, ge=1024)
    # A read record whose WARC-Block-Digest or WARC-Payload-Digest does not match its bytes is quarantined as
    # digest_mismatch (records without digests, and ARC files, have nothing to check). Costs a SHA-1 pass over
    # every record: the WARC reader alone ~38 % slower (117 -> 85 MB/s of uncompressed WARC on one core).
    verify_digests: bool = True


FORMAT_OPTIONS: dict[str, type[_Model]] = {
    "warc": WarcOptions,
    "jsonl": JsonlOptions,
    "parquet": ParquetOptions,
}


class SourceSettings(_Model):
    """One crawl source. Each sub-folder (or sub-prefix) of `location` is one snapshot."""

    name: str
    location: str  # local folder or s3://bucket/prefix
    format: Literal["warc", "jsonl", "parquet"]
    options: dict[str, Any] = Field(default_factory=dict)

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        return check_name(value, "source name")

    @field_validator("location")
    @classmethod
    def _location(cls, value: str) -> str:
        return check_location(value, "location")

    @model_validator(mode="after")
    def _options(self) -> SourceSettings:
        # Validate options against the model of the chosen format, so a wrong key names the format.
        FORMAT_OPTIONS[self.format].model_validate(self.options)
        return self

    def parsed_options(self) -> Any:
        return FORMAT_OPTIONS[self.format].model_validate(self.options)
