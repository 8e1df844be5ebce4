"""The one YAML config file that points sluice at a crawl.

`load_config(path)` parses and validates it. Every model forbids unknown keys and every enumerated
value is a `Literal`, so a typo or a wrong value fails at load with the key path and the allowed
values (`ConfigError`). Relative paths are resolved against the config file's folder.
The file is found at `$SLUICE_CONFIG`, else `sluice.yaml` in the current directory.
"""

from __future__ import annotations

from sluice.config.base import (  # noqa: F401
    CONFIG_ENV_VAR,
    DEFAULT_CONFIG_NAME,
    NAME_PATTERN,
    S3_BUCKET_PATTERN,
    S3_KEY_PART_PATTERN,
    SNAPSHOT_PATTERN,
    ConfigError,
    check_language,
    check_location,
    check_name,
    check_snapshot_name,
)
from sluice.config.cleaning import (  # noqa: F401
    LANGUAGE_KEYS,
    C4Settings,
    CleaningSettings,
    CodeShareSettings,
    ExtractionSettings,
    FineWebQualitySettings,
    GopherQualitySettings,
    GopherRepetitionSettings,
    PerplexityModelSettings,
    PerplexitySettings,
    PIISettings,
    QualityModelSettings,
    ToxicitySettings,
)
from sluice.config.file import (  # noqa: F401
    SluiceConfig,
    config_path_from_env,
    config_problems,
    did_you_mean,
    format_problems,
    load_config,
    parse_config,
    read_config_document,
)
from sluice.config.storage import (  # noqa: F401
    FORMAT_OPTIONS,
    JsonlOptions,
    ParquetOptions,
    S3Settings,
    SourceSettings,
    StorageSettings,
    WarcOptions,
)
from sluice.config.training import (  # noqa: F401
    LANGUAGE_PATTERN,
    BlocklistSettings,
    CheckSettings,
    ComputeSettings,
    DedupSettings,
    ExportSettings,
    MixSettings,
    OrchestrationSettings,
    TokenizerSettings,
    split_weight_key,
)
