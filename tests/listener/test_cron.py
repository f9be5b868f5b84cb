"""listener/cron.py: when a schedule fires, DST included; no database needed.

Which schedules may be stored is the database's rule (tests/sql/test_cron_validator.py,
tests/sql/test_cron_differential.py); here, only what croniter computes, and that a
schedule it cannot compute fails as a CronError, whatever croniter raised.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from croniter import croniter
from hypothesis import given, settings
from hypothesis import strategies as st

from listener.cron import CronError, next_fire, slots_between

BERLIN = ZoneInfo("Europe/Berlin")
NEW_YORK = ZoneInfo("America/New_York")


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)  # type: ignore[misc]


def fires(schedule: str, timezone: str, after: datetime, count: int) -> list[datetime]:
    """The next `count` slots after `after`, each computed from the one before."""
    out = []
    for _ in range(count):
        after = next_fire(schedule, timezone, after)
        out.append(after)
    return out


def local(moments: list[datetime], zone: ZoneInfo) -> list[str]:
    return [m.astimezone(zone).strftime("%m-%d %H:%M:%S %Z") for m in moments]


# --- the basics ----------------------------------------------------------------


def test_five_fields_fire_at_the_next_matching_minute() -> None:
    assert next_fire("0 9 * * *", "UTC", utc(2026, 1, 1, 8, 0)) == utc(2026, 1, 1, 9, 0)
    assert next_fire("*/15 * * * *", "UTC", utc(2026, 1, 1, 8, 7)) == utc(2026, 1, 1, 8, 15)
    assert next_fire("0 9 * * 1-5", "UTC", utc(2026, 1, 2, 10, 0)) == utc(2026, 1, 5, 9, 0)


def test_six_fields_read_seconds_as_the_sixth() -> None:
    assert next_fire("0 9 * * * 30", "UTC", utc(2026, 1, 1)) == utc(2026, 1, 1, 9, 0, 30)


def test_zero_nine_star_star_star_star_is_every_second_of_nine_oclock() -> None:
    # croniter (and so ceaseless) reads minute 0, hour 9, every second: 60 slots,
    # 09:00:00 to 09:00:59, each day. A seconds-first cron would read second 0 of
    # minute 9 of every hour: 24 slots a day at hh:09:00.
    assert fires("0 9 * * * *", "UTC", utc(2026, 1, 1), 3) == [
        utc(2026, 1, 1, 9, 0, 0),
        utc(2026, 1, 1, 9, 0, 1),
        utc(2026, 1, 1, 9, 0, 2),
    ]
    assert next_fire("0 9 * * * *", "UTC", utc(2026, 1, 1, 9, 0, 59)) == utc(2026, 1, 2, 9, 0, 0)


def test_the_next_slot_is_strictly_after() -> None:
    assert next_fire("0 9 * * *", "UTC", utc(2026, 1, 1, 9, 0)) == utc(2026, 1, 2, 9, 0)
    just_before = utc(2026, 1, 1, 9, 0) - timedelta(microseconds=1)
    assert next_fire("0 9 * * *", "UTC", just_before) == utc(2026, 1, 1, 9, 0)
    just_after = utc(2026, 1, 1, 9, 0) + timedelta(microseconds=1)
    assert next_fire("0 9 * * *", "UTC", just_after) == utc(2026, 1, 2, 9, 0)
    assert next_fire("* * * * * *", "UTC", just_after) == utc(2026, 1, 1, 9, 0, 1)


@pytest.mark.parametrize(
    ("macro", "expected"),
    [
        ("@hourly", utc(2026, 5, 13, 11, 0)),
        ("@daily", utc(2026, 5, 14)),
        ("@midnight", utc(2026, 5, 14)),
        ("@weekly", utc(2026, 5, 17)),  # Sunday
        ("@monthly", utc(2026, 6, 1)),
        ("@yearly", utc(2027, 1, 1)),
        ("@annually", utc(2027, 1, 1)),
        ("@HOURLY", utc(2026, 5, 13, 11, 0)),
    ],
)
def test_macros(macro: str, expected: datetime) -> None:
    assert next_fire(macro, "UTC", utc(2026, 5, 13, 10, 30)) == expected


def test_slots_are_read_on_the_time_zones_wall_clock_and_returned_in_utc() -> None:
    fire = next_fire("0 9 * * *", "Europe/Berlin", utc(2026, 1, 1))
    assert fire == utc(2026, 1, 1, 8, 0) and fire.tzinfo is UTC
    assert next_fire("0 9 * * *", "Europe/Berlin", utc(2026, 7, 1)) == utc(2026, 7, 1, 7, 0)
    # `after` may be in any time zone: it is an instant.
    after = datetime(2026, 1, 1, 3, 0, tzinfo=NEW_YORK)  # 09:00 in Berlin
    assert next_fire("0 9 * * *", "Europe/Berlin", after) == utc(2026, 1, 2, 8, 0)


# --- DST -------------------------------------------------------------------------


def test_berlin_spring_forward_skips_the_missing_half_past_two() -> None:
    # 2026-03-29: 02:00 CET becomes 03:00 CEST; 02:30 does not exist that day.
    slots = fires("30 2 * * *", "Europe/Berlin", datetime(2026, 3, 28, 3, tzinfo=BERLIN), 2)
    assert local(slots, BERLIN) == ["03-30 02:30:00 CEST", "03-31 02:30:00 CEST"]


def test_berlin_fall_back_fires_the_repeated_half_past_two_once() -> None:
    # 2026-10-25: 03:00 CEST becomes 02:00 CET; 02:30 happens twice.
    slots = fires("30 2 * * *", "Europe/Berlin", datetime(2026, 10, 24, 3, tzinfo=BERLIN), 3)
    assert local(slots, BERLIN) == [
        "10-25 02:30:00 CEST",
        "10-26 02:30:00 CET",
        "10-27 02:30:00 CET",
    ]


def test_new_york_spring_forward_skips_the_missing_half_past_two() -> None:
    # 2026-03-08: 02:00 EST becomes 03:00 EDT.
    slots = fires("30 2 * * *", "America/New_York", datetime(2026, 3, 7, 3, tzinfo=NEW_YORK), 2)
    assert local(slots, NEW_YORK) == ["03-09 02:30:00 EDT", "03-10 02:30:00 EDT"]


def test_new_york_fall_back_fires_the_repeated_half_past_one_once() -> None:
    # 2026-11-01: 02:00 EDT becomes 01:00 EST; 01:30 happens twice.
    slots = fires("30 1 * * *", "America/New_York", datetime(2026, 10, 31, 3, tzinfo=NEW_YORK), 2)
    assert slots == [utc(2026, 11, 1, 5, 30), utc(2026, 11, 2, 6, 30)]
    assert local(slots, NEW_YORK) == ["11-01 01:30:00 EDT", "11-02 01:30:00 EST"]


def test_hourly_across_berlin_spring_forward_has_no_two_oclock() -> None:
    slots = fires("0 * * * *", "Europe/Berlin", datetime(2026, 3, 29, 0, 30, tzinfo=BERLIN), 3)
    assert local(slots, BERLIN) == [
        "03-29 01:00:00 CET",
        "03-29 03:00:00 CEST",
        "03-29 04:00:00 CEST",
    ]
    assert slots == [utc(2026, 3, 29, 0), utc(2026, 3, 29, 1), utc(2026, 3, 29, 2)]


def test_hourly_across_berlin_fall_back_fires_two_oclock_once() -> None:
    slots = fires("0 * * * *", "Europe/Berlin", datetime(2026, 10, 25, 1, 30, tzinfo=BERLIN), 2)
    assert local(slots, BERLIN) == ["10-25 02:00:00 CEST", "10-25 03:00:00 CET"]
    # Two hours pass between them: the second 02:00 (CET) does not fire.
    assert slots == [utc(2026, 10, 25, 0), utc(2026, 10, 25, 2)]


def test_hourly_across_new_york_transitions() -> None:
    spring = fires("0 * * * *", "America/New_York", datetime(2026, 3, 8, 0, 30, tzinfo=NEW_YORK), 3)
    assert local(spring, NEW_YORK) == [
        "03-08 01:00:00 EST",
        "03-08 03:00:00 EDT",
        "03-08 04:00:00 EDT",
    ]
    fall = fires("0 * * * *", "America/New_York", datetime(2026, 11, 1, 0, 30, tzinfo=NEW_YORK), 3)
    assert local(fall, NEW_YORK) == [
        "11-01 01:00:00 EDT",
        "11-01 02:00:00 EST",
        "11-01 03:00:00 EST",
    ]


def test_after_inside_the_repeated_hour_does_not_fire_its_first_occurrence_again() -> None:
    # 02:10 CET is the second 02:10 of the night; 02:30 fired at 02:30 CEST already.
    after = datetime(2026, 10, 25, 2, 10, fold=1, tzinfo=BERLIN)
    assert after.astimezone(UTC) == utc(2026, 10, 25, 1, 10)
    slot = next_fire("*/30 * * * *", "Europe/Berlin", after)
    assert local([slot], BERLIN) == ["10-25 03:00:00 CET"]


def test_every_second_resumes_at_the_end_of_the_gap() -> None:
    after = datetime(2026, 3, 29, 1, 59, 59, tzinfo=BERLIN)
    assert fires("* * * * * *", "Europe/Berlin", after, 2) == [
        utc(2026, 3, 29, 1, 0, 0),
        utc(2026, 3, 29, 1, 0, 1),
    ]


def test_a_half_hour_dst_shift_is_skipped_too() -> None:
    # Lord Howe Island moves from 02:00 to 02:30 on 2026-10-04: 02:15 does not exist.
    zone = ZoneInfo("Australia/Lord_Howe")
    slots = fires("15,45 2 * * *", "Australia/Lord_Howe", datetime(2026, 10, 4, 1, tzinfo=zone), 2)
    assert [s.astimezone(zone).strftime("%m-%d %H:%M") for s in slots] == [
        "10-04 02:45",
        "10-05 02:15",
    ]


# --- missed slots ------------------------------------------------------------------


def test_slots_between_counts_the_missed_slots() -> None:
    due = utc(2026, 1, 1, 9, 0)
    assert slots_between("0 9 * * *", "UTC", due, utc(2026, 1, 6, 9, 30)) == 5


def test_slots_between_excludes_start_and_includes_end() -> None:
    start, end = utc(2026, 1, 1, 10), utc(2026, 1, 1, 15)
    assert slots_between("0 * * * *", "UTC", start, end) == 5
    assert slots_between("0 * * * *", "UTC", start, end - timedelta(seconds=1)) == 4
    assert slots_between("0 * * * *", "UTC", end, start) == 0
    assert slots_between("0 * * * *", "UTC", start, start) == 0


def test_slots_between_is_capped_at_the_limit() -> None:
    start = utc(2026, 1, 1)
    assert slots_between("* * * * * *", "UTC", start, start + timedelta(days=1), limit=100) == 100
    assert slots_between("* * * * *", "UTC", start, start + timedelta(days=30)) == 10_000


def test_slots_between_follows_dst() -> None:
    # From one local midnight to the next: 23 real hours in spring (no 02:00),
    # 25 in autumn (02:00 twice, fired once), so 23 and 24 hourly slots.
    spring, spring_end = datetime(2026, 3, 29, tzinfo=BERLIN), datetime(2026, 3, 30, tzinfo=BERLIN)
    assert spring_end - spring.astimezone(UTC) == timedelta(hours=23)
    assert slots_between("0 * * * *", "Europe/Berlin", spring, spring_end) == 23
    fall, fall_end = datetime(2026, 10, 25, tzinfo=BERLIN), datetime(2026, 10, 26, tzinfo=BERLIN)
    assert fall_end - fall.astimezone(UTC) == timedelta(hours=25)
    assert slots_between("0 * * * *", "Europe/Berlin", fall, fall_end) == 24


def test_slots_between_compares_instants_not_wall_clocks() -> None:
    # Both ends read 02:10 in Berlin, an hour apart: the first and second 02:10.
    start = datetime(2026, 10, 25, 2, 10, tzinfo=BERLIN)
    end = datetime(2026, 10, 25, 2, 10, fold=1, tzinfo=BERLIN)
    assert slots_between("*/30 * * * *", "Europe/Berlin", start, end) == 1  # 02:30 CEST


# --- errors ------------------------------------------------------------------------


# Seven fields are the database's refusal, not croniter's (it reads a year):
# tests/sql/test_cron_validator.py::test_seven_fields_are_refused_though_croniter_reads_a_year.
@pytest.mark.parametrize("schedule", ["61 * * * *", "@reboot", "* * * *", "0 9 * * 1#2,3", ""])
def test_invalid_schedules_raise_cron_error(schedule: str) -> None:
    with pytest.raises(CronError):
        next_fire(schedule, "UTC", utc(2026, 1, 1))
    with pytest.raises(CronError):
        slots_between(schedule, "UTC", utc(2026, 1, 1), utc(2026, 1, 2))


@pytest.mark.parametrize(
    "schedule",
    [
        "*/" + "9" * 5000 + " * * * *",  # int() refuses 4,300 digits: a ValueError, not croniter's
        "61," * 20_000 + "1 * * * *",
        None,
    ],
    ids=["five-thousand-digits", "sixty-thousand-items", "none"],
)
def test_whatever_croniter_raises_is_a_short_cron_error(schedule: str) -> None:
    # A stored row, written around the database's check, costs its own routine:
    # the scheduler catches CronError and disables it with this message.
    with pytest.raises(CronError) as error:
        next_fire(schedule, "UTC", utc(2026, 1, 1))
    assert str(error.value).startswith("croniter cannot read it: ")
    assert len(str(error.value)) < 150


@pytest.mark.parametrize("timezone", ["Mars/Olympus", "", "Europe", "../etc/passwd", "/etc/UTC"])
def test_unknown_time_zones_raise_cron_error(timezone: str) -> None:
    with pytest.raises(CronError, match="unknown time zone"):
        next_fire("0 9 * * *", timezone, utc(2026, 1, 1))


def test_a_schedule_that_never_comes_raises_cron_error() -> None:
    # The database refuses it, naming the rule (tests/sql/test_cron_differential.py).
    with pytest.raises(CronError, match="no slot in the 50 years after 2026-01-01"):
        next_fire("0 0 30 2 *", "UTC", utc(2026, 1, 1))


def test_a_schedule_whose_every_slot_falls_in_a_dst_gap_raises_cron_error() -> None:
    # The last Sunday of March, 02:30: the hour Berlin skips that very night.
    with pytest.raises(CronError, match="no slot in the 50 years after 2026-01-01"):
        next_fire("30 2 * 3 L0", "Europe/Berlin", utc(2026, 1, 1))
    assert next_fire("30 2 * 3 L0", "UTC", utc(2026, 1, 1)) == utc(2026, 3, 29, 2, 30)


def test_a_naive_after_is_a_programming_error() -> None:
    with pytest.raises(ValueError, match="no time zone") as error:
        next_fire("0 9 * * *", "UTC", datetime(2026, 1, 1))
    assert not isinstance(error.value, CronError)


# --- properties ----------------------------------------------------------------------

_SCHEDULES = [
    "*/7 * * * *",
    "0 */3 * * *",
    "30 2 * * *",
    "15,45 1-3 * * *",
    "0 0 L * *",
    "0 12 * * 1#2",
    "*/20 * * * * 10",
    "@hourly",
    "0 9 * * 1-5",
]
_instants = st.datetimes(
    min_value=datetime(2026, 1, 1), max_value=datetime(2027, 12, 31), timezones=st.just(UTC)
)


@settings(max_examples=150, deadline=None)
@given(st.sampled_from(_SCHEDULES), st.sampled_from(["UTC", "Europe/Berlin"]), _instants)
def test_next_fire_is_a_matching_existing_slot_strictly_after(
    schedule: str, timezone: str, after: datetime
) -> None:
    zone = ZoneInfo(timezone)
    fire = next_fire(schedule, timezone, after)
    wall = fire.astimezone(zone)
    assert fire > after
    assert croniter.match(schedule, wall.replace(tzinfo=None))
    assert wall.replace(tzinfo=None, fold=0).replace(tzinfo=zone).astimezone(UTC) == fire
    assert slots_between(schedule, timezone, after, fire) == 1


@settings(max_examples=150, deadline=None)
@given(st.sampled_from(_SCHEDULES), _instants)
def test_in_utc_next_fire_is_croniters_next(schedule: str, after: datetime) -> None:
    assert next_fire(schedule, "UTC", after) == croniter(schedule, after).get_next(datetime)
