"""`sluice whatif --config OTHER.yaml [--out DIR] [--samples N]`: what OTHER's cleaning settings would keep and
drop, compared with the current config's, from the cleaned_attributes the current config's cleaning wrote
(sluice.whatif.engine), in seconds and without a Dagster run.

Prints a table of the documents (and tokens) that flip kept->dropped and dropped->kept per source x
snapshot x language x rule, the new totals and token shares per source, and the changes the attributes
cannot answer, with the partitions they need re-run. Writes DIR/summary.json and DIR/flips.parquet
(doc_id, source, snapshot, language, before, after, rule: the first failing rule after the change, null when
kept; before_rule, tokens), and the report DIR/index.html + DIR/report.png: flips per rule, and N documents
per flip class with the statistic that decided it, both thresholds and the start of the text. The current config is the one `sluice` uses ($SLUICE_CONFIG or ./sluice.yaml).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="sluice whatif", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", required=True, help="the other config (its cleaning settings are compared)")
    parser.add_argument("--out", default="whatif", help="folder for summary.json and flips.parquet (default ./whatif)")
    parser.add_argument("--samples", type=int, default=3, help="documents per flip class: their ids in the table, their text in the report")
    args = parser.parse_args(argv)
    from data_assets.trace_cli import config_path
    from sluice.config import ConfigError, load_config
    from sluice.runtime.compute import make_executor
    from sluice.whatif.engine import what_if
    from sluice.whatif.report import write

    if not Path(args.config).expanduser().is_file():
        print(f"sluice whatif: --config {args.config} does not exist", file=sys.stderr)
        return 2
    try:
        current, other = load_config(config_path()), load_config(str(Path(args.config).expanduser()))
        with tempfile.TemporaryDirectory() as scratch:
            result = what_if(current, other, scratch, make_executor(current.compute))  # one task per attributes file
            print(result.table(args.samples))
            written = write(result, args.out, args.samples)
    except (ConfigError, ValueError, KeyError, FileNotFoundError) as error:
        print(f"sluice whatif: {error}", file=sys.stderr)
        return 2
    print("\nwritten: " + ", ".join(written.values()), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
