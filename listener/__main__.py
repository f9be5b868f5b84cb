"""`python -m listener` is the `ceaseless` command (used by tests and bin/ scripts)."""

from listener.cli import app

app(prog_name="ceaseless")
