"""The one exception of `sluice.export`, importable without the loader (and torch)."""


class ExportError(ValueError):
    """An export that cannot be written as asked (destination, split, format); the message says why."""
