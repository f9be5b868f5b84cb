"""One authority for cron: the database accepts exactly what the listener can compute.

`_cron_error` (functions/35_cron.sql) refuses schedules at INSERT; the listener
computes next_fire_at with croniter (listener/cron.py). For every generated
expression this checks

    _cron_error(expression) is NULL  <=>  next_fire(expression, "UTC", NOW) returns a slot

with next_fire, the listener's own path (its validation, then croniter's search
for the next slot within 50 years). A schedule the database accepts and the
listener cannot compute would be disabled later with a misleading reason; one
the listener can compute and the database refuses is a rule nobody documented.

Expressions come in three families: valid ones built from the field grammars
(they reach the day-field rules, where the two used to disagree), near misses
(one thing slightly wrong), and garbage. Each family runs as one test on one
connection, a batch of expressions per SQL round trip; the seed is fixed.
"""

from __future__ import annotations

from datetime import UTC, datetime

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from listener.cron import CronError, next_fire
from tests.factories import make_routine

NOW = datetime(2026, 1, 1, tzinfo=UTC)

# A fixed seed (derandomize) and no example database: every run checks the same
# expressions. Each example is a batch of expressions, one SQL round trip.
_EXAMPLES = 50
_SETTINGS = settings(
    max_examples=_EXAMPLES,
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


def cron_errors(conn: psycopg.Connection, expressions: list[str]) -> list[str | None]:
    """_cron_error of each expression, in one round trip."""
    rows = conn.execute(
        "select ceaseless._cron_error(e) from unnest(%s::text[]) with ordinality as t(e, n) "
        "order by n",
        (expressions,),
    ).fetchall()
    return [row[0] for row in rows]


def listener_error(expression: str) -> str | None:
    """None when the listener finds a next slot for `expression`, else why not."""
    try:
        next_fire(expression, "UTC", NOW)
    except CronError as exc:
        return str(exc)
    return None


def disagreements(conn: psycopg.Connection, expressions: list[str]) -> list[tuple[str, ...]]:
    """The expressions one side accepts and the other refuses, with both answers."""
    found = []
    for expression, sql in zip(expressions, cron_errors(conn, expressions), strict=True):
        listener = listener_error(expression)
        if (sql is None) != (listener is None):
            found.append((expression, f"SQL: {sql}", f"listener: {listener}"))
    return found


# --- valid: built from each field's grammar ----------------------------------------

_MONTHS = ["jan", "Feb", "MAR", "apr", "may", "Jun", "jul", "AUG", "sep", "oct", "nov", "dec"]
_DAYS = ["sun", "Mon", "TUE", "wed", "thu", "FRI", "sat"]
_MACROS = ["@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly"]


def _number(low: int, high: int) -> st.SearchStrategy[str]:
    return st.integers(low, high).map(str)


def _plain(low: int, high: int, names: list[str] | None = None) -> st.SearchStrategy[str]:
    """A value, a range, a range with a step, */n or a/n."""
    value = (
        _number(low, high)
        if names is None
        else st.one_of(_number(low, high), st.sampled_from(names))
    )
    step = _number(1, high)
    return st.one_of(
        value,
        st.builds("{}-{}".format, value, value),
        st.builds("{}-{}/{}".format, value, value, step),
        st.builds("*/{}".format, step),
        st.builds("{}/{}".format, value, step),
    )


def _list(item: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    return st.one_of(item, item, st.lists(item, min_size=2, max_size=3).map(",".join))


def _star_or(field: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    return st.one_of(st.just("*"), field)


_minute = _star_or(_list(_plain(0, 59)))
_hour = _star_or(_list(_plain(0, 23)))
_second = _star_or(_list(_plain(0, 59)))
# Short months, so that late days (below) meet months that lack them.
_SHORT_MONTHS = ["2", "feb", "4,6", "apr-jun/2", "9,11", "2-12/12", "11-4/5", "nov-feb/3", "4/12"]
_month = st.one_of(
    _star_or(_list(_plain(1, 12, _MONTHS))),
    st.sampled_from([*_SHORT_MONTHS, "2-2", "1,2", "12/5", "feb-apr"]),
)
_late_day = st.one_of(
    _number(29, 31), st.builds("{}-{}".format, _number(29, 30), st.sampled_from(["31", "L"]))
)
_day_of_month = st.one_of(
    st.sampled_from(["*", "?"]),
    _list(
        st.one_of(
            _plain(1, 31), st.sampled_from(["L", "l"]), st.builds("{}-L".format, _number(1, 31))
        )
    ),
    _late_day,
    _list(st.one_of(_late_day, _late_day, st.sampled_from(["*", "L", "29/1", "0-0"]))),
    # W stands alone: the weekday nearest a day.
    st.builds("{}W".format, _number(1, 31)),
    st.builds("W{}".format, _number(1, 31)),
    st.builds("{}w".format, _number(28, 31)),
)
_weekday = st.one_of(_number(0, 7), st.sampled_from(_DAYS))
_nth_weekday = st.one_of(
    st.builds("{}#{}".format, _weekday, _number(1, 5)),
    st.builds("{}-{}#{}".format, st.sampled_from(_DAYS), st.sampled_from(_DAYS), _number(1, 5)),
    st.builds("L{}".format, _number(0, 7)),
)
_day_of_week = st.one_of(
    st.sampled_from(["*", "?"]),
    _list(_plain(0, 7, _DAYS)),
    _list(_nth_weekday),
    # nth weekdays next to plain days, which croniter refuses or silently narrows.
    st.builds("{},{}".format, _nth_weekday, st.one_of(st.just("*"), _plain(0, 7, _DAYS))),
)


@st.composite
def valid_expressions(draw: st.DrawFn) -> str:
    shape = draw(st.integers(0, 19))
    if shape == 0:
        return draw(st.sampled_from(_MACROS + [m.upper() for m in _MACROS]))
    fields = [draw(_minute), draw(_hour), draw(_day_of_month), draw(_month), draw(_day_of_week)]
    if shape <= 3:  # a late day in short months, which may never meet
        fields[2:4] = [draw(_late_day), draw(st.sampled_from(_SHORT_MONTHS))]
    if draw(st.booleans()):
        fields.append(draw(_second))
    return " ".join(fields)


# --- near misses: one thing slightly wrong ----------------------------------------

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
    fields = draw(valid_expressions()).split(" ")
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
        fields[at] = (
            fields[at]
            + draw(st.sampled_from(_SEPARATORS))
            + draw(st.sampled_from(["1", "5", "L", "mon"]))
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
                [
                    f"{fields[at]},",
                    f",{fields[at]}",
                    f"{fields[at]},,1",
                    f"{fields[at]}-",
                    f"{fields[at]}/",
                ]
            )
        )
    elif kind == 6:  # random or hashed values
        fields[at] = draw(st.sampled_from(["R", "H", "R/5", "H(0-5)", "R(1-5)/2"]))
    else:  # a special in the wrong field
        fields[at] = draw(st.sampled_from(["L", "?", "15W", "1#2", "L5", "L-1"]))
    return " ".join(fields)


# --- garbage ------------------------------------------------------------------------

_CRON_ALPHABET = "0123456789*-/,?#LWlwRH@ \t\nJANMONFRISUNDEC"
# PostgreSQL text (and a JSON schedule) cannot hold NUL, so no schedule has one.
garbage = st.one_of(
    st.text(st.characters(codec="utf-8", exclude_characters="\x00"), max_size=40),
    st.text(alphabet=_CRON_ALPHABET, max_size=40),
    st.lists(st.text(alphabet=_CRON_ALPHABET, min_size=1, max_size=6), min_size=5, max_size=6).map(
        " ".join
    ),
)


# --- the three families: 50 x 30 + 50 x 20 + 50 x 12 = 3,100 expressions, ------------
# about 2,800 of them distinct (a batch never repeats one; batches may).


@_SETTINGS
@given(st.lists(valid_expressions(), min_size=30, max_size=30, unique=True))
def test_valid_expressions_agree(conn: psycopg.Connection, expressions: list[str]) -> None:
    assert disagreements(conn, expressions) == []


@_SETTINGS
@given(st.lists(near_misses(), min_size=20, max_size=20, unique=True))
def test_near_misses_agree(conn: psycopg.Connection, expressions: list[str]) -> None:
    assert disagreements(conn, expressions) == []


@_SETTINGS
@given(st.lists(garbage, min_size=12, max_size=12, unique=True))
def test_garbage_agrees(conn: psycopg.Connection, expressions: list[str]) -> None:
    assert disagreements(conn, expressions) == []


# --- regressions: the database accepted these, and croniter found no slot --------------
# (or fired on other days than docs/cron.md says). Each is refused now, by both sides,
# with the same message.

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
    ("0 0 31 nov-feb/3 *", "never comes in month field"),  # wraps to November alone
    ("0 0 30 2 1", "never comes in month field"),
    # Plain days next to nth weekdays, which croniter accepts and then ignores.
    ("0 0 * * 1#2,1", "mixes nth weekdays (# or L) with plain days"),
    ("0 0 * * *,1#2", "mixes nth weekdays (# or L) with plain days"),
    ("0 0 * * 1#2,0-6", "mixes nth weekdays (# or L) with plain days"),
]


def test_refused_by_both_with_the_same_reason(conn: psycopg.Connection) -> None:
    sql_errors = cron_errors(conn, [expression for expression, _ in REFUSED])
    wrong = [
        (expression, rule, sql, listener_error(expression))
        for (expression, rule), sql in zip(REFUSED, sql_errors, strict=True)
        if sql is None or rule not in sql or listener_error(expression) != sql
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
    "0 0 30 2-2 *",  # an equal range is every month
    "0 0 31 12/5 *",  # a/n from the maximum is December alone
    "0 9 13 * fri",
    "0 0 *,30 2 1",
]


def test_accepted_by_both(conn: psycopg.Connection) -> None:
    assert cron_errors(conn, ACCEPTED) == [None] * len(ACCEPTED)
    assert [listener_error(e) for e in ACCEPTED] == [None] * len(ACCEPTED)


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
        # * or ? (or a list with * in it) leaves the other field alone to decide.
        ("0 0 ? * mon", ["01-05 Mon", "01-12 Mon", "01-19 Mon", "01-26 Mon"]),
        ("0 0 1,*,15 * mon", ["01-05 Mon", "01-12 Mon", "01-19 Mon", "01-26 Mon"]),
        # A field listing every value counts as * when the other field contains a *.
        ("0 0 1-31 * */2", ["01-03 Sat", "01-04 Sun", "01-06 Tue", "01-08 Thu"]),
        ("0 0 1-31 * 0,2,4,6", ["01-02 Fri", "01-03 Sat", "01-04 Sun", "01-05 Mon"]),
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


def test_a_fifth_monday_in_february_comes_decades_apart_yet_within_the_search() -> None:
    after, dates = NOW, []
    for _ in range(3):
        after = next_fire("0 0 * 2 1#5", "UTC", after)
        dates.append(after.date().isoformat())
    assert dates == ["2044-02-29", "2072-02-29", "2112-02-29"]
