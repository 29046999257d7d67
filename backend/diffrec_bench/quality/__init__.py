"""The quality benchmark (scripts/bench_quality): scenes, targets, runs, metrics, table."""
