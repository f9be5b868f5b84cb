"""When a cron schedule fires: croniter is the authority for times.

The database is the authority on which schedules may be stored
(functions/30_cron.sql: a plain subset of croniter's language, read the way
croniter reads it); this module only computes slots, with croniter, and checks
nothing itself. tests/sql/test_cron_differential.py checks on generated
schedules that croniter accepts everything the database accepts and computes
the slots the database's reading gives; pyproject.toml pins croniter to the
version it was run against.

Guarantees:
- `next_fire` returns the first slot strictly after `after`, in UTC, read on the
  wall clock of the schedule's IANA time zone;
- DST: a slot whose wall-clock time does not exist (the spring-forward gap) is
  skipped; a wall-clock time that occurs twice (fall-back) fires once, at its
  first occurrence;
- `slots_between` counts the same slots `next_fire` walks through, so the
  missed-slot count and the next slot never disagree;
- a schedule croniter cannot read, however it fails, an unknown time zone, or
  a schedule with no slot within croniter's 50-year search raises `CronError`
  (a ValueError) that says what is wrong, never anything else: a stored row
  can cost its own routine, never the scheduler. Nothing here touches the
  database.

croniter's own time-zone handling is not used: it iterates over naive
wall-clock times here, and each one is placed on the time line by zoneinfo,
which keeps the DST rules above in one small, tested place.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import CroniterBadDateError, croniter

# How far croniter searches for a slot, and so the listener past a skipped one.
_SEARCH_YEARS = 50
_ONE_SECOND = timedelta(seconds=1)


class CronError(ValueError):
    """A schedule or time zone for which no slot can be computed."""


def next_fire(schedule: str, timezone: str, after: datetime) -> datetime:
    """The first slot strictly after `after` (an aware datetime), in UTC."""
    return next(_fires(schedule, _zone(timezone), _aware(after)))


def slots_between(
    schedule: str, timezone: str, start: datetime, end: datetime, limit: int = 10_000
) -> int:
    """How many slots fall in (start, end], counting at most `limit`."""
    start, end = _aware(start), _aware(end)
    fires = _fires(schedule, _zone(timezone), start)
    if end <= start:
        return 0
    count = 0
    while count < limit and next(fires) <= end:
        count += 1
    return count


def _zone(timezone: str) -> ZoneInfo:
    try:
        return ZoneInfo(timezone)
    except (ZoneInfoNotFoundError, ValueError, TypeError, OSError) as exc:
        raise CronError(
            f'unknown time zone "{timezone}": use an IANA name such as Europe/Berlin, '
            "America/New_York or UTC"
        ) from exc


def _aware(moment: datetime) -> datetime:
    """`moment` in UTC: aware datetimes sharing a tzinfo compare by wall clock, fold ignored."""
    if moment.tzinfo is None or moment.utcoffset() is None:
        raise ValueError(f"{moment!r} has no time zone: pass an aware datetime")
    return moment.astimezone(UTC)


def _fires(schedule: str, zone: ZoneInfo, after: datetime) -> Iterator[datetime]:
    """Every slot strictly after `after`, in order, in UTC."""
    # Whole seconds: croniter's resolution. A slot at or before `after` that this
    # lets through is dropped by the comparison below.
    start = after.astimezone(zone).replace(tzinfo=None, microsecond=0)
    found = start  # the last slot yielded, or where the search began
    while True:
        for wall in _wall_clock_slots(schedule, start):
            moment = wall.replace(tzinfo=zone)  # fold=0: the first of a repeated time
            fire = moment.astimezone(UTC)
            if fire.astimezone(zone).replace(tzinfo=None) != wall:
                # The wall-clock time does not exist: skip the rest of the gap too.
                # A schedule whose every slot falls in a gap ("30 2 * 3 L0" in
                # Europe/Berlin) would otherwise skip year after year until
                # datetime overflows: give up where croniter would.
                if wall.year - found.year > _SEARCH_YEARS:
                    raise CronError(_no_slot(schedule, found))
                start = _gap_end(wall, zone) - _ONE_SECOND
                break
            # A repeated time's first occurrence may lie before `after` when
            # `after` falls in the repetition: it has fired already.
            if fire > after:
                found = wall
                yield fire


def _wall_clock_slots(schedule: str, start: datetime) -> Iterator[datetime]:
    """croniter's slots after the naive wall-clock time `start`, as naive times."""
    try:
        slots = croniter(schedule, start)  # naive in, naive out: no DST arithmetic
    except (
        ValueError,  # CroniterError is one
        TypeError,
        AttributeError,
        ArithmeticError,
        LookupError,
        RecursionError,
    ) as exc:
        # Not only CroniterError: croniter lets Python's own errors out of its
        # parser (int() of a number past 4,300 digits is a ValueError), and the
        # text was stored by someone else.
        raise CronError(f"croniter cannot read it: {_reason(exc)}") from exc
    while True:
        try:
            yield slots.get_next(datetime)
        except (CroniterBadDateError, OverflowError) as exc:
            raise CronError(_no_slot(schedule, start)) from exc


def _reason(exc: Exception) -> str:
    """Why croniter failed, in at most 120 characters (it quotes the schedule, maybe huge).

    Some of croniter's messages carry a traceback: the reason is its last line.
    """
    text = str(exc).strip()
    reason = text.splitlines()[-1] if text else type(exc).__name__
    return reason if len(reason) <= 120 else reason[:120] + "…"


def _shown(schedule: str) -> str:
    """The schedule quoted for a message, its start only when long (a stored one may be huge)."""
    text = repr(schedule)
    return text if len(text) <= 82 else text[:80] + "…"


def _no_slot(schedule: str, since: datetime) -> str:
    return (
        f"schedule {_shown(schedule)} has no slot in the {_SEARCH_YEARS} years "
        f"after {since:%Y-%m-%d}"
    )


def _gap_end(wall: datetime, zone: ZoneInfo) -> datetime:
    """The first wall-clock time after the spring-forward gap that contains `wall`."""
    # Inside a gap, fold=1 reads `wall` with the offset after the change and fold=0
    # with the one before, so the two readings bracket the instant of the change.
    before = int(wall.replace(tzinfo=zone, fold=1).timestamp())
    after = int(wall.replace(tzinfo=zone, fold=0).timestamp())
    while after - before > 1:
        middle = (before + after) // 2
        if _wall_clock(middle, zone) > wall:
            after = middle
        else:
            before = middle
    return _wall_clock(after, zone)


def _wall_clock(timestamp: int, zone: ZoneInfo) -> datetime:
    return datetime.fromtimestamp(timestamp, zone).replace(tzinfo=None)
