"""`ceaseless run show|cancel` and `ceaseless approve|reject`: topology runs and their gates.

Guarantees: `run show` reads topology_runs and the topology_node_status view
(what a user role may see of them); `run cancel` is cancel_topology_run, and
`approve` / `reject` are decide_approval, so ownership, deciding twice and the
audit are the database's.
"""

from __future__ import annotations

from typing import Annotated

import typer

from listener.cli.common import Output, OutputOpt, emitting, fail, note, query, record, table

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
    rows = query(
        "select id, status, loop_id, iteration, trigger_type, skip_reason, created_at, "
        "started_at, finished_at, left(task, 200), left(final_message, 500), error "
        "from ceaseless.topology_runs where id::text = %s",
        (run.lower(),),
    )
    if not rows:
        raise fail(f"no topology run with the id {run!r}")
    headers = [
        "id",
        "status",
        "loop_id",
        "iteration",
        "trigger",
        "skip_reason",
        "created_at",
        "started_at",
        "finished_at",
        "task",
        "final_message",
        "error",
    ]
    nodes = query(
        "select node, agent, coalesce(gate, ''), state, upstream_left, job_state, attempts, "
        "seconds, coalesce(approval_id::text, ''), coalesce(approval_decision, ''), "
        "left(coalesce(error, output_preview, ''), 60) "
        "from ceaseless.topology_node_status where run_id = %s "
        "order by started_at nulls last, node",
        (rows[0][0],),
    )
    with emitting(output):
        record(list(zip(headers, rows[0], strict=True)), name="run", width=14)
        note("")
        table(
            nodes,
            [
                "node",
                "agent",
                "gate",
                "state",
                "upstream",
                "job",
                "attempts",
                "seconds",
                "approval",
                "decision",
                "output / error",
            ],
            name="nodes",
        )


@app.command("cancel")
def run_cancel(run: RunArg) -> None:
    """Cancel a run: its unfinished nodes are cancelled and its running agents stopped."""
    query("select ceaseless.cancel_topology_run(%s)", (run,))
    status = query("select status from ceaseless.topology_runs where id = %s", (run,))
    typer.echo(f"run {run} {status[0][0] if status else 'cancelled'}")


def _decide(approval: str, approve: bool, note: str | None, by: str | None) -> None:
    query("select ceaseless.decide_approval(%s, %s, %s, %s)", (approval, approve, by, note))
    typer.echo(f"approval {approval} {'approved' if approve else 'rejected'}")


@approvals.command("approve")
def approve(approval: ApprovalArg, note: NoteOpt = None, by: ByOpt = None) -> None:
    """Approve a gated node: it runs, and its run goes on."""
    _decide(approval, True, note, by)


@approvals.command("reject")
def reject(approval: ApprovalArg, note: NoteOpt = None, by: ByOpt = None) -> None:
    """Reject a gated node: its run fails."""
    _decide(approval, False, note, by)
