"""`python -m bench`: the benchmark harness's command line."""

from bench.cli import app

app(prog_name="bench")
