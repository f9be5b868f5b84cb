"""When a cron schedule fires: croniter is the authority for times.

The database checks a schedule when its row is stored (functions/35_cron.sql);
this module computes the slots. Both accept the same language: croniter's 5
fields, 6 with seconds as the sixth, or a macro, without R (random values) and
without the day-field combinations croniter would read against the documented
meaning or never fire on (docs/cron.md). The rules live in SQL; `validate`
mirrors them, and tests/sql/test_cron_differential.py checks that the database
accepts exactly the schedules `next_fire` can compute.

Guarantees:
- `next_fire` returns the first slot strictly after `after`, in UTC, read on the
  wall clock of the schedule's IANA time zone;
- DST: a slot whose wall-clock time does not exist (the spring-forward gap) is
  skipped; a wall-clock time that occurs twice (fall-back) fires once, at its
  first occurrence;
- `slots_between` counts the same slots `next_fire` walks through, so the
  missed-slot count and the next slot never disagree;
- an invalid schedule or time zone raises `CronError` (a ValueError) that says
  what to fix; nothing here touches the database.

croniter's own time-zone handling is not used: it iterates over naive
wall-clock times here, and each one is placed on the time line by zoneinfo,
which keeps the DST rules above in one small, tested place.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import CroniterBadDateError, CroniterError, croniter

MACROS = ("@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly")
FIELD_NAMES = ("minute", "hour", "day-of-month", "month", "day-of-week", "second")
# croniter splits fields on ASCII whitespace only (a no-break space is part of a field).
_FIELDS = re.compile(r"[^ \t\n\r\f\v]+")
# A whole field croniter replaces by a random (R) or hashed (H) value.
_RANDOM_OR_HASHED = re.compile(r"[hr](\([0-9]+-[0-9]+\))?(/[0-9]+)?")
# A day-of-week item croniter reads as an nth weekday: 5#2, fri#2, mon-fri#1, L5.
_NTH_WEEKDAY = re.compile(r"[^#]*#[^#]*|l[0-9]+")
# Day-of-month items that always find a day, whatever the month: L and W.
_ANY_MONTH_DAY = re.compile(r"(^|,)l(,|$)|w")
# The longest each month can be; February counts 29 (leap years come within 8 years).
_MONTH_DAYS = (31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)
# The caps of functions/00_helpers.sql (_input_cap 'schedule' and 'schedule_items'):
# croniter expands every item on each call, and a minute list of 50,000 items cost
# 0.6 s a call. A test checks that the two sides agree.
SCHEDULE_MAX_CHARS = 1000
FIELD_MAX_ITEMS = 60
# How far croniter searches for a slot, and so the listener past a skipped one.
_SEARCH_YEARS = 50
_ONE_SECOND = timedelta(seconds=1)


class CronError(ValueError):
    """A schedule or time zone for which no slot can be computed."""


def validate(schedule: str) -> str | None:
    """None when `schedule` is valid, else why not; accepts what `_cron_error` accepts."""
    if not isinstance(schedule, str):
        return "schedule is missing"
    if len(schedule) > SCHEDULE_MAX_CHARS:
        return (
            f"schedule is {len(schedule)} characters long; at most {SCHEDULE_MAX_CHARS} are allowed"
        )
    if not schedule.isascii():
        return "schedule contains a character that is not ASCII (a no-break space, say)"
    if schedule.lower() in MACROS:
        return None
    fields = _FIELDS.findall(schedule)
    if len(fields) == 1 and fields[0].startswith("@"):
        if fields[0].lower() in MACROS:
            return f'macro "{fields[0]}" must stand alone, without spaces around it'
        return f'unknown macro "{fields[0]}" (use {", ".join(MACROS[:-1])} or {MACROS[-1]})'
    if len(fields) not in (5, 6):
        suffix = ": a year field is not supported" if len(fields) == 7 else ""
        return (
            f"expected 5 fields (or 6 with seconds as the sixth) or a macro, "
            f"got {len(fields)}{suffix}"
        )
    for name, field in zip(FIELD_NAMES, fields, strict=False):
        if (items := field.count(",") + 1) > FIELD_MAX_ITEMS:
            return (
                f"{name} field has {items} list items; at most {FIELD_MAX_ITEMS} are allowed "
                "(no field has more values than that)"
            )
    for name, field in zip(FIELD_NAMES, fields, strict=False):
        if _RANDOM_OR_HASHED.fullmatch(field.lower()):
            return _random_or_hashed(name, field)
    try:
        expanded, _nth_weekdays = croniter.expand(schedule)
    except CroniterError as exc:
        # Some croniter messages carry a traceback; its last line is the reason.
        reason = str(exc).strip().splitlines()[-1] if str(exc).strip() else type(exc).__name__
        return f"croniter cannot read {schedule!r}: {reason}"
    return _days_error(fields[2], fields[3], fields[4], expanded[2], expanded[3])


def _days_error(
    day_of_month: str,
    month: str,
    day_of_week: str,
    days: list[int | str],
    months: list[int | str],
) -> str | None:
    """Why the day fields cannot be used together, or None: the rules of functions/35_cron.sql.

    The nth-weekday mixing rule of `_cron_field` and the rules of `_cron_days_error`,
    with the same messages; each prevents what its SQL comment says. `days` and
    `months` are croniter's expansion of the two fields.
    """
    dom, dow = day_of_month.lower(), day_of_week.lower()
    dow_items = dow.split(",")
    nth_items = [item for item in dow_items if _NTH_WEEKDAY.fullmatch(item)]
    if nth_items and len(nth_items) < len(dow_items):
        return f'day-of-week field "{day_of_week}" mixes nth weekdays (# or L) with plain days'
    if nth_items and dom not in ("*", "?"):
        return (
            f'day-of-week field "{day_of_week}" is an nth weekday (# or L), so day-of-month must '
            f'be * or ?, not "{day_of_month}": croniter would fire on the nth weekday alone, '
            "or never"
        )
    if "w" in dom and dow not in ("*", "?"):
        return (
            f'day-of-month field "{day_of_month}" is a nearest weekday (W), so day-of-week must '
            f'be * or ?, not "{day_of_week}": croniter would fire on the W day alone, or never'
        )
    if _ANY_MONTH_DAY.search(dom) or "*" in days:
        return None
    first_day = min(day for day in days if isinstance(day, int))
    named = range(1, 13) if "*" in months else [m for m in months if isinstance(m, int)]
    longest = max(_MONTH_DAYS[m - 1] for m in named)
    if first_day > longest:
        return (
            f'day-of-month field "{day_of_month}" never comes in month field "{month}": '
            f"no month it names has more than {longest} days"
        )
    return None


def _random_or_hashed(name: str, field: str) -> str:
    if field[0] in "hH":
        return f'{name} field "{field}": H (hashed values) is not supported'
    # croniter draws R again each time it reads the schedule, and the listener
    # reads it after every fire: "R 9 * * *" would fire several times an hour.
    return (
        f'{name} field "{field}": R (random values) is not supported: croniter draws a new '
        "value each time it reads the schedule, so the slot would move after every fire"
    )


def next_fire(schedule: str, timezone: str, after: datetime) -> datetime:
    """The first slot strictly after `after` (an aware datetime), in UTC."""
    return next(_fires(_checked(schedule), _zone(timezone), _aware(after)))


def slots_between(
    schedule: str, timezone: str, start: datetime, end: datetime, limit: int = 10_000
) -> int:
    """How many slots fall in (start, end], counting at most `limit`."""
    start, end = _aware(start), _aware(end)
    fires = _fires(_checked(schedule), _zone(timezone), start)
    if end <= start:
        return 0
    count = 0
    while count < limit and next(fires) <= end:
        count += 1
    return count


def _checked(schedule: str) -> str:
    if (error := validate(schedule)) is not None:
        raise CronError(error)
    return schedule


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
    slots = croniter(schedule, start)  # naive in, naive out: no DST arithmetic
    while True:
        try:
            yield slots.get_next(datetime)
        except (CroniterBadDateError, OverflowError) as exc:
            raise CronError(_no_slot(schedule, start)) from exc


def _no_slot(schedule: str, since: datetime) -> str:
    return f"schedule {schedule!r} has no slot in the {_SEARCH_YEARS} years after {since:%Y-%m-%d}"


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
