"""`python -m listener` is the `ceaseless` command (used by tests and bin/ scripts)."""

from listener.cli import main

main()
