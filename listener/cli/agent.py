"""`ceaseless agent …`: register agent lanes in ceaseless.agents, and list them.

Guarantees: `agent add` is one statement that registers a new lane or updates a
registered one. An option left out is left out of the statement: a new lane gets
the column's default, a registered lane keeps its current value, so registering
again with one changed option changes only that one (and updated_at). Limits
are checked by the table's constraints, whose messages reach the user as they are.
"""

from __future__ import annotations

import json
from typing import Annotated

import typer
from psycopg import sql

from listener.cli.common import (
    Output,
    OutputOpt,
    columns,
    emitting,
    fail,
    given,
    placeholders,
    query,
    table,
)
from listener.enums import Adapter

app = typer.Typer(help="The agent registry (ceaseless.agents).", no_args_is_help=True)


def _environment(env: list[str] | None) -> str | None:
    """--env KEY=VALUE items as the JSON object for agents.env; None when none given."""
    if not env:
        return None
    if bad := [item for item in env if "=" not in item]:
        raise fail(f"--env takes KEY=VALUE, got {bad[0]!r}; e.g. --env ANTHROPIC_MODEL=opus")
    return json.dumps(dict(item.split("=", 1) for item in env))


def _register(values: dict[str, object]) -> sql.Composed:
    """Update the lane's given columns, or insert it when there is none, in one statement.

    Not a plain INSERT … ON CONFLICT: CHECK constraints judge the row proposed for
    insertion before the conflict is found, so re-registering a process adapter
    without its argv would be refused by argv_not_empty_for_process_adapters
    although the stored row has one. The insert's ON CONFLICT covers a lane
    registered concurrently between the two steps.
    """
    changed = [column for column in values if column != "name"]  # adapter: always given
    return sql.SQL(
        "with updated as ("
        "update ceaseless.agents set {assignments}, updated_at = now() "
        "where name = {name} returning name) "
        "insert into ceaseless.agents ({columns}) select {placeholders} "
        "where not exists (select from updated) "
        "on conflict (name) do update set {overwrites}, updated_at = now()"
    ).format(
        assignments=sql.SQL(", ").join(
            sql.SQL("{} = {}").format(sql.Identifier(column), sql.Placeholder(column))
            for column in changed
        ),
        name=sql.Placeholder("name"),
        columns=columns(values),
        placeholders=placeholders(values),
        overwrites=sql.SQL(", ").join(
            sql.SQL("{0} = excluded.{0}").format(sql.Identifier(column)) for column in changed
        ),
    )


@app.command("add")
def agent_add(
    name: Annotated[str, typer.Argument(help="Lane name, e.g. claude or my-script.")],
    adapter: Annotated[Adapter, typer.Option(help="How to run and read the agent.")],
    argv: Annotated[
        list[str] | None,
        typer.Argument(help="Executable and fixed arguments (after --), e.g. -- claude."),
    ] = None,
    model: Annotated[str | None, typer.Option(help="Model name passed to the agent.")] = None,
    timeout_secs: Annotated[
        int | None,
        typer.Option(help="Wall-clock limit per run (default: the column default)."),
    ] = None,
    max_concurrent: Annotated[
        int | None, typer.Option(help="Runs of this lane at once (default: the column default).")
    ] = None,
    window_secs: Annotated[
        int | None,
        typer.Option(help="Rolling window for the budget (default: the column default)."),
    ] = None,
    window_budget: Annotated[
        int | None, typer.Option(help="Runs started per window (default unlimited).")
    ] = None,
    env: Annotated[
        list[str] | None, typer.Option(help="KEY=VALUE for the agent's environment (repeatable).")
    ] = None,
    egress: Annotated[
        list[str] | None,
        typer.Option(
            help="Where its sandboxed agents may connect (repeatable): host[:port], "
            "*.domain[:port], an IP address with its port, or alone none or open "
            "(default: the column's, the agent CLIs' providers; docs/agents.md)."
        ),
    ] = None,
) -> None:
    """Register an agent lane; for a registered one, change only the options given."""
    values = given(
        {
            "name": name,
            "adapter": adapter.value,
            "argv": argv or None,
            "model": model,
            "timeout_secs": timeout_secs,
            "max_concurrent": max_concurrent,
            "window_secs": window_secs,
            "window_budget": window_budget,
            "env": _environment(env),
            "egress": egress or None,
        }
    )
    query(_register(values), values)
    typer.echo(f"agent {name} registered")


@app.command("list")
def agent_list(output: OutputOpt = Output.TABLE) -> None:
    """List registered agents with their limits."""
    rows = query(
        "select name, adapter, array_to_string(argv, ' '), model, timeout_secs, max_concurrent, "
        "window_budget, enabled from ceaseless.agents order by name"
    )
    with emitting(output):
        table(rows, ["name", "adapter", "argv", "model", "timeout", "max", "budget", "enabled"])
