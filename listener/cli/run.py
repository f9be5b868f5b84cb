"""`ceaseless run show|cancel|retry` and `ceaseless approve|reject`: topology runs and their gates.

Guarantees: `run show` reads topology_runs and the topology_node_status view
(what a user role may see of them); `run cancel` is cancel_topology_run, `run retry`
is retry_topology_run, and `approve` / `reject` are decide_approval, so ownership,
deciding twice and the audit are the database's.
"""

from __future__ import annotations

from typing import Annotated

import typer

from listener.cli.common import (
    Output,
    OutputOpt,
    call,
    call_async,
    emitting,
    found,
    record,
    section,
)
from listener.queries.approvals import decide
from listener.queries.commands import runs

app = typer.Typer(
    help="Topology runs: one execution of a graph of agents (a loop's iteration, or inserted).",
    no_args_is_help=True,
)
# approve and reject sit at the top level: `ceaseless approve ID`.
approvals = typer.Typer()

RunArg = Annotated[str, typer.Argument(help="The run's id (ceaseless loop show lists them).")]
ApprovalArg = Annotated[
    str,
    typer.Argument(
        help="The approval's id: in the approval notification and in `ceaseless run show`."
    ),
]
NoteOpt = Annotated[str | None, typer.Option(help="Why; kept with the decision.")]
ByOpt = Annotated[
    str | None, typer.Option(help="Who decides (default: the database role you connect as).")
]


@app.command("show")
def run_show(run: RunArg, output: OutputOpt = Output.TABLE) -> None:
    """A run's status, task and final message, and each node's state, job and timings."""
    shown = found(runs.run, run, f"no topology run with the id {run!r}")
    nodes = call(runs.nodes, str(dict(shown)["id"]))
    with emitting(output):
        record(shown, name="run", width=14)
        section(nodes, "nodes")


@app.command("cancel")
def run_cancel(run: RunArg) -> None:
    """Cancel a run: its unfinished nodes are cancelled and its running agents stopped."""
    status = call(runs.cancel, run)
    typer.echo(f"run {run} {status or 'cancelled'}")


@app.command("retry")
def run_retry(run: RunArg) -> None:
    """Run a failed or cancelled run again: its failed, blocked, abandoned and cancelled nodes
    are queued afresh and the run resumes (retry_topology_run)."""
    status = call(runs.retry, run)
    typer.echo(f"run {run} {status or 'retried'}")


def _decide(approval: str, approve: bool, note: str | None, by: str | None) -> None:
    call_async(decide, approval, approve, by, note)
    typer.echo(f"approval {approval} {'approved' if approve else 'rejected'}")


@approvals.command("approve")
def approve(approval: ApprovalArg, note: NoteOpt = None, by: ByOpt = None) -> None:
    """Approve a gated node: it runs, and its run goes on."""
    _decide(approval, True, note, by)


@approvals.command("reject")
def reject(approval: ApprovalArg, note: NoteOpt = None, by: ByOpt = None) -> None:
    """Reject a gated node: its run fails."""
    _decide(approval, False, note, by)
