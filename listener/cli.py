"""The `ceaseless` command: conveniences over the SQL API, and the listener itself.

Everything here can also be done in psql; the CLI only saves typing. Errors from
the database are shown as the database phrased them (they name the field, the
rule and the value), without a traceback.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from pathlib import Path
from typing import Annotated

import psycopg
import typer

from listener import db, log
from listener.embedded import EmbeddedError, EmbeddedServer, default_home, wheel_bin_dir
from listener.enums import Adapter, JobKind
from listener.migrate import MigrationError, migrate

app = typer.Typer(
    help=(
        "ceaseless runs AI-agent work from a PostgreSQL queue.\n\n"
        "Start here: `ceaseless up` starts the database (embedded unless DATABASE_URL is set), "
        "applies migrations and runs the listener. In another terminal, `ceaseless db psql` "
        "opens psql on the same database, where INSERTs are the API."
    ),
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
db_app = typer.Typer(
    help="The database: embedded PostgreSQL unless DATABASE_URL is set.", no_args_is_help=True
)
agent_app = typer.Typer(help="The agent registry (ceaseless.agents).", no_args_is_help=True)
job_app = typer.Typer(help="Jobs in the queue (ceaseless.job).", no_args_is_help=True)
routine_app = typer.Typer(
    help="Routines (ceaseless.routines): cron, event, webhook and manual triggers.",
    no_args_is_help=True,
)
app.add_typer(db_app, name="db")
app.add_typer(agent_app, name="agent")
app.add_typer(job_app, name="job")
app.add_typer(routine_app, name="routine")
docs_app = typer.Typer(help="Generated documentation.", no_args_is_help=True)
app.add_typer(docs_app, name="docs")


def _fail(message: str) -> typer.Exit:
    typer.secho(f"error: {message}", fg=typer.colors.RED, err=True)
    return typer.Exit(1)


def _url() -> str:
    try:
        return db.database_url()
    except EmbeddedError as exc:
        raise _fail(str(exc)) from None


def _sql(query: str, params: tuple[object, ...] = ()) -> list[tuple[object, ...]]:
    try:
        with db.connect(_url(), application_name="ceaseless cli") as conn:
            cur = conn.execute(query.encode(), params)
            return cur.fetchall() if cur.description else []
    except psycopg.Error as exc:
        detail = f"\n{exc.diag.message_detail}" if exc.diag.message_detail else ""
        raise _fail(f"{exc.diag.message_primary or exc}{detail}") from None


def _table(rows: list[tuple[object, ...]], headers: list[str]) -> None:
    cells = [headers, *[["" if v is None else str(v) for v in row] for row in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    for n, row in enumerate(cells):
        typer.echo("  ".join(value.ljust(widths[i]) for i, value in enumerate(row)).rstrip())
        if n == 0:
            typer.echo("  ".join("-" * w for w in widths))


# -- the main job -------------------------------------------------------------


def _serve(url: str, options: dict[str, object]) -> None:
    from listener.daemon import Listener, ListenerConfig

    config = ListenerConfig(url=url, **options)  # type: ignore[arg-type]

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await Listener(config).run(stop)

    asyncio.run(main())


ConcurrencyOpt = Annotated[int, typer.Option(help="Agents this listener runs at once.")]
PollOpt = Annotated[
    float, typer.Option(help="Seconds between fallback polls; NOTIFY wakes it sooner.")
]
GraceOpt = Annotated[
    float, typer.Option(help="On SIGTERM, seconds running agents get before they are released.")
]
LogOpt = Annotated[str, typer.Option(help="Log lines as 'text' or 'json'.")]
KindsOpt = Annotated[
    list[str] | None, typer.Option("--kind", help="Only claim jobs of this kind (repeatable).")
]
AgentsOpt = Annotated[
    list[str] | None, typer.Option("--agent", help="Only claim jobs of this agent (repeatable).")
]
LeaseOpt = Annotated[
    int | None, typer.Option(help="Lease seconds (default: the lease_secs setting).")
]
WorkerOpt = Annotated[
    str | None, typer.Option(help="This listener's id in claimed_by (default host:pid:random).")
]
WorkdirOpt = Annotated[
    Path | None,
    typer.Option(
        help="Workspace root: agents run here and routine context_paths are read from here "
        "(default: the current directory)."
    ),
]
HttpOpt = Annotated[
    str | None,
    typer.Option(
        "--http",
        help="Serve the webhook ingress (POST /hooks/{path}) on HOST:PORT, e.g. 127.0.0.1:8787.",
    ),
]
MaxBodyOpt = Annotated[int, typer.Option(help="Largest webhook body in bytes; larger gets 413.")]


def _listener_options(
    concurrency: int,
    poll_interval: float,
    shutdown_grace: float,
    kind: list[str] | None,
    agent: list[str] | None,
    lease_secs: int | None,
    worker_id: str | None,
    workdir: Path | None,
    http: str | None,
    max_body: int,
) -> dict[str, object]:
    options: dict[str, object] = {
        "concurrency": concurrency,
        "poll_interval": poll_interval,
        "shutdown_grace": shutdown_grace,
        "kinds": kind or None,
        "agents": agent or None,
        "lease_secs": lease_secs,
        "workdir": str(workdir.resolve()) if workdir else None,
        "http": http,
        "max_body": max_body,
    }
    if worker_id:
        options["worker_id"] = worker_id
    return options


@app.command()
def up(
    concurrency: ConcurrencyOpt = 32,
    poll_interval: PollOpt = 5.0,
    shutdown_grace: GraceOpt = 30.0,
    kind: KindsOpt = None,
    agent: AgentsOpt = None,
    lease_secs: LeaseOpt = None,
    worker_id: WorkerOpt = None,
    workdir: WorkdirOpt = None,
    http: HttpOpt = None,
    max_body: MaxBodyOpt = 1 << 20,
    log_format: LogOpt = "text",
) -> None:
    """Start the database, apply migrations, and run the listener until Ctrl-C / SIGTERM."""
    log.configure(log_format)
    url = _url()
    try:
        report = migrate(url)
    except MigrationError as exc:
        raise _fail(str(exc)) from None
    log.event("migrate.done", applied=[m.path.name for m in report.applied])
    if db.uses_embedded():
        log.event("db.embedded", url=url, psql="ceaseless db psql")
    _serve(
        url,
        _listener_options(
            concurrency,
            poll_interval,
            shutdown_grace,
            kind,
            agent,
            lease_secs,
            worker_id,
            workdir,
            http,
            max_body,
        ),
    )


@app.command()
def listen(
    concurrency: ConcurrencyOpt = 32,
    poll_interval: PollOpt = 5.0,
    shutdown_grace: GraceOpt = 30.0,
    kind: KindsOpt = None,
    agent: AgentsOpt = None,
    lease_secs: LeaseOpt = None,
    worker_id: WorkerOpt = None,
    workdir: WorkdirOpt = None,
    http: HttpOpt = None,
    max_body: MaxBodyOpt = 1 << 20,
    log_format: LogOpt = "text",
) -> None:
    """Run only the listener (the schema must be migrated): claim jobs and run their agents."""
    log.configure(log_format)
    _serve(
        _url(),
        _listener_options(
            concurrency,
            poll_interval,
            shutdown_grace,
            kind,
            agent,
            lease_secs,
            worker_id,
            workdir,
            http,
            max_body,
        ),
    )


@app.command("migrate")
def migrate_command(
    dry_run: Annotated[bool, typer.Option(help="List what would run; change nothing.")] = False,
) -> None:
    """Apply new db/ migrations, then re-apply every functions/ file."""
    try:
        report = migrate(_url(), dry_run=dry_run)
    except MigrationError as exc:
        raise _fail(str(exc)) from None
    verb = "would apply" if dry_run else "applied"
    if report.applied:
        for migration in report.applied:
            typer.echo(f"{verb} {migration.path.name}")
    else:
        typer.echo("no migrations to apply")
    typer.echo(
        f"{'would re-apply' if dry_run else 're-applied'} {len(report.functions)} "
        f"function files: {', '.join(p.name for p in report.functions)}"
    )


@app.command()
def status() -> None:
    """Queue summary: jobs by state, and each agent lane's governor usage."""
    rows = _sql("select state, count(*) from ceaseless.job group by state order by state")
    _table(rows, ["state", "jobs"])
    typer.echo("")
    rows = _sql(
        "select agent, adapter, enabled, live, max_concurrent, started_in_window, window_budget, "
        "free_slots, pending_due, paused_until from ceaseless.governor_usage order by agent"
    )
    _table(
        rows,
        [
            "agent",
            "adapter",
            "enabled",
            "live",
            "max",
            "in_window",
            "budget",
            "free",
            "due",
            "paused_until",
        ],
    )
    stuck = _sql("select count(*) from ceaseless.stuck_jobs")
    if stuck and stuck[0][0]:
        typer.secho(
            f"\n{stuck[0][0]} stuck jobs: select * from ceaseless.stuck_jobs;",
            fg=typer.colors.YELLOW,
        )


# -- db -----------------------------------------------------------------------


def _embedded() -> EmbeddedServer:
    if not db.uses_embedded():
        raise _fail("DATABASE_URL (or PG* variables) is set: the embedded database is not in use")
    return EmbeddedServer(default_home())


@db_app.command("start")
def db_start() -> None:
    """Start the embedded PostgreSQL (reuses it when already running) and print its URL."""
    try:
        typer.echo(_embedded().start())
    except EmbeddedError as exc:
        raise _fail(str(exc)) from None


@db_app.command("stop")
def db_stop() -> None:
    """Stop the embedded PostgreSQL."""
    try:
        typer.echo(_embedded().stop())
    except EmbeddedError as exc:
        raise _fail(str(exc)) from None


@db_app.command("status")
def db_status() -> None:
    """Say whether the embedded PostgreSQL is running, and where its data lives."""
    if not db.uses_embedded():
        typer.echo("using DATABASE_URL / PG* variables, not the embedded database")
        return
    state = _embedded().state()
    typer.echo(state.detail)
    if not state.running:
        raise typer.Exit(3)


@db_app.command("url")
def db_url() -> None:
    """Print the database URL (starting the embedded server if needed)."""
    typer.echo(_url())


@db_app.command("psql")
def db_psql(
    args: Annotated[list[str] | None, typer.Argument(help="Extra arguments for psql.")] = None,
) -> None:
    """Open psql on the database (the psql shipped with the embedded server)."""
    url = _url()
    # The embedded wheel's psql works with any server version we support, so
    # no system psql is needed either way.
    psql = str(wheel_bin_dir() / "psql")
    argv = [psql, url or "", *(args or [])]
    sys.stdout.flush()
    os.execv(psql, argv)


# -- agents -------------------------------------------------------------------


@agent_app.command("add")
def agent_add(
    name: Annotated[str, typer.Argument(help="Lane name, e.g. claude or my-script.")],
    adapter: Annotated[Adapter, typer.Option(help="How to run and read the agent.")],
    argv: Annotated[
        list[str] | None,
        typer.Argument(help="Executable and fixed arguments (after --), e.g. -- claude."),
    ] = None,
    model: Annotated[str | None, typer.Option(help="Model name passed to the agent.")] = None,
    timeout_secs: Annotated[int, typer.Option(help="Wall-clock limit per run.")] = 3600,
    max_concurrent: Annotated[int, typer.Option(help="Runs of this lane at once.")] = 4,
    window_secs: Annotated[int, typer.Option(help="Rolling window for the budget.")] = 3600,
    window_budget: Annotated[
        int | None, typer.Option(help="Runs started per window (default unlimited).")
    ] = None,
    env: Annotated[
        list[str] | None, typer.Option(help="KEY=VALUE for the agent's environment (repeatable).")
    ] = None,
) -> None:
    """Register (or replace) an agent lane."""
    environment = dict(item.split("=", 1) for item in (env or []))
    _sql(
        "insert into ceaseless.agents (name, adapter, argv, model, timeout_secs, max_concurrent, "
        "window_secs, window_budget, env) values (%s, %s, %s, %s, %s, %s, %s, %s, %s) "
        "on conflict (name) do update set adapter = excluded.adapter, argv = excluded.argv, "
        "model = excluded.model, timeout_secs = excluded.timeout_secs, "
        "max_concurrent = excluded.max_concurrent, window_secs = excluded.window_secs, "
        "window_budget = excluded.window_budget, env = excluded.env, updated_at = now()",
        (
            name,
            adapter.value,
            argv or [],
            model,
            timeout_secs,
            max_concurrent,
            window_secs,
            window_budget,
            json.dumps(environment),
        ),
    )
    typer.echo(f"agent {name} registered")


@agent_app.command("list")
def agent_list() -> None:
    """List registered agents with their limits."""
    rows = _sql(
        "select name, adapter, array_to_string(argv, ' '), model, timeout_secs, max_concurrent, "
        "window_budget, enabled from ceaseless.agents order by name"
    )
    _table(rows, ["name", "adapter", "argv", "model", "timeout", "max", "budget", "enabled"])


# -- jobs ---------------------------------------------------------------------


@job_app.command("add")
def job_add(
    agent: Annotated[str, typer.Argument(help="Agent lane that runs it.")],
    prompt: Annotated[str, typer.Argument(help="What the agent is asked (sent on stdin).")],
    kind: Annotated[JobKind, typer.Option(help="Job kind.")] = JobKind.TASK,
    dedup_key: Annotated[str | None, typer.Option(help="At most one live job per key.")] = None,
    max_turns: Annotated[int | None, typer.Option(help="Bound on agent turns.")] = None,
) -> None:
    """Enqueue a job and print its id."""
    rows = _sql(
        "insert into ceaseless.job (kind, agent, prompt, dedup_key, max_turns) "
        "values (%s, %s, %s, %s, %s) returning id",
        (kind.value, agent, prompt, dedup_key, max_turns),
    )
    typer.echo(str(rows[0][0]))


@job_app.command("list")
def job_list(
    all_states: Annotated[
        bool, typer.Option("--all", help="Include finished jobs (latest 50).")
    ] = False,
) -> None:
    """List live jobs (ceaseless.job_queue), or the latest jobs with --all."""
    if all_states:
        rows = _sql(
            "select id, kind, agent, state, attempts, claimed_by, last_error from ceaseless.job "
            "order by created_at desc limit 50"
        )
    else:
        rows = _sql(
            "select id, kind, agent, state, attempts, claimed_by, last_error "
            "from ceaseless.job_queue order by created_at"
        )
    _table(rows, ["id", "kind", "agent", "state", "attempts", "claimed_by", "last_error"])


@job_app.command("cancel")
def job_cancel(job_id: Annotated[str, typer.Argument(help="The job's id.")]) -> None:
    """Cancel a job; a running agent is stopped (cancel_job)."""
    _sql("select ceaseless.cancel_job(%s)", (job_id,))
    typer.echo(f"job {job_id} cancelled")


@job_app.command("retry")
def job_retry(job_id: Annotated[str, typer.Argument(help="The job's id.")]) -> None:
    """Run a finished job again with a fresh attempt budget (retry_job)."""
    _sql("select ceaseless.retry_job(%s)", (job_id,))
    typer.echo(f"job {job_id} is pending again")


# -- routines -----------------------------------------------------------------


def _routine_id(ref: str, user: str | None) -> str:
    rows = _sql(
        "select id from ceaseless.routines where (id::text = %s or name = %s) "
        "and (%s::text is null or user_id = %s)",
        (ref, ref, user, user),
    )
    if not rows:
        raise _fail(f"no routine named or numbered {ref!r}" + (f" for user {user}" if user else ""))
    if len(rows) > 1:
        raise _fail(f"{len(rows)} routines are named {ref!r}; pick one with --user or use its id")
    return str(rows[0][0])


@routine_app.command("add")
def routine_add(
    name: Annotated[str, typer.Argument(help="Unique per user.")],
    agent: Annotated[str, typer.Option(help="Agent lane that runs it.")],
    user: Annotated[str, typer.Option(help="Owner (routines.user_id).")] = "default",
    cron: Annotated[
        str | None, typer.Option(help="Cron schedule; 6 fields put seconds LAST: '0 9 * * * 30'.")
    ] = None,
    timezone: Annotated[str, typer.Option(help="IANA time zone for --cron.")] = "UTC",
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
    cooldown: Annotated[int, typer.Option(help="Seconds after a run before the next.")] = 300,
    max_concurrent: Annotated[int, typer.Option(help="Runs of this routine at once.")] = 1,
    dedup_window: Annotated[
        int | None, typer.Option(help="Seconds in which identical content fires once.")
    ] = None,
) -> None:
    """Create a routine: one trigger (--cron, --event, --webhook, or none for manual) and
    one action (--prompt for lightweight, --title/--description for full_job)."""
    triggers = {
        "cron": {"schedule": cron, "timezone": timezone} if cron else None,
        "event": {"pattern": event, "channel": channel} if event else None,
        "webhook": {"path": webhook, "secret": secret} if webhook else None,
    }
    chosen = {kind: config for kind, config in triggers.items() if config is not None}
    if len(chosen) > 1:
        raise _fail("choose one trigger: --cron, --event or --webhook (none means manual)")
    trigger_type, trigger_config = next(iter(chosen.items()), ("manual", {}))
    if title or description:
        action_type = "full_job"
        action: dict[str, object] = {"title": title, "description": description}
        if max_iterations is not None:
            action["max_iterations"] = max_iterations
    else:
        action_type = "lightweight"
        action = {"prompt": prompt, "context_paths": context_path or []}
    rows = _sql(
        "insert into ceaseless.routines (name, user_id, agent, trigger_type, trigger_config, "
        "action_type, action_config, cooldown_secs, max_concurrent, dedup_window_secs) "
        "values (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s) returning id",
        (
            name,
            user,
            agent,
            trigger_type,
            json.dumps(trigger_config),
            action_type,
            json.dumps(action),
            cooldown,
            max_concurrent,
            dedup_window,
        ),
    )
    typer.echo(str(rows[0][0]))


@routine_app.command("list")
def routine_list() -> None:
    """One line per routine (ceaseless.routine_status)."""
    rows = _sql(
        "select name, user_id, enabled, trigger_type, coalesce(schedule, ''), next_fire_at, "
        "last_status, consecutive_failures, runs_24h, skips_24h from ceaseless.routine_status "
        "order by user_id, name"
    )
    _table(
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


@routine_app.command("show")
def routine_show(
    routine: Annotated[str, typer.Argument(help="Name or id.")],
    user: Annotated[str | None, typer.Option(help="Owner, when names clash.")] = None,
) -> None:
    """A routine's configuration, state and its last 10 runs."""
    routine_id = _routine_id(routine, user)
    rows = _sql(
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
    runs = _sql(
        "select started_at, trigger_type, status, coalesce(skip_reason, ''), missed_slots, "
        "left(coalesce(result_summary, ''), 60) from ceaseless.routine_runs "
        "where routine_id = %s order by started_at desc limit 10",
        (routine_id,),
    )
    _table(runs, ["started_at", "trigger", "status", "skip", "missed", "summary"])


@routine_app.command("run")
def routine_run(
    routine: Annotated[str, typer.Argument(help="Name or id.")],
    user: Annotated[str | None, typer.Option(help="Owner, when names clash.")] = None,
) -> None:
    """Fire a routine now (run_routine): ignores cooldown, respects max_concurrent."""
    # Two statements: a query cannot see a row its own function call inserted.
    run_id = _sql("select ceaseless.run_routine(%s)", (_routine_id(routine, user),))[0][0]
    status, reason = _sql(
        "select status, skip_reason from ceaseless.routine_runs where id = %s", (run_id,)
    )[0]
    typer.echo(f"{run_id} {status}" + (f" ({reason})" if reason else ""))


def _set_enabled(routine: str, user: str | None, enabled: bool) -> None:
    _sql(
        "update ceaseless.routines set enabled = %s where id = %s",
        (enabled, _routine_id(routine, user)),
    )
    typer.echo(f"routine {routine} {'enabled' if enabled else 'disabled'}")


@routine_app.command("enable")
def routine_enable(
    routine: Annotated[str, typer.Argument(help="Name or id.")],
    user: Annotated[str | None, typer.Option(help="Owner, when names clash.")] = None,
) -> None:
    """Enable a routine (a cron routine gets a fresh next_fire_at)."""
    _set_enabled(routine, user, True)


@routine_app.command("disable")
def routine_disable(
    routine: Annotated[str, typer.Argument(help="Name or id.")],
    user: Annotated[str | None, typer.Option(help="Owner, when names clash.")] = None,
) -> None:
    """Disable a routine: it stops firing; its history stays."""
    _set_enabled(routine, user, False)


@routine_app.command("delete")
def routine_delete(
    routine: Annotated[str, typer.Argument(help="Name or id.")],
    user: Annotated[str | None, typer.Option(help="Owner, when names clash.")] = None,
) -> None:
    """Delete a routine and its run history."""
    _sql("delete from ceaseless.routines where id = %s", (_routine_id(routine, user),))
    typer.echo(f"routine {routine} deleted")


@docs_app.command("sql-reference")
def docs_sql_reference(
    output: Annotated[
        Path | None, typer.Option(help="Write here instead of standard output.")
    ] = None,
) -> None:
    """Render the SQL reference (tables, views, functions) from the schema's comments."""
    from listener.reference import render

    with db.connect(_url(), application_name="ceaseless docs") as conn:
        text = render(conn)
    if output is None:
        typer.echo(text, nl=False)
    else:
        output.write_text(text)


if __name__ == "__main__":  # pragma: no cover
    app()
