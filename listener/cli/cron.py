"""`ceaseless cron preview`: the next slots of a schedule, as the listener will fire them; and
the backfill of missed slots that `routine backfill` and `loop backfill` share.

The schedule and time zone are checked by the database (check_schedule, the rule a
routine's or loop's INSERT applies), so the preview refuses exactly what storing the
schedule would, with the same message. The slots then come from listener/cron.py, the
scheduler's own code over croniter (the one authority on cron times), with its
daylight-saving rules: a wall-clock time that does not exist is skipped, a repeated one
fires once. So what this prints is what `next_fire_at` will hold, slot after slot.

Guarantees: nothing is written; without a database (none answers, or it lacks the
check) the command fails in one line saying what to do, and computes nothing.
"""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime
from typing import Annotated
from zoneinfo import ZoneInfo

import psycopg
import typer

from listener import cron
from listener.cli.common import (
    Output,
    OutputOpt,
    call,
    collecting,
    connect,
    emitting,
    fail,
    listed,
    note,
    table,
)
from listener.queries.commands.cron import Backfilled, check_schedule
from listener.queries.commands.cron import backfill as backfill_slots

app = typer.Typer(
    help="Cron schedules: preview the slots a schedule fires at.", no_args_is_help=True
)


def upcoming(schedule: str, timezone: str, count: int, after: datetime) -> list[datetime]:
    """The next `count` slots strictly after `after`, in UTC."""
    slots: list[datetime] = []
    moment = after
    for _ in range(count):
        moment = cron.next_fire(schedule, timezone, moment)
        slots.append(moment)
    return slots


def check(schedule: str, timezone: str) -> None:
    """Return when the database would store `schedule` read in `timezone`; else fail, saying why."""
    try:
        conn = connect()
    except psycopg.OperationalError as exc:
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise fail(
            "cron preview checks the schedule with the database's own rule, and could not "
            f"connect ({reason}): start the database (`ceaseless db start`) or point "
            "DATABASE_URL at one"
        ) from None
    with conn:
        try:
            check_schedule(conn, schedule, timezone)
        except (psycopg.errors.UndefinedFunction, psycopg.errors.InvalidSchemaName):
            raise fail(
                "cron preview checks the schedule with the database's own rule, "
                "ceaseless.check_schedule, which this database lacks: run `ceaseless migrate`"
            ) from None
        except psycopg.Error as exc:
            raise fail(exc.diag.message_primary or str(exc)) from None


def print_slots(slots: list[datetime], timezone: str) -> None:
    """One line per slot, local (with its zone's abbreviation, CET or CEST) and UTC, in
    aligned columns; with --output json, a `next_slots` section."""
    zone = ZoneInfo(timezone)
    locals_ = [slot.astimezone(zone) for slot in slots]
    if collecting():
        table(list(zip(locals_, slots, strict=True)), ["local", "utc"], name="next_slots")
        return
    rows: list[tuple[object, ...]] = [
        (f"{local:%Y-%m-%d %H:%M:%S}", f"{local:%Z}", f"{local:%a}", f"{slot:%Y-%m-%d %H:%M:%S}")
        for local, slot in zip(locals_, slots, strict=True)
    ]
    table(rows, [timezone, "zone", "day", "UTC"])


def quartz_reading(schedule: str) -> str | None:
    """A six-field schedule read as Quartz and Spring write it (seconds first), in the order
    croniter reads (seconds last); None for any other schedule."""
    fields = schedule.split()
    return " ".join([*fields[1:], fields[0]]) if len(fields) == 6 else None


def warn_if_quartz(schedule: str, timezone: str, after: datetime | None = None) -> None:
    """On stderr: when a six-field schedule fires at other times read the Quartz way, say so and
    show the next slots under both readings. The database keeps croniter's reading."""
    quartz = quartz_reading(schedule)
    if quartz is None:
        return
    start = after or datetime.now(UTC)
    try:
        as_written = upcoming(schedule, timezone, 3, start)
        the_quartz_way = upcoming(quartz, timezone, 3, start)
    except (cron.CronError, ValueError):
        return  # no valid Quartz reading: nobody could have meant it
    if as_written == the_quartz_way:
        return
    zone = ZoneInfo(timezone)

    def shown(slots: list[datetime]) -> str:
        return ", ".join(f"{slot.astimezone(zone):%Y-%m-%d %H:%M:%S %Z}" for slot in slots)

    typer.secho(
        f"warning: {schedule!r} has six fields, read as minute hour day month weekday SECOND "
        f"(seconds last, as croniter reads them); Quartz and Spring put seconds first, which "
        f"here would be {quartz!r}.\n"
        f"  as read:           {shown(as_written)}\n"
        f"  the Quartz way:    {shown(the_quartz_way)}",
        fg=typer.colors.YELLOW,
        err=True,
    )


@app.command("preview")
def cron_preview(
    schedule: Annotated[
        str,
        typer.Argument(
            help="A cron expression as routines take it: 5 fields, 6 with seconds LAST, or a "
            "macro (@hourly, @daily, @weekly, @monthly, @yearly). Quote it in the shell."
        ),
    ],
    tz: Annotated[
        str, typer.Option("--tz", help="IANA time zone the schedule is read in.")
    ] = "UTC",
    count: Annotated[
        int, typer.Option("-n", "--count", min=1, max=1000, help="How many slots.")
    ] = 5,
    after: Annotated[
        str | None,
        typer.Option(
            "--after",
            help="Start from this moment (ISO 8601 with offset, e.g. 2026-03-29T00:00+01:00) "
            "instead of now.",
        ),
    ] = None,
    output: OutputOpt = Output.TABLE,
) -> None:
    """Print the next slots of SCHEDULE in --tz (and in UTC).

    Example: the night the clocks skip 02:30 (29 March) is skipped:

    \b
    ceaseless cron preview '30 2 * * *' --tz Europe/Berlin -n 3 --after 2026-03-28T00:00+01:00
    """
    try:
        start = datetime.fromisoformat(after) if after else datetime.now(UTC)
        if start.tzinfo is None:
            raise ValueError("it has no UTC offset")
    except ValueError as exc:
        raise fail(f"--after: {after!r} is not an ISO 8601 moment with an offset ({exc})") from None
    check(schedule, tz)
    try:
        slots = upcoming(schedule, tz, count, start)
    except cron.CronError as exc:
        # Only a time zone can do this to a valid schedule: every slot in a DST gap.
        raise fail(f"schedule: {exc}") from None
    warn_if_quartz(schedule, tz, start)
    with emitting(output):
        print_slots(slots, tz)


def _moment(text: str, option: str) -> datetime:
    """An ISO 8601 time given on the command line; one without an offset is UTC."""
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise fail(
            f"{option} {text!r} is not a time: write ISO 8601, e.g. 2026-03-01T08:00 (UTC) "
            "or 2026-03-01T09:00+01:00"
        ) from None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


FromOpt = Annotated[
    str,
    typer.Option(
        "--from",
        help="The first moment of the range, ISO 8601 (no offset: UTC); a slot at it is included.",
    ),
]
ToOpt = Annotated[
    str,
    typer.Option(
        "--to",
        help="The end of the range, ISO 8601 (no offset: UTC), not after now; a slot at it is "
        "left out, so ranges end to end never fire a slot twice.",
    ),
]
MaxOpt = Annotated[
    int | None,
    typer.Option(
        "--max",
        help="Fire at most this many slots, oldest first (default 100; at most the setting "
        "backfill_max, default 1000); the rest are listed as over_max.",
    ),
]


def backfill(
    kind: Backfilled, row_id: str, start: str, end: str, most: int | None, output: Output
) -> None:
    """Fire the slots of a routine's or loop's schedule in [--from, --to) that never fired, and
    list every slot with what became of it, then a count of each outcome."""
    fired = call(backfill_slots, kind, row_id, _moment(start, "--from"), _moment(end, "--to"), most)
    with emitting(output):
        listed(fired)
        counts = Counter(row[fired.headers.index("outcome")] for row in fired.rows)
        note(
            f"{len(fired.rows)} slots: "
            + ", ".join(
                f"{counts[outcome]} {outcome.replace('_', ' ')}"
                for outcome in ("fired", "refused", "already_fired", "over_max")
            )
        )
