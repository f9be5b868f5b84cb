"""`ceaseless job …`: enqueue, list, cancel and retry jobs in ceaseless.job.

Each command is one statement or one API function call (cancel_job, retry_job);
whether a job may be cancelled or retried is the function's decision, and its
error is shown as it is.
"""

from __future__ import annotations

from typing import Annotated

import typer

from listener.cli.common import Output, OutputOpt, call, emitting, listed, why
from listener.enums import JobKind
from listener.queries import commands
from listener.queries.commands import jobs

app = typer.Typer(help="Jobs in the queue (ceaseless.job).", no_args_is_help=True)


@app.command("add")
def job_add(
    agent: Annotated[str, typer.Argument(help="Agent lane that runs it.")],
    prompt: Annotated[str, typer.Argument(help="What the agent is asked (sent on stdin).")],
    kind: Annotated[JobKind, typer.Option(help="Job kind.")] = JobKind.TASK,
    dedup_key: Annotated[str | None, typer.Option(help="At most one live job per key.")] = None,
    max_turns: Annotated[int | None, typer.Option(help="Bound on agent turns.")] = None,
) -> None:
    """Enqueue a job and print its id."""
    values = {
        "kind": kind.value,
        "agent": agent,
        "prompt": prompt,
        "dedup_key": dedup_key,
        "max_turns": max_turns,
    }
    typer.echo(call(jobs.add, values))


@app.command("list")
def job_list(
    all_states: Annotated[
        bool, typer.Option("--all", help="Include finished jobs (latest 50).")
    ] = False,
    output: OutputOpt = Output.TABLE,
) -> None:
    """List live jobs (ceaseless.job_queue), or the latest jobs with --all."""
    with emitting(output):
        listed(call(jobs.latest if all_states else jobs.live))


@app.command("cancel")
def job_cancel(job_id: Annotated[str, typer.Argument(help="The job's id.")]) -> None:
    """Cancel a job; a running agent is stopped (cancel_job)."""
    call(jobs.cancel, job_id)
    typer.echo(f"job {job_id} cancelled")


@app.command("retry")
def job_retry(job_id: Annotated[str, typer.Argument(help="The job's id.")]) -> None:
    """Run a finished job again with a fresh attempt budget (retry_job)."""
    call(jobs.retry, job_id)
    typer.echo(f"job {job_id} is pending again")


@app.command("why")
def job_why(
    job_id: Annotated[str, typer.Argument(help="The job's id.")],
    output: OutputOpt = Output.TABLE,
) -> None:
    """Why is this job not running? Every reason that holds it, and when each clears
    (explain_job)."""
    why(commands.Explained.JOB, job_id, output)
