"""`ceaseless docs …`: documentation generated from the database itself.

The SQL reference is rendered from the schema's COMMENT ONs (listener.database.reference),
so it describes the schema the command is pointed at and cannot drift from it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from listener.cli.common import url
from listener.database import connections

app = typer.Typer(help="Generated documentation.", no_args_is_help=True)


@app.command("sql-reference")
def docs_sql_reference(
    output: Annotated[
        Path | None, typer.Option(help="Write here instead of standard output.")
    ] = None,
) -> None:
    """Render the SQL reference (tables, views, functions) from the schema's comments."""
    from listener.database.reference import render

    with connections.connect(url(), application_name="ceaseless docs") as conn:
        text = render(conn)
    if output is None:
        typer.echo(text, nl=False)
    else:
        output.write_text(text)
