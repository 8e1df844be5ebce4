"""Progress of a long stage: tasks done, documents/s, bytes and ETA, on the terminal and as log lines.

`StageProgress(label, total, log)` is called once per finished task (`update(documents, nbytes)`, e.g. from
`Executor.map(..., progress=...)`). On a terminal (stderr is a TTY) it draws a tqdm bar; whatever the
output, it sends a line to `log` (a Dagster run's `context.log.info`, so the UI shows it) at most every
`every_s` seconds and when the stage ends. `$SLUICE_PROGRESS` overrides the terminal choice: `bar`, `lines`
(the same lines on stderr, for logs and pipes; `sluice materialize` sets it when stderr is no terminal) or
`off`:

    cleaned_documents web/2026-01: 12/40 files, 3,456 documents (85.2/s), 120.5 MB (3.0 MB/s), 40 s, ETA 1m20s
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable

PROGRESS_ENV_VAR = "SLUICE_PROGRESS"


def _duration(seconds: float) -> str:
    seconds = int(round(seconds))
    if seconds < 60:
        return f"{seconds} s"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes}m{seconds:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


class StageProgress:
    def __init__(
        self,
        label: str,
        total: int,
        log: Callable[[str], None] | None = None,
        unit: str = "files",
        every_s: float = 15.0,
        bar: bool | None = None,
    ) -> None:
        self.label = label
        self.total = total
        self.log = log
        self.unit = unit
        self.every_s = every_s
        self.done = 0
        self.documents = 0
        self.bytes = 0
        self.started = time.monotonic()
        self.last_log = self.started
        mode = os.environ.get(PROGRESS_ENV_VAR, "")
        show = (mode == "bar" or (not mode and sys.stderr.isatty())) if bar is None else bar
        self.echo = mode == "lines" and bar is None
        self.bar = None
        if show and total > 0:
            from tqdm import tqdm

            self.bar = tqdm(total=total, desc=label, unit=unit.rstrip("s") or "task", leave=False, file=sys.stderr, dynamic_ncols=True)

    def line(self, now: float | None = None) -> str:
        elapsed = (time.monotonic() if now is None else now) - self.started
        rate = self.documents / elapsed if elapsed > 0 else 0.0
        parts = [f"{self.label}: {self.done}/{self.total} {self.unit}", f"{self.documents:,} documents ({rate:,.1f}/s)"]
        if self.bytes:
            parts.append(f"{self.bytes / 1e6:,.1f} MB ({self.bytes / 1e6 / elapsed if elapsed > 0 else 0:,.1f} MB/s)")
        parts.append(_duration(elapsed))
        if 0 < self.done < self.total:
            parts.append(f"ETA {_duration(elapsed / self.done * (self.total - self.done))}")
        return ", ".join(parts)

    def update(self, documents: int = 0, nbytes: int = 0) -> None:
        self.done += 1
        self.documents += documents
        self.bytes += nbytes
        if self.bar is not None:
            self.bar.set_postfix_str(f"{self.documents:,} docs, {self.bytes / 1e6:,.1f} MB", refresh=False)
            self.bar.update(1)
        now = time.monotonic()
        if self.done == self.total or now - self.last_log >= self.every_s:
            self.last_log = now
            line = self.line(now)
            if self.log is not None:
                self.log(line)
            if self.echo:
                print(f"    {line}", file=sys.stderr, flush=True)
        if self.done >= self.total:
            self.close()

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None
