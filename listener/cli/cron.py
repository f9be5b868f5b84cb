"""`ceaseless cron preview`: the next slots of a schedule, as the listener will fire them.

The slots come from listener/cron.py, the scheduler's own code over croniter (the one
authority on cron times), with its daylight-saving rules: a wall-clock time that does not
exist is skipped, a repeated one fires once. So what this prints is what `next_fire_at`
will hold, slot after slot.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated
from zoneinfo import ZoneInfo

import typer

from listener import cron
from listener.cli.common import fail

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


def print_slots(slots: list[datetime], timezone: str) -> None:
    zone = ZoneInfo(timezone)
    for slot in slots:
        local = slot.astimezone(zone)
        typer.echo(f"{local:%Y-%m-%d %H:%M:%S %Z} ({local:%a})   {slot:%Y-%m-%d %H:%M:%S} UTC")


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
) -> None:
    """Print the next slots of SCHEDULE in --tz (and in UTC).

    Example: `ceaseless cron preview '30 2 * * *' --tz Europe/Berlin -n 3 --after
    2026-03-28T00:00+01:00` skips 29 March, the night the clocks skip 02:30.
    """
    try:
        start = datetime.fromisoformat(after) if after else datetime.now(UTC)
        if start.tzinfo is None:
            raise ValueError("it has no UTC offset")
        slots = upcoming(schedule, tz, count, start)
    except cron.CronError as exc:
        raise fail(f"schedule: {exc}") from None
    except ValueError as exc:
        raise fail(f"--after: {after!r} is not an ISO 8601 moment with an offset ({exc})") from None
    print_slots(slots, tz)
