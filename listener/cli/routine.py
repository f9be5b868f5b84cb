"""`ceaseless routine …`: create, inspect, fire, enable, disable and delete routines.

A routine is named by its id or by its name (with --user when two users share a
name). Guarantees: `routine add` is one INSERT whose trigger and action the
database validates and completes (the time zone of a cron trigger, the columns
left out, which get their defaults); `routine run` is run_routine, so the
guardrails it applies are the engine's own.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Annotated

import typer

from listener import cron
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
    column_option,
    emitting,
    fail,
    given,
    list_rows,
    note,
    record,
    section,
)
from listener.enums import OverlapPolicy
from listener.queries import commands
from listener.queries.commands import routines
from listener.queries.commands.cron import Backfilled

app = typer.Typer(
    help="Routines (ceaseless.routines): cron, event, webhook and manual triggers.",
    no_args_is_help=True,
)

RoutineArg = Annotated[str, typer.Argument(help="Name or id.")]
UserOpt = Annotated[str | None, typer.Option(help="Owner, when names clash.")]


ROUTINES = Named(
    commands.Named.ROUTINES,
    "routine",
    missing="no routine named or numbered {ref!r}{for_user}",
    ambiguous="{count} routines are named {ref!r}; pick one with --user or use its id",
    explained=commands.Explained.ROUTINE,
)


@app.command("add")
def routine_add(
    name: Annotated[str, typer.Argument(help="Unique per user.")],
    agent: Annotated[
        str | None,
        typer.Option(help="Agent lane that runs it (default: the setting default_agent)."),
    ] = None,
    user: Annotated[
        str | None,
        typer.Option(help="Owner (routines.user_id; default: your database role)."),
    ] = None,
    cron: CronOpt = None,
    timezone: TimezoneOpt = None,
    event: EventOpt = None,
    channel: ChannelOpt = None,
    webhook: Annotated[str | None, typer.Option(help="URL path for POST /hooks/{path}.")] = None,
    secret: Annotated[str | None, typer.Option(help="Webhook signing secret.")] = None,
    scheme: Annotated[
        str | None,
        typer.Option(
            help="How the webhook's sender signs: ceaseless (the default), github, standard "
            "(Standard Webhooks) or stripe; see docs/webhooks.md."
        ),
    ] = None,
    prompt: Annotated[
        str | None, typer.Option(help="Lightweight action: what the agent checks.")
    ] = None,
    context_path: Annotated[
        list[str] | None, typer.Option(help="File for the prompt, relative to the workspace.")
    ] = None,
    title: Annotated[str | None, typer.Option(help="Full-job action: the job's title.")] = None,
    description: Annotated[str | None, typer.Option(help="Full-job action: the task.")] = None,
    max_iterations: Annotated[
        int | None, typer.Option(help="Full-job action: --max-turns for the agent.")
    ] = None,
    cooldown: Annotated[int | None, column_option("Seconds after a run before the next")] = None,
    max_concurrent: Annotated[int | None, column_option("Runs of this routine at once")] = None,
    dedup_window: Annotated[
        int | None, typer.Option(help="Seconds in which identical content fires once.")
    ] = None,
    overlap: Annotated[
        OverlapPolicy | None,
        typer.Option(
            help="What a fire refused by cooldown or max_concurrent becomes: skip (recorded, the "
            "default), buffer_one (the newest waits and starts when it can), buffer_all (every "
            "one waits, in order), cancel_other (the running run is cancelled), allow_all (no "
            "max_concurrent). See docs/flow-controls.md."
        ),
    ] = None,
    debounce: DebounceOpt = None,
    debounce_max: DebounceMaxOpt = None,
    job_priority: JobPriorityOpt = None,
    job_fairness_key: JobFairnessKeyOpt = None,
) -> None:
    """Create a routine: one trigger (--cron, --event, --webhook, or none for manual) and
    one action (--prompt for lightweight, --title/--description for full_job)."""
    triggers = {
        "cron": given({"schedule": cron, "timezone": timezone}) if cron else None,
        "event": {"pattern": event, "channel": channel} if event else None,
        "webhook": given({"path": webhook, "secret": secret, "scheme": scheme})
        if webhook
        else None,
    }
    chosen = {kind: config for kind, config in triggers.items() if config is not None}
    if len(chosen) > 1:
        raise fail("choose one trigger: --cron, --event or --webhook (none means manual)")
    trigger_type, trigger_config = next(iter(chosen.items()), ("manual", {}))
    if title or description:
        action_type = "full_job"
        action: dict[str, object] = {"title": title, "description": description}
        if max_iterations is not None:
            action["max_iterations"] = max_iterations
    else:
        action_type = "lightweight"
        action = {"prompt": prompt, "context_paths": context_path or []}
    values = {
        "name": name,
        "user_id": user,
        "agent": agent,
        "trigger_type": trigger_type,
        "trigger_config": json.dumps(trigger_config),
        "action_type": action_type,
        "action_config": json.dumps(action),
        "cooldown_secs": cooldown,
        "max_concurrent": max_concurrent,
        "dedup_window_secs": dedup_window,
        "overlap_policy": overlap.value if overlap is not None else None,
        "debounce_secs": debounce,
        "debounce_max_secs": debounce_max,
        "job_priority": job_priority,
        "job_fairness_key": job_fairness_key,
    }
    typer.echo(call(routines.add, values))
    if cron:
        cron_cli.warn_if_quartz(cron, timezone or "UTC")


@app.command("list")
def routine_list(output: OutputOpt = Output.TABLE) -> None:
    """One line per routine (ceaseless.routine_status)."""
    list_rows(output, routines.routines)


@app.command("show")
def routine_show(
    routine: RoutineArg, user: UserOpt = None, output: OutputOpt = Output.TABLE
) -> None:
    """A routine's configuration, state, its last 10 runs and its next cron slots."""
    routine_id, shown = ROUTINES.read(routines.routine, routine, user)
    runs = call(routines.runs, routine_id)
    with emitting(output):
        record(shown, name="routine")
        section(runs, "runs")
        fields = dict(shown)
        if fields["trigger"] == "cron":
            _show_next_slots(fields["trigger_config"])


def _show_next_slots(config: dict[str, object]) -> None:
    """A cron routine's next five slots, computed as the listener computes next_fire_at."""
    zone = str(config.get("timezone") or "UTC")
    note(f"\nnext slots ({config.get('schedule')}, {zone}):")
    try:
        slots = cron_cli.upcoming(str(config.get("schedule")), zone, 5, datetime.now(UTC))
    except cron.CronError as exc:
        note(f"  none: {exc}")
        return
    cron_cli.print_slots(slots, zone)


@app.command("run")
def routine_run(routine: RoutineArg, user: UserOpt = None) -> None:
    """Fire a routine now (run_routine): ignores cooldown, respects max_concurrent.

    A refused fire is recorded as a skipped run, printed with its reason, and exits with
    status 1; one the routine's overlap policy keeps (buffer_one, buffer_all) is printed as
    held, with what it waits for.
    """
    run_id, status, reason = call(routines.run, ROUTINES.id(routine, user))
    typer.echo(f"{run_id} {status}" + (f" ({reason})" if reason else ""))
    if status == "skipped":
        raise typer.Exit(1)


@app.command("backfill")
def routine_backfill(
    routine: RoutineArg,
    start: cron_cli.FromOpt,
    end: cron_cli.ToOpt,
    most: cron_cli.MaxOpt = None,
    user: UserOpt = None,
    output: OutputOpt = Output.TABLE,
) -> None:
    """Fire the cron slots between --from and --to that never fired (backfill_routine).

    Slots a listener that was down collapsed into one fire, or whose fire a guardrail refused,
    fire now, oldest first, each a run recorded with its slot (trigger backfill) and judged as
    a cron fire is (max_concurrent, cooldown, the global cap); slots that fired already are
    listed, not fired again, so a backfill can be repeated.
    """
    cron_cli.backfill(Backfilled.ROUTINE, ROUTINES.id(routine, user), start, end, most, output)


@app.command("enable")
def routine_enable(routine: RoutineArg, user: UserOpt = None) -> None:
    """Enable a routine (a cron routine gets a fresh next_fire_at)."""
    ROUTINES.set_enabled(routine, True, user)


@app.command("disable")
def routine_disable(routine: RoutineArg, user: UserOpt = None) -> None:
    """Disable a routine: it stops firing; its history stays."""
    ROUTINES.set_enabled(routine, False, user)


@app.command("delete")
def routine_delete(routine: RoutineArg, user: UserOpt = None) -> None:
    """Delete a routine and its run history."""
    ROUTINES.delete(routine, user)


@app.command("why")
def routine_why(
    routine: RoutineArg, user: UserOpt = None, output: OutputOpt = Output.TABLE
) -> None:
    """Why is this routine not firing? Every reason that holds it, and when each clears
    (explain_routine)."""
    ROUTINES.why(routine, output, user)
