"""`ceaseless job …`: enqueue, list, show, cancel, retry, reply to and raise the budget of
jobs in ceaseless.job.

Each command is one statement or one API function call (cancel_job, retry_job, reply_job,
raise_job_budget); whether a job may be cancelled, retried, replied to or given more budget
is the function's decision, and its error is shown as it is.
"""

from __future__ import annotations

import sys
from decimal import Decimal
from typing import Annotated
from uuid import UUID

import typer

from listener.cli.common import (
    Output,
    OutputOpt,
    call,
    emitting,
    fail,
    found,
    list_rows,
    record,
    section,
    why,
)
from listener.enums import JobKind, JobState
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
    max_cost_usd: Annotated[
        Decimal | None,
        typer.Option(
            help="Spend ceiling in USD over all its runs: past it the job is blocked until "
            "`ceaseless job raise-budget`. Default: its agent's max_cost_usd."
        ),
    ] = None,
    max_tokens: Annotated[
        int | None,
        typer.Option(help="Spend ceiling in tokens, as --max-cost-usd. Default: its agent's."),
    ] = None,
    priority: Annotated[
        int | None,
        typer.Option(
            help="Higher runs first in its lane, -1000..1000 (default 0); docs/flow-controls.md."
        ),
    ] = None,
    fairness_key: Annotated[
        str | None,
        typer.Option(
            help="Whose turn it waits for in a round_robin lane, within its owner's turns "
            "(default: the owner)."
        ),
    ] = None,
) -> None:
    """Enqueue a job and print its id."""
    values = {
        "kind": kind.value,
        "agent": agent,
        "prompt": prompt,
        "dedup_key": dedup_key,
        "max_turns": max_turns,
        "max_cost_usd": max_cost_usd,
        "max_tokens": max_tokens,
        "priority": priority,
        "fairness_key": fairness_key,
    }
    typer.echo(call(jobs.add, values))


JobArg = Annotated[
    str, typer.Argument(help="The job's id, or a unique prefix of it (four hex digits or more).")
]


def _job_id(ref: str) -> str:
    """The id of the one job `ref` starts (a user's own jobs only); exits otherwise. A whole id
    is passed on, so an unknown one gets the database's own error."""
    try:
        return str(UUID(ref))
    except ValueError:
        pass
    ids = call(jobs.ids_with_prefix, ref)
    if not ids:
        raise fail(f"no job with id {ref!r} (give its id, or four or more of its first digits)")
    if len(ids) > 1:
        raise fail(f"{ref!r} starts more than one job's id: give more of it")
    return ids[0]


@app.command("list")
def job_list(
    state: Annotated[
        list[JobState] | None,
        typer.Option(
            help="Only jobs in this state (repeat for several). Default: pending, "
            "claimed, running and blocked."
        ),
    ] = None,
    all_states: Annotated[bool, typer.Option("--all", help="Jobs in any state.")] = False,
    agent: Annotated[str | None, typer.Option(help="Only this agent lane's jobs.")] = None,
    owner: Annotated[str | None, typer.Option(help="Only this owner's jobs (job.user_id).")] = None,
    since: Annotated[
        str | None,
        typer.Option(
            help="Only jobs created since: a time ('2026-12-01 09:00') or an interval "
            "back from now ('1h', '2 days')."
        ),
    ] = None,
    limit: Annotated[int, typer.Option(min=1, help="At most this many, the latest first.")] = 50,
    output: OutputOpt = Output.TABLE,
) -> None:
    """List jobs, the latest first: those waiting or running and those blocked on a person,
    or those the options choose."""
    states = (
        None if all_states else [s.value for s in state] if state else list(jobs.WAITING_STATES)
    )
    list_rows(
        output, jobs.listed, states=states, agent=agent, owner=owner, since=since, limit=limit
    )


@app.command("show")
def job_show(job: JobArg, output: OutputOpt = Output.TABLE) -> None:
    """A job: what it was asked and where it came from, every attempt with its outcome and
    what the agent said, and, while it waits, why (explain_job)."""
    job_id = _job_id(job)
    shown = found(jobs.job, job_id, f"no job with id {job!r}")
    with emitting(output):
        record(shown, name="job", width=16)
        section(call(jobs.runs, job_id), "runs")
        section(call(commands.explain, commands.Explained.JOB, job_id), "why")


@app.command("cancel")
def job_cancel(job: JobArg) -> None:
    """Cancel a job; a running agent is stopped (cancel_job)."""
    job_id = _job_id(job)
    call(jobs.cancel, job_id)
    typer.echo(f"job {job_id} cancelled")


@app.command("retry")
def job_retry(job: JobArg) -> None:
    """Run a finished job again with a fresh attempt budget (retry_job)."""
    job_id = _job_id(job)
    call(jobs.retry, job_id)
    typer.echo(f"job {job_id} is pending again")


@app.command("reply")
def job_reply(
    job: JobArg,
    text: Annotated[
        str,
        typer.Argument(
            help="Your answer. It becomes the agent's next prompt in the same session; "
            "'-' reads it from standard input."
        ),
    ],
) -> None:
    """Answer a blocked job (its agent asked for help, spent its budget or could not log in):
    it runs again, resuming the agent's session with your reply as the prompt (reply_job)."""
    job_id = _job_id(job)
    if text == "-":
        # A file or a heredoc ends with a newline nobody meant as part of the reply.
        text = sys.stdin.read().rstrip("\n")
    call(jobs.reply, job_id, text)
    typer.echo(f"job {job_id} is pending again: its next run resumes the session with your reply")


@app.command("raise-budget")
def job_raise_budget(
    job: JobArg,
    usd: Annotated[
        Decimal | None,
        typer.Argument(help="The job's new max_cost_usd, above what it has already spent."),
    ] = None,
    tokens: Annotated[
        int | None,
        typer.Option(help="The job's new max_tokens, above what it has already spent."),
    ] = None,
) -> None:
    """Raise a job's spend ceiling; a job blocked on it resumes its agent's session
    (raise_job_budget)."""
    job_id = _job_id(job)
    if usd is None and tokens is None:
        raise fail("give the new ceiling in USD (`ceaseless job raise-budget ID 5`) or --tokens")
    call(jobs.raise_budget, job_id, usd, tokens)
    typer.echo(f"job {job_id}: ceiling raised")


@app.command("why")
def job_why(job: JobArg, output: OutputOpt = Output.TABLE) -> None:
    """Why is this job not running? Every reason that holds it, and when each clears
    (explain_job)."""
    why(commands.Explained.JOB, _job_id(job), output)
