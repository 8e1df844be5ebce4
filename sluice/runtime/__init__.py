"""Where work runs: the process pool or Ray executor, warm workers, CPU budgets, durable task records, progress, memory, preflight checks and cleanup."""
