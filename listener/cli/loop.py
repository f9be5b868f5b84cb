"""`ceaseless loop …`: create, inspect, fire, pause, resume and delete loops.

A loop runs a topology graph again and again: on a cron schedule, when its
previous iteration completes, when its webhook is called, or by hand, until its
repeat policy says stop (docs/loops.md). A loop is named by its id or by its
title when only one loop has it.

Guarantees: `loop add` is one INSERT, which the database validates in full and
completes (the timezone of a cron trigger, the workspace, the webhook
credential); `loop run` is run_loop, the one firing path of every trigger, so a
fire refused by a guardrail is recorded as a skipped run like any other. The
webhook token and signing key are never printed: `loop show` names the SQL that
reads them, for the owner to run.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from listener.cli import cron as cron_cli
from listener.cli.common import (
    ChannelOpt,
    CronOpt,
    DebounceMaxOpt,
    DebounceOpt,
    EventOpt,
    JobFairnessKeyOpt,
    JobPriorityOpt,
    Named,
    Output,
    OutputOpt,
    TimezoneOpt,
    call,
    emitting,
    fail,
    given,
    list_rows,
    note,
    record,
    section,
)
from listener.enums import LoopOverlapPolicy
from listener.queries import commands
from listener.queries.commands import loops
from listener.queries.commands.cron import Backfilled

app = typer.Typer(
    help=(
        "Loops (ceaseless.loops): a graph of agents run as iterations, fired by cron, by the "
        "previous iteration completing, by a webhook or by hand, until a repeat policy stops it."
    ),
    no_args_is_help=True,
)

LoopArg = Annotated[
    str, typer.Argument(help="The loop's id, or its title if no other loop has it.")
]


LOOPS = Named(
    commands.Named.LOOPS,
    "loop",
    missing="no loop with the id or title {ref!r} (see: ceaseless loop list)",
    ambiguous="{count} loops are titled {ref!r}; use the id (ceaseless loop list)",
    said=("resumed", "paused"),
    explained=commands.Explained.LOOP,
)


def _read_graph(source: str) -> str:
    """The graph file's JSON ('-' reads stdin), checked to parse; the database checks the rest."""
    try:
        text = sys.stdin.read() if source == "-" else Path(source).read_text()
    except OSError as exc:
        raise fail(f"--graph {source}: {exc.strerror or exc}") from None
    try:
        json.loads(text)
    except ValueError as exc:
        raise fail(f"--graph {source} is not JSON: {exc}") from None
    return text


def _policy(
    iters: int | None, until_match: str | None, until_event: str | None, within: int | None
) -> dict[str, Any] | None:
    """The repeat_policy the options describe; None (the column default, infinite) for none."""
    chosen = [
        name
        for name, v in (
            ("--iters", iters),
            ("--until-match", until_match),
            ("--until-event", until_event),
        )
        if v is not None
    ]
    if len(chosen) > 1:
        raise fail(f"choose one repeat policy: {' or '.join(chosen)} (none means infinite)")
    if iters is not None:
        if within is not None:
            raise fail("--within goes with --until-match or --until-event, not --iters")
        return {"kind": "iters", "spec": {"n": iters}}
    if until_match is not None or until_event is not None:
        spec: dict[str, Any] = (
            {"match": until_match} if until_match is not None else {"event": until_event}
        )
        if within is not None:
            spec["within_iters"] = within
        return {"kind": "until", "spec": spec}
    if within is not None:
        raise fail("--within needs --until-match or --until-event")
    return None


def _workspace_id(name: str) -> str:
    found = call(loops.workspace_id, name)
    if found is None:
        raise fail(
            f"no workspace named {name!r}; an operator creates one with: "
            f"insert into ceaseless.workspaces (name) values ('{name}');"
        )
    return found


@app.command("add")
def loop_add(
    title: Annotated[str, typer.Option(help="A short name, shown by `loop list`.")],
    task: Annotated[
        str, typer.Option(help="What every iteration works on: the run's task, given to each node.")
    ],
    graph: Annotated[
        str,
        typer.Option(
            help='JSON file with the graph, \'-\' for stdin: {"nodes": [{"id", "agent", '
            '"prompt", "gate"?}], "edges": [{"from", "to"}]}.'
        ),
    ],
    description: Annotated[str, typer.Option(help="A longer note for people.")] = "",
    cron: CronOpt = None,
    tz: TimezoneOpt = None,
    on_completion: Annotated[
        bool, typer.Option("--on-completion", help="Start the next iteration when one ends.")
    ] = False,
    webhook: Annotated[
        bool,
        typer.Option(
            "--webhook", help="Fire on POST /hooks/<token>; the database makes the token and key."
        ),
    ] = False,
    event: EventOpt = None,
    channel: ChannelOpt = None,
    iters: Annotated[int | None, typer.Option(help="Policy: stop after N iterations.")] = None,
    until_match: Annotated[
        str | None,
        typer.Option(help="Policy: stop when an iteration's final message matches this regex."),
    ] = None,
    until_event: Annotated[
        str | None,
        typer.Option(help="Policy: stop when an iteration ends so: succeeded (or ok) or failed."),
    ] = None,
    within: Annotated[
        int | None,
        typer.Option(help="With --until-*: give up (stopped as exhausted) after N iterations."),
    ] = None,
    workspace: Annotated[
        str | None, typer.Option(help="Workspace name (default: the workspace named default).")
    ] = None,
    disabled: Annotated[
        bool, typer.Option("--disabled", help="Create it paused; `loop resume` starts it.")
    ] = False,
    overlap: Annotated[
        LoopOverlapPolicy | None,
        typer.Option(
            help="What a fire refused because an iteration is live becomes: skip (recorded, the "
            "default), buffer_one (the newest waits and starts after it), buffer_all (every one "
            "waits, in order), cancel_other (the live iteration is cancelled). See "
            "docs/flow-controls.md."
        ),
    ] = None,
    debounce: DebounceOpt = None,
    debounce_max: DebounceMaxOpt = None,
    min_interval: Annotated[
        int | None,
        typer.Option(
            help="Seconds: the least time between two iterations' fires; a fire sooner waits "
            "until then (held, never skipped). 0 is unpaced; default 1. `loop run` is not paced."
        ),
    ] = None,
    job_priority: JobPriorityOpt = None,
    job_fairness_key: JobFairnessKeyOpt = None,
) -> None:
    """Create a loop. With no trigger it runs only by `ceaseless loop run`; with no policy, forever.

    Example (see docs/loops.md):

    \b
    ceaseless loop add --title refine --task "Improve the intro" --graph g.json \\
        --on-completion --until-match DONE --within 5
    """
    triggers: dict[str, Any] = given({"cron": cron, "timezone": tz})
    if on_completion:
        triggers["on_completion"] = True
    if webhook:
        triggers["webhook_enabled"] = True
    if event is not None:
        triggers["event"] = given({"pattern": event, "channel": channel})
    elif channel is not None:
        raise fail("--channel goes with --event")
    policy = _policy(iters, until_match, until_event, within)
    values = {
        "title": title,
        "description": description,
        "task_template": task,
        "graph": _read_graph(graph),
        "triggers": json.dumps(triggers),
        "repeat_policy": json.dumps(policy) if policy is not None else None,
        "workspace_id": _workspace_id(workspace) if workspace is not None else None,
        "enabled": False if disabled else None,
        "overlap_policy": overlap.value if overlap is not None else None,
        "debounce_secs": debounce,
        "debounce_max_secs": debounce_max,
        "min_interval_secs": min_interval,
        "job_priority": job_priority,
        "job_fairness_key": job_fairness_key,
    }
    new_id = call(loops.add, values)
    typer.echo(new_id)
    if cron:
        cron_cli.warn_if_quartz(cron, tz or "UTC")
    if webhook:
        typer.echo(_webhook_hint(new_id), err=True)


def _webhook_hint(ref: str) -> str:
    return (
        "The webhook's token and signing key are not shown here. Read them (as the loop's "
        "owner) with:\n"
        f"  select webhook_token, webhook_signing_key from ceaseless.loops where id = '{ref}';\n"
        "POST /hooks/<webhook_token> on the listener's --http address, signed as docs/loops.md "
        "shows."
    )


@app.command("list")
def loop_list(output: OutputOpt = Output.TABLE) -> None:
    """One line per loop (ceaseless.loop_status)."""
    list_rows(output, loops.loops)


@app.command("show")
def loop_show(
    loop: LoopArg,
    iterations: Annotated[
        int, typer.Option(help="How many of the latest iterations to list.")
    ] = 10,
    output: OutputOpt = Output.TABLE,
) -> None:
    """A loop: its triggers, policy and state, its latest iterations and skipped fires."""
    ref, shown = LOOPS.read(loops.loop, loop)
    chain = call(loops.iterations, ref, iterations)
    skipped = call(loops.skipped_fires, ref)
    with emitting(output):
        record(shown, name="loop")
        section(chain, "iterations", "iterations (latest first):")
        section(skipped, "skipped", "skipped fires (latest first):")
        if dict(shown)["webhook"]:
            note("")
            note(_webhook_hint(ref))


@app.command("why")
def loop_why(loop: LoopArg, output: OutputOpt = Output.TABLE) -> None:
    """Why is this loop not running? Every reason that holds its next iteration, and when
    each clears (explain_loop)."""
    LOOPS.why(loop, output)


@app.command("run")
def loop_run(loop: LoopArg) -> None:
    """Fire the loop now (run_loop).

    A fire refused (an iteration is live, the loop is paused) is recorded as a skipped run,
    printed with its reason, and exits with status 1; one the loop's overlap policy keeps
    (buffer_one, buffer_all) is printed as held, with what it waits for.
    """
    run_id, status, iteration, reason = call(loops.run, LOOPS.id(loop))
    if status == "held":
        typer.echo(f"{run_id} held ({reason})")
        return
    detail = f"iteration {iteration}" if iteration is not None else f"skipped: {reason}"
    typer.echo(f"{run_id} {status} ({detail})")
    if iteration is None:
        raise typer.Exit(1)


@app.command("backfill")
def loop_backfill(
    loop: LoopArg,
    start: cron_cli.FromOpt,
    end: cron_cli.ToOpt,
    most: cron_cli.MaxOpt = None,
    output: OutputOpt = Output.TABLE,
) -> None:
    """Fire the cron slots between --from and --to that never fired (backfill_loop).

    Slots a listener that was down collapsed into one fire, or whose fire was refused, fire
    now, oldest first, each an iteration recorded with its slot (trigger backfill); slots that
    fired already are listed, not fired again. A loop runs one iteration at a time, so while
    one is live a backfilled slot is refused (live_iteration): backfill again once it ends.
    """
    cron_cli.backfill(Backfilled.LOOP, LOOPS.id(loop), start, end, most, output)


@app.command("pause")
def loop_pause(loop: LoopArg) -> None:
    """Pause a loop: nothing fires it until `loop resume` (a live iteration runs to its end)."""
    LOOPS.set_enabled(loop, False)


@app.command("resume")
def loop_resume(loop: LoopArg) -> None:
    """Resume a paused or stopped loop.

    Its chain goes on and its policy counts again from here; an on_completion loop starts its
    next iteration at once.
    """
    LOOPS.set_enabled(loop, True)


@app.command("delete")
def loop_delete(loop: LoopArg) -> None:
    """Delete a loop and its iterations.

    Refused while an iteration is live: cancel it first with `ceaseless run cancel`.
    """
    LOOPS.delete(loop)
