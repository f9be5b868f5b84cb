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
from psycopg import sql

from listener import cron
from listener.cli import cron as cron_cli
from listener.cli.common import fail, given, insert, query, table

app = typer.Typer(
    help="Routines (ceaseless.routines): cron, event, webhook and manual triggers.",
    no_args_is_help=True,
)

RoutineArg = Annotated[str, typer.Argument(help="Name or id.")]
UserOpt = Annotated[str | None, typer.Option(help="Owner, when names clash.")]


def _routine_id(ref: str, user: str | None) -> str:
    rows = query(
        "select id from ceaseless.routines where (id::text = %s or name = %s) "
        "and (%s::text is null or user_id = %s)",
        (ref, ref, user, user),
    )
    if not rows:
        raise fail(f"no routine named or numbered {ref!r}" + (f" for user {user}" if user else ""))
    if len(rows) > 1:
        raise fail(f"{len(rows)} routines are named {ref!r}; pick one with --user or use its id")
    return str(rows[0][0])


@app.command("add")
def routine_add(
    name: Annotated[str, typer.Argument(help="Unique per user.")],
    agent: Annotated[str, typer.Option(help="Agent lane that runs it.")],
    user: Annotated[str, typer.Option(help="Owner (routines.user_id).")] = "default",
    cron: Annotated[
        str | None, typer.Option(help="Cron schedule; 6 fields put seconds LAST: '0 9 * * * 30'.")
    ] = None,
    timezone: Annotated[
        str | None,
        typer.Option(help="IANA time zone for --cron (default: UTC, filled in by the database)."),
    ] = None,
    event: Annotated[
        str | None, typer.Option(help="Regex that an event's content must match.")
    ] = None,
    channel: Annotated[str | None, typer.Option(help="Event channel (case-insensitive).")] = None,
    webhook: Annotated[str | None, typer.Option(help="URL path for POST /hooks/{path}.")] = None,
    secret: Annotated[str | None, typer.Option(help="Webhook signing secret.")] = None,
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
    cooldown: Annotated[
        int | None,
        typer.Option(help="Seconds after a run before the next (default: the column default)."),
    ] = None,
    max_concurrent: Annotated[
        int | None,
        typer.Option(help="Runs of this routine at once (default: the column default)."),
    ] = None,
    dedup_window: Annotated[
        int | None, typer.Option(help="Seconds in which identical content fires once.")
    ] = None,
) -> None:
    """Create a routine: one trigger (--cron, --event, --webhook, or none for manual) and
    one action (--prompt for lightweight, --title/--description for full_job)."""
    triggers = {
        "cron": given({"schedule": cron, "timezone": timezone}) if cron else None,
        "event": {"pattern": event, "channel": channel} if event else None,
        "webhook": {"path": webhook, "secret": secret} if webhook else None,
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
    values = given(
        {
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
        }
    )
    rows = query(sql.SQL("{} returning id").format(insert("routines", values)), values)
    typer.echo(str(rows[0][0]))


@app.command("list")
def routine_list() -> None:
    """One line per routine (ceaseless.routine_status)."""
    rows = query(
        "select name, user_id, enabled, trigger_type, coalesce(schedule, ''), next_fire_at, "
        "last_status, consecutive_failures, runs_24h, skips_24h from ceaseless.routine_status "
        "order by user_id, name"
    )
    table(
        rows,
        [
            "name",
            "user",
            "enabled",
            "trigger",
            "schedule",
            "next_fire_at",
            "last",
            "failures",
            "runs_24h",
            "skips_24h",
        ],
    )


@app.command("show")
def routine_show(routine: RoutineArg, user: UserOpt = None) -> None:
    """A routine's configuration, state and its last 10 runs."""
    routine_id = _routine_id(routine, user)
    rows = query(
        "select name, user_id, enabled, agent, trigger_type, trigger_config - 'secret', "
        "action_type, action_config, cooldown_secs, max_concurrent, dedup_window_secs, "
        "next_fire_at, last_run_at, run_count, consecutive_failures, last_error "
        "from ceaseless.routines where id = %s",
        (routine_id,),
    )
    headers = [
        "name",
        "user",
        "enabled",
        "agent",
        "trigger",
        "trigger_config",
        "action",
        "action_config",
        "cooldown_secs",
        "max_concurrent",
        "dedup_window_secs",
        "next_fire_at",
        "last_run_at",
        "run_count",
        "consecutive_failures",
        "last_error",
    ]
    for header, value in zip(headers, rows[0], strict=True):
        typer.echo(f"{header:>22}  {'' if value is None else value}")
    typer.echo("")
    runs = query(
        "select started_at, trigger_type, status, coalesce(skip_reason, ''), missed_slots, "
        "left(coalesce(result_summary, ''), 60) from ceaseless.routine_runs "
        "where routine_id = %s order by started_at desc limit 10",
        (routine_id,),
    )
    table(runs, ["started_at", "trigger", "status", "skip", "missed", "summary"])
    _show_next_slots(routine_id)


def _show_next_slots(routine_id: str) -> None:
    """A cron routine's next five slots, computed as the listener computes next_fire_at."""
    (trigger,) = query(
        "select case when trigger_type = 'cron' then trigger_config end "
        "from ceaseless.routines where id = %s",
        (routine_id,),
    )
    config = trigger[0]
    if not isinstance(config, dict):
        return
    zone = str(config.get("timezone") or "UTC")
    typer.echo(f"\nnext slots ({config.get('schedule')}, {zone}):")
    try:
        slots = cron_cli.upcoming(str(config.get("schedule")), zone, 5, datetime.now(UTC))
    except cron.CronError as exc:
        typer.echo(f"  none: {exc}")
        return
    cron_cli.print_slots(slots, zone)


@app.command("run")
def routine_run(routine: RoutineArg, user: UserOpt = None) -> None:
    """Fire a routine now (run_routine): ignores cooldown, respects max_concurrent."""
    # Two statements: a query cannot see a row its own function call inserted.
    run_id = query("select ceaseless.run_routine(%s)", (_routine_id(routine, user),))[0][0]
    status, reason = query(
        "select status, skip_reason from ceaseless.routine_runs where id = %s", (run_id,)
    )[0]
    typer.echo(f"{run_id} {status}" + (f" ({reason})" if reason else ""))


def _set_enabled(routine: str, user: str | None, enabled: bool) -> None:
    query(
        "update ceaseless.routines set enabled = %s where id = %s",
        (enabled, _routine_id(routine, user)),
    )
    typer.echo(f"routine {routine} {'enabled' if enabled else 'disabled'}")


@app.command("enable")
def routine_enable(routine: RoutineArg, user: UserOpt = None) -> None:
    """Enable a routine (a cron routine gets a fresh next_fire_at)."""
    _set_enabled(routine, user, True)


@app.command("disable")
def routine_disable(routine: RoutineArg, user: UserOpt = None) -> None:
    """Disable a routine: it stops firing; its history stays."""
    _set_enabled(routine, user, False)


@app.command("delete")
def routine_delete(routine: RoutineArg, user: UserOpt = None) -> None:
    """Delete a routine and its run history."""
    query("delete from ceaseless.routines where id = %s", (_routine_id(routine, user),))
    typer.echo(f"routine {routine} deleted")
