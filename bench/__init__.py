"""Benchmarks: ceaseless side by side with pgqueuer, procrastinate and PostgreSQL's own limit.

Run with `bin/bench` (or `python -m bench`); `--quick` is the CI smoke test. Every
system gets a fresh database on the same server with the same settings; the
results go to a markdown table, a JSON file and a PNG chart (docs/performance.md).
"""
