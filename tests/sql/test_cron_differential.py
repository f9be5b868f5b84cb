"""croniter reads every schedule the database accepts, and reads it as the database does.

`_cron_error` (functions/30_cron.sql) is the one gate a schedule passes before it
is stored; the listener then computes slots with croniter (listener/cron.py), and
checks nothing itself. So one direction matters, and it is checked on thousands
of generated expressions over every form of every field: for each expression the
gate accepts,

- croniter reads it, and `next_fire` (the scheduler's own path, in UTC) finds
  its next slots;
- those slots are the ones the gate's reading gives: a reference built from the
  values `_cron_field` says each field names (plus L, W and nth weekdays, whose
  days it resolves the same way), with the day rule of docs/cron.md (both day
  fields restricted: either matches; one of them * or ?: the other decides);
- croniter expands each time field (second, minute, hour, month) and the
  day-of-week field to the values `_cron_field` names.

The other direction is not a rule: the gate refuses forms croniter reads (the
quirks below, R, a year field, the caps), each with a message that says why.

Expressions come from three families, each drawn with a fixed seed (every run
checks the same ones): the field grammars, with forms the gate accepts and
forms it refuses mixed in; near misses (one thing slightly wrong); garbage.
Each example is a batch, checked in a few SQL round trips.
"""

from __future__ import annotations

import calendar
import itertools
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from functools import cache

import psycopg
import pytest
from croniter import croniter
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from listener.cron import CronError, next_fire
from tests.factories import make_routine

NOW = datetime(2026, 1, 1, tzinfo=UTC)
# Slots compared per expression, each found from the one before.
SLOTS = 5
# How far croniter looks for the next slot (and so the reference does too).
SEARCH_YEARS = 50


def _settings(examples: int) -> settings:
    """A fixed seed and no example database: every run checks the same expressions.

    No shrinking: a failing batch already names every expression it misread, and
    shrinking a batch of fifty costs minutes.
    """
    return settings(
        max_examples=examples,
        derandomize=True,
        database=None,
        deadline=None,
        phases=[Phase.explicit, Phase.reuse, Phase.generate],
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )


# The macros' meaning, as docs/cron.md gives it.
MACROS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
_FIELDS = re.compile(r"[^ \t\n\r\f\v]+")
_NEAREST_WEEKDAY = re.compile(r"(\d+)w|w(\d+)")


# --- the gate ---------------------------------------------------------------------


def cron_errors(conn: psycopg.Connection, expressions: Sequence[str]) -> list[str | None]:
    """_cron_error of each expression, in one round trip."""
    rows = conn.execute(
        "select ceaseless._cron_error(e) from unnest(%s::text[]) with ordinality as t(e, n) "
        "order by n",
        (list(expressions),),
    ).fetchall()
    return [row[0] for row in rows]


def field_values(
    conn: psycopg.Connection, fields: set[tuple[str, int]]
) -> dict[tuple[str, int], frozenset[int] | None]:
    """What `_cron_field` says each (field, position) names: its values, None for every value."""
    pairs = sorted(fields)
    rows = conn.execute(
        "select (ceaseless._cron_field(f, p)).* from unnest(%s::text[], %s::int[]) "
        "with ordinality as t(f, p, n) order by n",
        ([f for f, _ in pairs], [p for _, p in pairs]),
    ).fetchall()
    values: dict[tuple[str, int], frozenset[int] | None] = {}
    for pair, (error, named) in zip(pairs, rows, strict=True):
        assert error is None, (pair, error)
        values[pair] = None if named is None else frozenset(named)
    return values


# --- the gate's reading, and the slots it gives ------------------------------------


@dataclass(frozen=True)
class Reading:
    """A schedule as the gate reads it; `None` is every value (* or ?)."""

    seconds: frozenset[int] | None
    minutes: frozenset[int] | None
    hours: frozenset[int] | None
    days: frozenset[int] | None
    last_day: bool
    nearest_weekday: int | None
    months: frozenset[int] | None
    weekdays: frozenset[int] | None
    nth_weekdays: frozenset[tuple[int, int]]  # (weekday, ordinal), Sunday 0
    last_weekdays: frozenset[int]

    def _day_of_month(self, day: date) -> bool:
        last = calendar.monthrange(day.year, day.month)[1]
        if self.nearest_weekday is not None:
            return day.day == _nearest_weekday(day.year, day.month, self.nearest_weekday)
        return (self.days is not None and day.day in self.days) or (
            self.last_day and day.day == last
        )

    def _day_of_week(self, day: date) -> bool:
        weekday = day.isoweekday() % 7
        if self.nth_weekdays or self.last_weekdays:
            last = calendar.monthrange(day.year, day.month)[1]
            return (weekday, (day.day - 1) // 7 + 1) in self.nth_weekdays or (
                weekday in self.last_weekdays and day.day + 7 > last
            )
        return self.weekdays is not None and weekday in self.weekdays

    def matches(self, day: date) -> bool:
        """docs/cron.md: both day fields restricted, either matches; else the restricted one."""
        if self.months is not None and day.month not in self.months:
            return False
        by_month = self.days is not None or self.last_day or self.nearest_weekday is not None
        by_week = self.weekdays is not None or bool(self.nth_weekdays or self.last_weekdays)
        if by_month and by_week:
            return self._day_of_month(day) or self._day_of_week(day)
        if by_month:
            return self._day_of_month(day)
        if by_week:
            return self._day_of_week(day)
        return True

    def next_slot(self, after: datetime) -> datetime | None:
        """The first slot strictly after `after` (UTC), searching as far as croniter does."""
        seconds, minutes, hours = (
            sorted(v) if v is not None else list(range(n))
            for v, n in ((self.seconds, 60), (self.minutes, 60), (self.hours, 24))
        )
        day, last = after.date(), after.date() + timedelta(days=366 * SEARCH_YEARS)
        while day <= last:
            if self.matches(day):
                for hour, minute, second in itertools.product(hours, minutes, seconds):
                    slot = datetime.combine(day, time(hour, minute, second), UTC)
                    if slot > after:
                        return slot
            day += timedelta(days=1)
        return None


def _nearest_weekday(year: int, month: int, day: int) -> int:
    """docs/cron.md: the weekday nearest `day` (the month's last if it lacks it), in the month."""
    last = calendar.monthrange(year, month)[1]
    day = min(day, last)
    weekday = calendar.weekday(year, month, day)  # Monday 0
    if weekday == 5:
        return day - 1 if day > 1 else day + 2
    if weekday == 6:
        return day + 1 if day < last else day - 2
    return day


def _nth_items(field: str) -> list[tuple[str, str]]:
    """An nth day-of-week field's items as (day part, ordinal or "L")."""
    items = []
    for item in field.lower().split(","):
        if item.startswith("l"):
            items.append((item[1:], "L"))
        else:
            day, _, ordinal = item.partition("#")
            items.append((day, ordinal))
    return items


def readings(conn: psycopg.Connection, expressions: Sequence[str]) -> list[Reading]:
    """How the gate reads each (accepted) expression, in one round trip for all its fields."""
    split = [_FIELDS.findall(MACROS.get(e.lower(), e)) for e in expressions]
    wanted: set[tuple[str, int]] = set()
    for fields in split:
        wanted.update((f, i) for i, f in enumerate(fields) if i not in (2, 4))
        if _NEAREST_WEEKDAY.fullmatch(fields[2].lower()) is None:
            wanted.add((fields[2], 2))
        if re.search(r"#|(^|,)l\d", fields[4].lower()):
            wanted.update((day, 4) for day, _ in _nth_items(fields[4]))
        else:
            wanted.add((fields[4], 4))
    values = field_values(conn, wanted)
    found = []
    for fields in split:
        day_of_month, day_of_week = fields[2].lower(), fields[4].lower()
        nearest = _NEAREST_WEEKDAY.fullmatch(day_of_month)
        nth: set[tuple[int, int]] = set()
        last: set[int] = set()
        weekdays = None
        if re.search(r"#|(^|,)l\d", day_of_week):
            for day, ordinal in _nth_items(fields[4]):
                named = values[(day, 4)]
                assert named is not None
                if ordinal == "L":
                    last |= named
                else:
                    nth |= {(weekday, int(ordinal)) for weekday in named}
        else:
            weekdays = values[(fields[4], 4)]
        found.append(
            Reading(
                seconds=values[(fields[5], 5)] if len(fields) == 6 else frozenset({0}),
                minutes=values[(fields[0], 0)],
                hours=values[(fields[1], 1)],
                days=None if nearest else values[(fields[2], 2)],
                last_day="l" in day_of_month.split(","),
                nearest_weekday=int(nearest.group(1) or nearest.group(2)) if nearest else None,
                months=values[(fields[3], 3)],
                weekdays=weekdays,
                nth_weekdays=frozenset(nth),
                last_weekdays=frozenset(last),
            )
        )
    return found


# --- the check ----------------------------------------------------------------------


def _croniter_slots(expression: str, after: datetime) -> list[datetime] | str:
    """The listener's next SLOTS slots after `after` in UTC, or why it found none."""
    slots: list[datetime] = []
    try:
        for _ in range(SLOTS):
            after = next_fire(expression, "UTC", after)
            slots.append(after)
    except CronError as exc:
        if not slots:
            return str(exc)
    return slots


def _reference_slots(reading: Reading, after: datetime) -> list[datetime]:
    slots: list[datetime] = []
    while len(slots) < SLOTS and (slot := reading.next_slot(after)) is not None:
        slots.append(slot)
        after = slot
    return slots


_EVERY = {0: range(60), 1: range(24), 3: range(1, 13), 4: range(7), 5: range(60)}


def _expanded_alike(expression: str, reading: Reading) -> str | None:
    """Where croniter's expansion of a time field or day-of-week differs from the gate's."""
    if expression.lower() in MACROS:
        return None
    expanded, _nth = croniter.expand(expression)
    ours = {0: reading.minutes, 1: reading.hours, 3: reading.months}
    if len(expanded) == 6:
        ours[5] = reading.seconds
    if not (reading.nth_weekdays or reading.last_weekdays):
        ours[4] = reading.weekdays
    for position, named in ours.items():
        every = frozenset(_EVERY[position])
        theirs = (
            every if expanded[position] == ["*"] else frozenset(int(v) for v in expanded[position])
        )
        if (every if named is None else named) != theirs:
            return f"field {position}: gate {sorted(named or every)}, croniter {sorted(theirs)}"
    return None


def misreadings(
    conn: psycopg.Connection, expressions: Sequence[str], after: datetime = NOW
) -> tuple[list[tuple[str, ...]], int]:
    """The accepted expressions croniter refuses or reads otherwise, and how many were accepted."""
    accepted = [e for e, error in zip(expressions, cron_errors(conn, expressions), strict=True)
                if error is None]  # fmt: skip
    found: list[tuple[str, ...]] = []
    for expression, reading in zip(accepted, readings(conn, accepted), strict=True):
        theirs = _croniter_slots(expression, after)
        ours = _reference_slots(reading, after)
        if isinstance(theirs, str) or theirs != ours:
            found.append((expression, f"croniter: {theirs}", f"gate's reading: {ours}"))
            continue
        if (difference := _expanded_alike(expression, reading)) is not None:
            found.append((expression, difference))
    return found, len(accepted)


# --- expressions: every form of every field ----------------------------------------

_BOUNDS = [(0, 59), (0, 23), (1, 31), (1, 12), (0, 7), (0, 59)]
_MONTHS = ["jan", "Feb", "MAR", "apr", "may", "Jun", "jul", "AUG", "sep", "oct", "nov", "dec"]
_DAYS = ["sun", "Mon", "TUE", "wed", "thu", "FRI", "sat"]


# The field strategies are built once per field and shared: Hypothesis checks each new
# strategy when it is first drawn from, and building them anew for every expression
# took four fifths of the differential test's time.


@cache
def _value(position: int, low: int | None = None, high: int | None = None) -> st.SearchStrategy:
    """A value of the field as (number, text): digits (some with leading zeros) or a name."""
    first, last = _BOUNDS[position]
    low, high = first if low is None else low, last if high is None else high
    number = st.integers(low, high)
    written = number.flatmap(lambda n: st.sampled_from([(n, str(n)), (n, str(n)), (n, f"0{n}")]))
    names = {3: _MONTHS, 4: _DAYS}.get(position)
    if names is None:
        return written
    offset = 1 if position == 3 else 0
    named = number.filter(lambda n: n - offset < len(names)).map(lambda n: (n, names[n - offset]))
    return st.one_of(written, named)


@cache
def _step(position: int) -> st.SearchStrategy[str]:
    return st.one_of(
        st.integers(1, _BOUNDS[position][1] + 2).map(str), st.sampled_from(["1", "2", "1000"])
    )


@cache
def _item(position: int) -> st.SearchStrategy[str]:
    """One list item of any form: value, a-b (mostly upwards), a-b/n, */n, a/n."""
    value = _value(position)

    def ordered(pair: tuple[tuple[int, str], tuple[int, str]]) -> str:
        (_, a_text), (_, b_text) = sorted(pair)
        return f"{a_text}-{b_text}"

    upward = st.tuples(value, value).filter(lambda p: p[0][0] != p[1][0]).map(ordered)
    any_order = st.builds(lambda a, b: f"{a[1]}-{b[1]}", value, value)
    return st.one_of(
        value.map(lambda v: v[1]),
        upward,
        upward,
        st.builds("{}/{}".format, upward, _step(position)),
        st.builds("*/{}".format, _step(position)),
        st.builds(lambda v, n: f"{v[1]}/{n}", value, _step(position)),
        any_order,  # reversed and equal ranges: refused, and must stay so
    )


def _list(item: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    return st.one_of(item, item, st.lists(item, min_size=2, max_size=4).map(",".join))


@cache
def _plain(position: int) -> st.SearchStrategy[str]:
    return st.one_of(st.just("*"), _list(_item(position)))


_day_of_month_item = st.one_of(
    _item(2),
    st.sampled_from(["L", "l"]),
    st.builds("{}-L".format, st.integers(1, 31)),
    st.builds("{}-L/{}".format, st.integers(1, 30), st.integers(1, 12)),
    st.integers(27, 31).map(str),
)
_every_day = st.sampled_from(["*", "?"])
_w_day = st.one_of(
    st.builds("{}W".format, st.integers(1, 31)),
    st.builds("W{}".format, st.integers(1, 31)),
    st.builds("{}w".format, st.integers(26, 31)),
)
_day_name_range = st.tuples(st.integers(0, 6), st.integers(0, 6)).map(
    lambda p: f"{_DAYS[min(p)]}-{_DAYS[max(p)]}"
)
_nth_item = st.one_of(
    st.builds("{}#{}".format, _value(4).map(lambda v: v[1]), st.integers(1, 5)),
    st.builds("{}#{}".format, _day_name_range, st.integers(1, 5)),
    st.builds("L{}".format, st.integers(0, 7)),
)
_days_of_month = st.one_of(_every_day, _list(_day_of_month_item))
_days_of_week = st.one_of(_every_day, _list(_item(4)))
# The two day fields, drawn together: W and nth weekdays mostly beside * or ?
# (the forms the gate accepts), now and then beside anything.
_day_fields = st.one_of(
    st.tuples(_days_of_month, _days_of_week),
    st.tuples(_days_of_month, _days_of_week),
    st.tuples(_days_of_month, _days_of_week),
    st.tuples(_w_day, _every_day),
    st.tuples(_every_day, _list(_nth_item)),
    st.tuples(_every_day, _list(_nth_item)),
    st.tuples(
        st.one_of(_w_day, _days_of_month),
        st.one_of(_list(_nth_item), _days_of_week),
    ),
)
_month = st.one_of(
    _plain(3), st.sampled_from(["2", "feb", "4,6", "apr-jun/2", "9,11", "2-12/12", "11/5"])
)


_separators = st.sampled_from([" ", " ", " ", "  ", "\t", "\n"])


@st.composite
def expressions(draw: st.DrawFn) -> str:
    """A 5- or 6-field expression (or a macro) built from every form of every field."""
    if draw(st.integers(0, 24)) == 0:
        macro = draw(st.sampled_from(sorted(MACROS)))
        return draw(st.sampled_from([macro, macro.upper(), macro.capitalize()]))
    day_of_month, day_of_week = draw(_day_fields)
    fields = [draw(_plain(0)), draw(_plain(1)), day_of_month, draw(_month), day_of_week]
    if draw(st.booleans()):
        fields.append(draw(_plain(5)))
    return "".join(f + draw(_separators) for f in fields[:-1]) + fields[-1]


# --- near misses and garbage: mostly refused; whatever is accepted is checked too ---

_OUT_OF_RANGE = {
    0: ["60", "-1", "0-60", "*/0"],
    1: ["24", "23-24", "24/2"],
    2: ["0", "32", "0-5", "32W", "0W", "L-5", "LW"],
    3: ["0", "13", "0-12", "mon"],
    4: ["8", "1#0", "1#6", "L8", "5L", "1-5#2", "*#1", "jan"],
    5: ["60", "0-60"],
}
_SEPARATORS = [";", ".", "_", "\u2013", "|", " ,", ", "]
_SPACES = ["\xa0", "\u2003", "\u3000", "\u200b", "\t", "\n", "\x0b", "  "]


@st.composite
def near_misses(draw: st.DrawFn) -> str:
    fields = _FIELDS.findall(draw(expressions()))
    if len(fields) == 1:  # a macro
        return draw(
            st.sampled_from(
                [fields[0] + " *", " " + fields[0], "@reboot", "@daily2", "@ weekly", fields[0][1:]]
            )
        )
    at = draw(st.integers(0, len(fields) - 1))
    kind = draw(st.integers(0, 7))
    if kind == 0:  # one field slightly out of range
        fields[at] = draw(st.sampled_from(_OUT_OF_RANGE[at]))
    elif kind == 1:  # a wrong separator inside a field
        fields[at] += draw(st.sampled_from(_SEPARATORS)) + draw(
            st.sampled_from(["1", "5", "L", "mon"])
        )
    elif kind == 2:  # a field too many (a year, say) or too few
        fields = draw(
            st.sampled_from([[*fields, "2030"], [*fields, "*", "*"], fields[:-1], fields[:3]])
        )
    elif kind == 3:  # a separator that is not ASCII whitespace, or odd whitespace
        return draw(st.sampled_from(_SPACES)).join(fields)
    elif kind == 4:  # a digit that is not ASCII
        fields[at] = draw(st.sampled_from(["\uff11", "\u0661", "\u00b9", "\u2460"]))
    elif kind == 5:  # a list with a hole, or a dangling range or step
        fields[at] = draw(
            st.sampled_from(
                [f"{fields[at]},", f",{fields[at]}", f"{fields[at]},,1", f"{fields[at]}-",
                 f"{fields[at]}/", f"{fields[at]},*"]
            )
        )  # fmt: skip
    elif kind == 6:  # random or hashed values
        fields[at] = draw(st.sampled_from(["R", "H", "R/5", "H(0-5)", "R(1-5)/2"]))
    else:  # a special in the wrong field
        fields[at] = draw(st.sampled_from(["L", "?", "15W", "1#2", "L5", "L-1"]))
    return " ".join(fields)


_CRON_ALPHABET = "0123456789*-/,?#LWlwRH@ \t\nJANMONFRISUNDEC"
# PostgreSQL text (and a JSON schedule) cannot hold NUL, so no schedule has one.
garbage = st.one_of(
    st.text(st.characters(codec="utf-8", exclude_characters="\x00"), max_size=40),
    st.text(alphabet=_CRON_ALPHABET, max_size=40),
    st.lists(st.text(alphabet=_CRON_ALPHABET, min_size=1, max_size=6), min_size=5, max_size=6).map(
        " ".join
    ),
)

_after = st.datetimes(
    min_value=datetime(2026, 1, 1), max_value=datetime(2030, 12, 31), timezones=st.just(UTC)
).map(lambda moment: moment.replace(microsecond=0))


# --- the three families: 80 x 50 (12 x 40 without the slow tests) + 40 x 25 + 40 x 15 ---
# expressions, 5,600 in all, of which about 2,500 are accepted and checked slot by slot.


@pytest.mark.slow
@_settings(80)
@given(st.lists(expressions(), min_size=50, max_size=50, unique=True), _after)
def test_croniter_reads_every_accepted_expression_as_the_gate_does(
    conn: psycopg.Connection, batch: list[str], after: datetime
) -> None:
    found, accepted = misreadings(conn, batch, after)
    assert found == []
    # The grammar is mostly what the gate accepts: a check that is rarely
    # reached would pass for the wrong reason.
    assert accepted >= len(batch) // 3


@_settings(12)
@given(st.lists(expressions(), min_size=40, max_size=40, unique=True), _after)
def test_a_sample_of_accepted_expressions_is_read_alike(
    conn: psycopg.Connection, batch: list[str], after: datetime
) -> None:
    # The first examples of the family above, for runs without the slow tests.
    found, accepted = misreadings(conn, batch, after)
    assert found == [] and accepted >= len(batch) // 3


@_settings(40)
@given(st.lists(near_misses(), min_size=25, max_size=25, unique=True))
def test_accepted_near_misses_are_read_alike(conn: psycopg.Connection, batch: list[str]) -> None:
    assert misreadings(conn, batch)[0] == []


@_settings(40)
@given(st.lists(garbage, min_size=15, max_size=15, unique=True))
def test_accepted_garbage_is_read_alike(conn: psycopg.Connection, batch: list[str]) -> None:
    assert misreadings(conn, batch)[0] == []


# --- croniter's quirks: each read by croniter, refused by the gate with the reason ------

QUIRKS = [
    # A reversed range: croniter wraps it past the field's end...
    ("5-1 * * * *", 'minute field "5-1": a range must run upwards, and 5 comes after 1', "0-1)"),
    ("0 22-2 * * *", 'hour field "22-2": a range must run upwards', "(22-23,0-2)"),
    ("0 9 * * fri-mon", 'day-of-week field "fri-mon": a range must run upwards', "fri-sat,sun-mon"),
    ("0 9 * * SAT-MON", "a range must run upwards, and SAT comes after MON", "(SAT,SUN-MON)"),
    # ...carrying its step across the wrap by a rule of its own (April, July,
    # October, January).
    ("0 0 1 4-1/3 *", 'month field "4-1/3": a range must run upwards', "write two ranges"),
    ("0 0 31 nov-feb/3 *", 'month field "nov-feb/3": a range must run upwards', "two ranges"),
    ("0 0 * * fri-mon#2", 'day-of-week field "fri-mon#2": a range must run upwards', "ranges"),
    ("0 0 * * 7-1", 'day-of-week field "7-1": a range cannot start at 7', "write 0 (or SUN)"),
    # An equal range: croniter reads the whole field.
    ("* 5-5 * * *", 'hour field "5-5": a range needs two different ends', "write 5 for that"),
    ("0 0 * * mon-mon", 'day-of-week field "mon-mon": a range needs two different ends', "mon"),
    ("0 0 * * mon-mon#3", "a range needs two different ends", "write mon#3 for that day alone"),
    ("0 0 30 2-2 *", 'month field "2-2": a range needs two different ends', "whole field"),
    ("0 0 31-L * *", 'day-of-month field "31-L": a range needs two different ends', "L ends"),
    ("0 0 * * * 7-7/2", 'second field "7-7/2": a range needs two different ends', "write 7"),
    # A day-of-month range below 1 that croniter reads by wrapping (5-0) or as
    # every day (0-0).
    ("0 0 5-0 * *", 'day-of-month field "5-0" is out of range 1-31', ""),
    ("0 0 0-0 * *", 'day-of-month field "0-0" is out of range 1-31', ""),
    # A * in a list: croniter reads the field as *, no restriction at all.
    ("0 0 1,*,15 * mon", 'day-of-month field "1,*,15": * must stand alone', "write *"),
    ("0 0 *,30 2 1", 'day-of-month field "*,30": * must stand alone', "write *"),
    ("*,5 * * * *", 'minute field "*,5": * must stand alone', "names every value"),
    # A day field naming every day next to a restricted other: croniter reads
    # it as * when the other field's text holds a *, as every day otherwise.
    ("0 0 1-31 * */2", 'day-of-month field "1-31" names every day: write *', '"*/2"'),
    ("0 0 1-31 * 0,2,4,6", 'day-of-month field "1-31" names every day', "day-of-week"),
    ("0 0 */1 * mon", 'day-of-month field "*/1" names every day', "write *"),
    ("0 0 1-L * fri", 'day-of-month field "1-L" names every day', "write *"),
    ("0 0 */10 * 0-6", 'day-of-week field "0-6" names every day: write *', '"*/10"'),
    ("0 0 13 * sun-7", 'day-of-week field "sun-7" names every day', "day-of-month"),
]


@pytest.mark.parametrize(("expression", "rule", "advice"), QUIRKS, ids=[q[0] for q in QUIRKS])
def test_each_quirky_form_is_refused_with_the_rule_and_the_plain_way(
    conn: psycopg.Connection, expression: str, rule: str, advice: str
) -> None:
    assert croniter.is_valid(expression), "croniter reads it: a quirk, not an error"
    [error] = cron_errors(conn, [expression])
    assert error is not None and rule in error and advice in error, error


# --- the day-field rules: refused, each with its rule named ----------------------------

REFUSED = [
    # An nth weekday with a day-of-month: croniter found no slot in 50 years...
    ("0 9 13 * L5", "is an nth weekday (# or L), so day-of-month must be * or ?"),
    ("0 0 1 * 1#5", "is an nth weekday (# or L), so day-of-month must be * or ?"),
    ("0 0 L * 1#2", "is an nth weekday (# or L), so day-of-month must be * or ?"),
    ("0 0 15W * 1#2", "is an nth weekday (# or L), so day-of-month must be * or ?"),
    ("0 0 *,5 * 1#2", "is an nth weekday (# or L), so day-of-month must be * or ?"),
    # ...or fired on every second Friday, not on the 13th or a second Friday.
    ("0 0 13 * 5#2", "is an nth weekday (# or L), so day-of-month must be * or ?"),
    # W with a day-of-week: never (W is never a Sunday), or on the W day alone.
    ("0 0 15W * 0", "is a nearest weekday (W), so day-of-week must be * or ?"),
    ("0 0 15W * 1", "is a nearest weekday (W), so day-of-week must be * or ?"),
    ("0 0 W1 * mon-fri", "is a nearest weekday (W), so day-of-week must be * or ?"),
    # A day its months never have: no slot, or (next to a day-of-week) that alone.
    ("0 0 30 2 *", 'never comes in month field "2": no month it names has more than 29'),
    ("0 0 31 4,6 *", "never comes in month field"),
    ("0 0 30-L feb ?", "never comes in month field"),
    ("0 0 31 11/5 *", "never comes in month field"),  # November alone
    ("0 0 30 2 1", "never comes in month field"),
    # Plain days next to nth weekdays, which croniter accepts and then ignores.
    ("0 0 * * 1#2,1", "mixes nth weekdays (# or L) with plain days"),
    ("0 0 * * *,1#2", "mixes nth weekdays (# or L) with plain days"),
    ("0 0 * * 1#2,0-6", "mixes nth weekdays (# or L) with plain days"),
]


def test_the_day_field_rules_are_named(conn: psycopg.Connection) -> None:
    errors = cron_errors(conn, [expression for expression, _ in REFUSED])
    wrong = [
        (expression, rule, error)
        for (expression, rule), error in zip(REFUSED, errors, strict=True)
        if error is None or rule not in error
    ]
    assert wrong == []


ACCEPTED = [
    "0 0 * * 1#2",
    "0 0 ? * L5",
    "0 0 * * mon-fri#1",
    "0 0 * * 1#2,L1",
    "0 0 * 2 1#5",  # a fifth Monday in February: 2044, 2072, then 2112
    "0 0 15W * *",
    "0 0 W15 * ?",
    "0 0 31W 2 *",  # the weekday nearest the last day of February
    "0 0 30,L 2 *",
    "0 0 29 2 *",
    "0 0 31 12/5 *",  # a/n from the maximum is December alone
    "0 9 13 * fri",
    "0 0 * * 5-7",  # Friday to Sunday
    "0 0 * * sun-7",  # every day
    "0 0 * * 1-7/2",  # Monday, Wednesday, Friday, Sunday
    "0 0 1-31 * *",
    "0 0 5-L/10 * *",
]


def test_accepted_ones_are_read_alike(conn: psycopg.Connection) -> None:
    assert cron_errors(conn, ACCEPTED) == [None] * len(ACCEPTED)
    assert misreadings(conn, ACCEPTED) == ([], len(ACCEPTED))


def test_a_refused_insert_names_the_rule(conn: psycopg.Connection) -> None:
    with pytest.raises(psycopg.Error) as error:
        make_routine(conn, "friday-13th", "cron", {"schedule": "0 9 13 * 5#2"})
    assert error.value.sqlstate == "CE422"
    assert error.value.diag.message_primary == (
        'routines.trigger_config.schedule: day-of-week field "5#2" is an nth weekday (# or L), '
        'so day-of-month must be * or ?, not "13": croniter would fire on the nth weekday '
        'alone, or never; got "0 9 13 * 5#2"'
    )


# --- what croniter does with the day fields (docs/cron.md) ----------------------------


def _days(expression: str, count: int) -> list[str]:
    """The dates of the next `count` slots after NOW (Thursday 00:00), as "MM-DD Day"."""
    after, days = NOW, []
    for _ in range(count):
        after = next_fire(expression, "UTC", after)
        days.append(after.strftime("%m-%d %a"))
    return days


@pytest.mark.parametrize(
    ("expression", "days"),
    [
        # Both restricted: either matches (the 13th, and every Friday).
        ("0 9 13 * fri", ["01-02 Fri", "01-09 Fri", "01-13 Tue", "01-16 Fri"]),
        ("0 0 */10 * mon", ["01-05 Mon", "01-11 Sun", "01-12 Mon", "01-19 Mon"]),
        # * or ? leaves the other field alone to decide.
        ("0 0 ? * mon", ["01-05 Mon", "01-12 Mon", "01-19 Mon", "01-26 Mon"]),
        # nth weekdays and W, each with the other day field * or ?.
        ("0 0 * * fri#2", ["01-09 Fri", "02-13 Fri", "03-13 Fri", "04-10 Fri"]),
        ("0 0 ? * L1", ["01-26 Mon", "02-23 Mon", "03-30 Mon", "04-27 Mon"]),
        ("0 0 * * 5#5", ["01-30 Fri", "05-29 Fri", "07-31 Fri"]),  # months with five Fridays
        ("0 0 1W 8 *", ["08-03 Mon"]),  # August 1st is a Saturday: on to Monday the 3rd
        ("0 0 31W 4 *", ["04-30 Thu"]),  # April has no 31st: its last day instead
        ("0 0 1W * *", ["02-02 Mon", "03-02 Mon", "04-01 Wed", "05-01 Fri"]),
        ("0 0 L * *", ["01-31 Sat", "02-28 Sat", "03-31 Tue", "04-30 Thu"]),
    ],
)
def test_croniter_reads_the_day_fields_as_documented(expression: str, days: list[str]) -> None:
    assert _days(expression, len(days)) == days


@pytest.mark.parametrize(
    ("expression", "days"),
    [
        # A list with * in it counts as *: Mondays only, not every day.
        ("0 0 1,*,15 * mon", ["01-05 Mon", "01-12 Mon", "01-19 Mon", "01-26 Mon"]),
        # A field listing every value counts as * when the other field contains a *...
        ("0 0 1-31 * */2", ["01-03 Sat", "01-04 Sun", "01-06 Tue", "01-08 Thu"]),
        # ...and as every day when it does not.
        ("0 0 1-31 * 0,2,4,6", ["01-02 Fri", "01-03 Sat", "01-04 Sun", "01-05 Mon"]),
    ],
)
def test_croniter_reads_the_refused_day_forms_as_nobody_would_guess(
    conn: psycopg.Connection, expression: str, days: list[str]
) -> None:
    assert _days(expression, len(days)) == days
    assert cron_errors(conn, [expression]) != [None]


def test_a_fifth_monday_in_february_comes_decades_apart_yet_within_the_search() -> None:
    after, dates = NOW, []
    for _ in range(3):
        after = next_fire("0 0 * 2 1#5", "UTC", after)
        dates.append(after.date().isoformat())
    assert dates == ["2044-02-29", "2072-02-29", "2112-02-29"]


# --- the slots between two times: _cron_slots (SQL) against the listener -----------
#
# backfill_routine and backfill_loop enumerate slots in SQL (_cron_slots, from
# _cron_reading: the gate's own reading), not with croniter; these check that
# they are the slots the listener's next_fire walks through between two times,
# in the schedule's time zone, across DST: a wall-clock time in the
# spring-forward gap is no slot, one repeated at fall-back fires once, at its
# first occurrence (listener/cron.py).

# A DST change of each zone in 2026 (UTC): ranges are drawn around them.
_TRANSITIONS = {
    "UTC": [datetime(2026, 3, 29, 1, tzinfo=UTC)],
    "Europe/Berlin": [datetime(2026, 3, 29, 1, tzinfo=UTC), datetime(2026, 10, 25, 1, tzinfo=UTC)],
    "America/New_York": [
        datetime(2026, 3, 8, 7, tzinfo=UTC),
        datetime(2026, 11, 1, 6, tzinfo=UTC),
    ],
    # A half-hour change: the earlier occurrence is not an hour away.
    "Australia/Lord_Howe": [
        datetime(2026, 4, 4, 15, tzinfo=UTC),
        datetime(2026, 10, 3, 15, 30, tzinfo=UTC),
    ],
}
# Slots compared per expression and range: a schedule firing every second
# would otherwise make a long range cost minutes.
RANGE_SLOTS = 150


def _listener_slots(
    expression: str, zone: str, start: datetime, end: datetime
) -> tuple[list[datetime], datetime]:
    """next_fire's slots in [start, end), at most RANGE_SLOTS, and where the range then ends."""
    slots: list[datetime] = []
    after = start - timedelta(microseconds=1)
    while len(slots) < RANGE_SLOTS:
        after = next_fire(expression, zone, after)
        if after >= end:
            return slots, end
        slots.append(after)
    return slots, slots[-1] + timedelta(seconds=1)


def sql_slots(
    conn: psycopg.Connection, expression: str, zone: str, start: datetime, end: datetime
) -> list[datetime]:
    rows = conn.execute(
        "select s from ceaseless._cron_slots(%s, %s, %s, %s) s order by s",
        (expression, zone, start, end),
    ).fetchall()
    return [row[0].astimezone(UTC) for row in rows]


def slot_misreadings(
    conn: psycopg.Connection,
    expressions: Sequence[str],
    zone: str,
    start: datetime,
    end: datetime,
) -> list[tuple[str, ...]]:
    accepted = [e for e, error in zip(expressions, cron_errors(conn, expressions), strict=True)
                if error is None]  # fmt: skip
    found: list[tuple[str, ...]] = []
    for expression in accepted:
        try:
            theirs, until = _listener_slots(expression, zone, start, end)
        except CronError as exc:
            theirs, until = [], end
            if "has no slot" not in str(exc):
                found.append((expression, str(exc)))
                continue
        ours = sql_slots(conn, expression, zone, start, until)
        if ours != theirs:
            found.append((expression, f"listener: {theirs[:8]}…", f"sql: {ours[:8]}…"))
    return found


@st.composite
def _ranges(draw: st.DrawFn) -> tuple[str, datetime, datetime]:
    """A zone and a range: around one of its DST changes, or a long one for the day fields."""
    zone = draw(st.sampled_from(sorted(_TRANSITIONS)))
    if draw(st.booleans()):
        change = draw(st.sampled_from(_TRANSITIONS[zone]))
        start = change - timedelta(minutes=draw(st.integers(0, 48 * 60)))
        end = start + timedelta(minutes=draw(st.integers(1, 72 * 60)))
    else:
        start = draw(_after)
        end = start + timedelta(days=draw(st.integers(1, 800)))
    return zone, start, end


@_settings(25)
@given(st.lists(expressions(), min_size=20, max_size=20, unique=True), _ranges())
def test_the_sql_slots_between_two_times_are_the_listeners(
    conn: psycopg.Connection, batch: list[str], span: tuple[str, datetime, datetime]
) -> None:
    zone, start, end = span
    assert slot_misreadings(conn, batch, zone, start, end) == []


@pytest.mark.parametrize(
    ("expression", "zone", "start", "expected"),
    [
        # Spring forward in Berlin: 02:30 does not exist on 29 March.
        ("30 2 * * *", "Europe/Berlin", datetime(2026, 3, 28), ["03-28 01:30", "03-30 00:30"]),
        # Fall back in Berlin: 02:30 comes twice on 25 October, and fires at the first.
        ("30 2 * * *", "Europe/Berlin", datetime(2026, 10, 24), ["10-24 00:30", "10-25 00:30"]),
        # Every 30 minutes through New York's repeated hour: each wall time once.
        (
            "*/30 1 * * *",
            "America/New_York",
            datetime(2026, 11, 1),
            ["11-01 05:00", "11-01 05:30", "11-02 06:00"],
        ),
    ],
)
def test_dst_gaps_fire_nothing_and_repeated_times_fire_once_at_the_first(
    conn: psycopg.Connection, expression: str, zone: str, start: datetime, expected: list[str]
) -> None:
    begin = start.replace(tzinfo=UTC)
    end = begin + timedelta(days=3)
    found = sql_slots(conn, expression, zone, begin, end)
    shown = [f"{s:%m-%d %H:%M}" for s in found]
    assert shown[: len(expected)] == expected
    assert found == _listener_slots(expression, zone, begin, end)[0]


@pytest.mark.parametrize(
    "expression",
    ["0 9 1 nov *", "0 9 1 Feb-nov *", "0\v9\t1 NOV *", "0 9 1 oct-nov *"],
)
def test_month_names_with_a_v_and_a_vertical_tab_between_fields_are_read_as_the_gate_reads_them(
    conn: psycopg.Connection, expression: str
) -> None:
    """The slot reader splits fields as the gate does: "nov" is a month, not "no" and a
    separator, and a vertical tab separates fields."""
    begin = datetime(2026, 10, 15, tzinfo=UTC)
    end = datetime(2026, 11, 15, tzinfo=UTC)
    assert [f"{s:%m-%d %H:%M}" for s in sql_slots(conn, expression, "UTC", begin, end)] == [
        "11-01 09:00"
    ]
    assert (
        sql_slots(conn, expression, "UTC", begin, end)
        == _listener_slots(expression, "UTC", begin, end)[0]
    )
