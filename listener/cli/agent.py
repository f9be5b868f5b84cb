"""`ceaseless agent …`: register agent lanes in ceaseless.agents, list and show them, disable
and delete them.

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

from listener.cli.common import (
    Output,
    OutputOpt,
    call,
    column_option,
    emitting,
    fail,
    found,
    list_rows,
    note,
    record,
)
from listener.enums import Adapter, Fairness
from listener.queries.commands import agents

app = typer.Typer(help="The agent registry (ceaseless.agents).", no_args_is_help=True)


def _environment(env: list[str] | None) -> str | None:
    """--env KEY=VALUE items as the JSON object for agents.env; None when none given."""
    if not env:
        return None
    if bad := [item for item in env if "=" not in item]:
        raise fail(f"--env takes KEY=VALUE, got {bad[0]!r}; e.g. --env ANTHROPIC_MODEL=opus")
    return json.dumps(dict(item.split("=", 1) for item in env))


@app.command("add")
def agent_add(
    name: Annotated[str, typer.Argument(help="Lane name, e.g. claude or my-script.")],
    adapter: Annotated[Adapter, typer.Option(help="How to run and read the agent.")],
    argv: Annotated[
        list[str] | None,
        typer.Argument(help="Executable and fixed arguments (after --), e.g. -- claude."),
    ] = None,
    model: Annotated[str | None, typer.Option(help="Model name passed to the agent.")] = None,
    timeout_secs: Annotated[int | None, column_option("Wall-clock limit per run")] = None,
    max_concurrent: Annotated[int | None, column_option("Runs of this lane at once")] = None,
    window_secs: Annotated[int | None, column_option("Rolling window for the budget")] = None,
    window_budget: Annotated[
        int | None, typer.Option(help="Runs started per window (default unlimited).")
    ] = None,
    fairness: Annotated[
        Fairness | None,
        typer.Option(
            help="fifo: by priority, then the job due first; round_robin: one job per owner in "
            "turn, then per fairness key (default: the column default, fifo)."
        ),
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
    values = {
        "name": name,
        "adapter": adapter.value,
        "argv": argv or None,
        "model": model,
        "timeout_secs": timeout_secs,
        "max_concurrent": max_concurrent,
        "window_secs": window_secs,
        "window_budget": window_budget,
        "fairness": fairness.value if fairness is not None else None,
        "env": _environment(env),
        "egress": egress or None,
    }
    call(agents.register, values)
    typer.echo(f"agent {name} registered")


@app.command("list")
def agent_list(output: OutputOpt = Output.TABLE) -> None:
    """List registered agents with their limits."""
    list_rows(output, agents.agents)


AgentArg = Annotated[str, typer.Argument(help="The lane's name (ceaseless agent list).")]


def _missing(agent: str) -> str:
    return f"no agent named {agent!r} (ceaseless agent list shows them)"


def _set_enabled(agent: str, enabled: bool) -> None:
    if not call(agents.set_enabled, agent, enabled):
        raise fail(_missing(agent))
    typer.echo(f"agent {agent} {'enabled' if enabled else 'disabled'}")


@app.command("show")
def agent_show(agent: AgentArg, output: OutputOpt = Output.TABLE) -> None:
    """A lane's configuration (its environment's variable names, never their values) and its
    governor now: live runs, the window's starts and spend, free slots, what holds it."""
    shown = found(agents.agent, agent, _missing(agent))
    with emitting(output):
        record(shown, name="agent", width=17)
        note("")
        lane = call(agents.lane, agent).first()
        record(lane or [], name="lane", width=17)


@app.command("disable")
def agent_disable(agent: AgentArg) -> None:
    """Disable a lane: nothing new is claimed for it, and its pending jobs, routine runs and
    loop nodes follow one rule (docs/agents.md, "Disabling an agent")."""
    _set_enabled(agent, False)


@app.command("enable")
def agent_enable(agent: AgentArg) -> None:
    """Enable a lane again: its jobs are claimed, and loops it stalled resume."""
    _set_enabled(agent, True)


@app.command("delete")
def agent_delete(agent: AgentArg) -> None:
    """Delete a lane that no job or routine names; one with a history can only be disabled."""
    found(agents.agent, agent, _missing(agent))  # exits when there is none
    used = call(agents.delete, agent)
    if used.jobs or used.routines:
        raise fail(
            f"agent {agent} is named by {used.jobs} jobs and {used.routines} routines, so it "
            f"stays: `ceaseless agent disable {agent}` stops it"
        )
    typer.echo(f"agent {agent} deleted")
