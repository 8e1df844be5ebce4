"""Filter experiments: another config's cleaning decisions from the stored attributes, and their report."""
