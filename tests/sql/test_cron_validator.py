"""_cron_error, _timezone_error and check_schedule (functions/30_cron.sql).

The validator accepts only what croniter, the listener's authority for times,
accepts, and refuses what croniter refuses; what croniter reads and the
validator still refuses it refuses on purpose, with a message that says why
(seven fields, R, the caps, the quirky forms croniter reads in a way nobody
would guess, and the day-field combinations croniter reads against docs/cron.md
or never fires on). A property test compares the two on generated expressions,
and readable examples pin down the messages. Whether croniter then reads an
accepted schedule as the validator does is tests/sql/test_cron_differential.py's
question.
"""

from __future__ import annotations

import re
from collections.abc import Callable

import psycopg
import pytest
from croniter import croniter
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tests.factories import make_agent, make_routine

_FIELDS = re.compile(r"[^ \t\n\r\f\v]+")
_RANDOM_FIELD = re.compile(r"r(\([0-9]+-[0-9]+\))?(/[0-9]+)?")
# The messages of the rules croniter's language does not have: the day-field
# rules (_cron_days_error, and the nth-weekday mixing rule of _cron_field) and
# the quirky forms (reversed and equal ranges, a * in a list, a day field
# naming every day next to a restricted other). croniter reads these
# expressions; the database refuses them on purpose.
_REFUSED_ON_PURPOSE = re.compile(
    r"is an nth weekday \(# or L\), so day-of-month must be|is a nearest weekday \(W\), so "
    r"day-of-week must be|never comes in month field|mixes nth weekdays \(# or L\) with plain"
    r"|: a range must run upwards, and |: a range needs two different ends"
    r"|: a range cannot start at 7|: \* must stand alone \(a list with \* in it"
    r"|names every day: write \*"
)
# A day-of-month or month range that ends below the field's minimum, which
# croniter reads by wrapping it ("5-0" in day-of-month) or as the whole field
# ("0-0"): refused as out of range, since the day or month 0 does not exist.
_WRAPPING_BELOW_THE_MINIMUM = re.compile(
    r'(day-of-month|month) field "[^"]*"(: "[^"]*")? is out of range'
)


def _wraps_below_the_minimum(error: str) -> bool:
    """An out-of-range refusal of a range whose second end is 0, reached only by a wrap."""
    if not _WRAPPING_BELOW_THE_MINIMUM.match(error):
        return False
    item = error.split('"')[3] if error.split('"')[2].startswith(": ") else error.split('"')[1]
    match = re.fullmatch(r"([0-9]+)-0+(/[0-9]+)?", item)
    return match is not None


def cron_errors(conn: psycopg.Connection, expressions: list[str]) -> list[str | None]:
    """_cron_error of each expression, in one round trip."""
    rows = conn.execute(
        "select ceaseless._cron_error(e) from unnest(%s::text[]) with ordinality as t(e, n) "
        "order by n",
        (expressions,),
    ).fetchall()
    return [row[0] for row in rows]


def cron_error(conn: psycopg.Connection, expression: str | None) -> str | None:
    row = conn.execute("select ceaseless._cron_error(%s)", (expression,)).fetchone()
    assert row is not None
    return row[0]


def timezone_error(conn: psycopg.Connection, timezone: str | None) -> str | None:
    row = conn.execute("select ceaseless._timezone_error(%s)", (timezone,)).fetchone()
    assert row is not None
    return row[0]


# --- the grammar the property test draws from --------------------------------
#
# Each field is drawn mostly from tokens that fit its position (so a good share
# of expressions is valid and the accepting paths are compared too), and
# sometimes from a wild pool of any field's tokens, odd forms and garbage.

_BOUNDS = [(0, 59), (0, 23), (1, 31), (1, 12), (0, 7), (0, 59)]
_MONTHS = ["jan", "Feb", "MAR", "apr", "May", "jun", "jul", "aug", "sep", "oct", "nov", "DEC"]
_DAYS = ["sun", "Mon", "TUE", "wed", "thu", "fri", "Sat"]
_SPECIAL = {
    2: ["L", "l", "15W", "w1", "0W", "32W", "LW", "?", "31w"],
    3: ["foo", "ja"],
    4: ["L5", "l7", "l0", "L8", "L", "1#2", "7#1", "mon#5", "1#0", "fri#6", "?", "5L"],
}
_WEEKDAY_RANGES = ["mon-fri#2", "sat-sun#1", "1-5#2", "jan-mar#1", "*#1", "Mon-Mon#3", "L1-5"]
_RANDOM_TOKENS = [
    "R",
    "r",
    "H",
    "R/5",
    "R/0",
    "R(0-7)",
    "R(5-1)",
    "R(1-31)/40",
    "r(0-59)/0",
    "R(0-5)",
]
_RANDOM_TOKENS += ["R(6-7)/2", "H(0-29)", "R(30-59)/10", "R(1-12)", "R(0-60)", "R/100", "H/5"]
_ODD = ["", "-5", "5--6", "*/", "1/2/3", "*-5", "?/2", "5/", "/5", "**", "1-", "00", "007"]


def _numbers(position: int) -> st.SearchStrategy[str]:
    low, high = _BOUNDS[position]
    return st.one_of(
        st.integers(low, high).map(str),
        st.integers(low, high).map(str),
        st.integers(0, high + 2).map(str),
        st.sampled_from(["0" + str(low), "99", "4294967296", "0" * 12 + str(high)]),
    )


def _atoms(position: int) -> st.SearchStrategy[str]:
    names = {3: _MONTHS, 4: _DAYS}.get(position, [])
    return st.one_of(
        _numbers(position),
        _numbers(position),
        st.sampled_from(names or ["*"]),
        st.sampled_from(_SPECIAL.get(position, ["?", "L", "W"])),
    )


_steps = st.one_of(
    st.integers(1, 9).map(str), st.sampled_from(["0", "00", "15", "31", "61", "1000000", "x"])
)


def _elements(position: int) -> st.SearchStrategy[str]:
    atom = _atoms(position)
    return st.one_of(
        st.just("*"),
        atom,
        atom,
        st.builds(lambda a, b: f"{a}-{b}", atom, atom),
        st.builds(lambda a, b, s: f"{a}-{b}/{s}", atom, atom, _steps),
        st.builds(lambda s: f"*/{s}", _steps),
        st.builds(lambda a, s: f"{a}/{s}", atom, _steps),
    )


_wild_elements = st.one_of(
    st.sampled_from([_elements(p) for p in range(6)]).flatmap(lambda e: e),
    st.sampled_from(_WEEKDAY_RANGES + _RANDOM_TOKENS + _ODD),
)


def _fields(position: int) -> st.SearchStrategy[str]:
    element = _elements(position)
    return st.one_of(
        element,
        element,
        element,
        st.lists(element, min_size=2, max_size=3).map(",".join),
        st.lists(st.one_of(element, _wild_elements), min_size=1, max_size=3).map(",".join),
        st.sampled_from(_RANDOM_TOKENS + _WEEKDAY_RANGES if position == 4 else _RANDOM_TOKENS),
    )


_FIELD_STRATEGIES = [_fields(position) for position in range(6)]
_space = st.sampled_from([" ", " ", " ", "  ", "\t", "\n", " \r\n ", "\x0b", "\x0c"])
_MACROS = ["@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly"]


@st.composite
def _expressions(draw: st.DrawFn) -> str:
    count = draw(st.sampled_from([5, 5, 5, 5, 6, 6, 6, 7, 1, 4, 8]))
    fields = [draw(_FIELD_STRATEGIES[min(i, 5)]) for i in range(count)]
    text = "".join(f + draw(_space) for f in fields[:-1]) + fields[-1]
    if draw(st.integers(0, 4)) == 0:
        text = draw(st.sampled_from(["", " ", "\t"])) + text + draw(st.sampled_from(["", " "]))
    return text


_macros = st.one_of(
    st.sampled_from(_MACROS),
    st.sampled_from(["@HOURLY", "@Daily", "@reboot", "@every", "@", " @hourly", "@hourly "]),
    st.sampled_from(["@weekly * * * *", "@yearly 1", "@monthly\n"]),
)


@st.composite
def _mutated(draw: st.DrawFn) -> str:
    """A generated expression with a few characters inserted or replaced."""
    text = draw(st.one_of(_expressions(), _macros))
    for _ in range(draw(st.integers(1, 3))):
        at = draw(st.integers(0, len(text)))
        char = draw(st.sampled_from([*"0123456789*-/,?#LWlwRH @ajms\t", "\xa0", "é"]))
        text = draw(
            st.sampled_from([text[:at] + char + text[at:], text[:at] + char + text[at + 1 :]])
        )
    return text


_any_expression = st.one_of(_expressions(), _expressions(), _expressions(), _macros, _mutated())


def _refused_on_purpose(expression: str) -> bool:
    """Seven fields (croniter reads a year), a field of R (random values), or over a cap."""
    if expression.lower() in _MACROS:
        return False
    fields = _FIELDS.findall(expression)
    return (
        len(fields) == 7
        or any(_RANDOM_FIELD.fullmatch(f.lower()) for f in fields)
        or len(expression) > 1000
        or any(f.count(",") >= 60 for f in fields)
    )


@settings(
    max_examples=200,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(st.lists(_any_expression, min_size=1, max_size=50))
@example(
    ["* * * * *", "0 9 * * * 30", "* * * * 7#2", "* * * * 1#2,3", "* * * * * * *", "R * * * *"]
)
def test_validator_accepts_only_what_croniter_accepts_and_refuses_the_rest_saying_why(
    conn: psycopg.Connection, expressions: list[str]
) -> None:
    errors = cron_errors(conn, expressions)
    for expression, error in zip(expressions, errors, strict=True):
        if _refused_on_purpose(expression):
            # croniter reads these; the spec allows no year field, and a random
            # value would move the slot every time the listener computes it.
            assert error is not None, expression
        elif error is not None and (
            _REFUSED_ON_PURPOSE.search(error) or _wraps_below_the_minimum(error)
        ):
            # croniter may read these too, but not as they read, or it fires
            # on other days than docs/cron.md says, or never
            # (tests/sql/test_cron_differential.py).
            pass
        else:
            assert (error is None) == croniter.is_valid(expression), (expression, error)


# --- croniter's quirks, each matched on purpose (docs/cron.md) --------------

# The quirks the validator refuses instead (reversed and equal ranges, "5-0"
# and "0-0" in day-of-month, a * in a list, a day field naming every day) are
# listed, each with its message, in tests/sql/test_cron_differential.py.
QUIRKS = [
    ("* * 0-5 * *", False),  # a range may not start below the field's minimum
    ("59/15 * * * *", True),  # a/n starting at the field's maximum is that value alone
    ("60/15 * * * *", False),
    ("* * * * 7", True),  # 7 is Sunday
    ("* * * * sun-7", True),
    ("* * * * 7/2", True),
    ("* * 1-L * *", True),  # L ends a day-of-month range at the 31st
    ("* * L-5 * *", False),
    ("* * 1,L * *", True),
    ("* * 15W * *", True),
    ("* * W15 * *", True),
    ("* * 15W,1 * *", False),  # W takes a single day
    ("* * LW * *", False),
    ("* * * * L5", True),  # the last Friday
    ("* * * * L", False),
    ("* * * * 5L", False),
    ("* * * * mon-fri#2", True),  # names may form the range before #
    ("* * * * 1-5#2", False),  # numbers may not
    # nth weekdays do not mix with plain days. (croniter accepts 1#2,1, 1#2,0-6
    # and *,1#2, then ignores the plain days: refused on purpose, see
    # tests/sql/test_cron_differential.py.)
    ("* * * * 1#2,3", False),
    ("* * * * *,0-6,1#2", False),
    ("* * * * 1#6", False),
    ("* * ? * ?", True),
    ("? * * * *", False),
    ("*/00 * * * *", False),
    ("H * * * *", False),  # hashed values need a hash id
    ("1,,2 * * * *", False),
    ("@HOURLY", True),
    ("@midnight", True),
    ("@annually", True),
    ("@reboot", False),
    ("@hourly ", False),
    ("*/" + "0" * 989 + "5 * * * *", True),  # 1,000 characters: the length cap
    ("0\xa09 * * * *", False),  # a no-break space is not a separator
    ("0\x0b9 * * *", True),  # a vertical tab is
]


@pytest.mark.parametrize(("expression", "valid"), QUIRKS, ids=[q[0][:30] for q in QUIRKS])
def test_croniter_quirks_are_matched(
    conn: psycopg.Connection, expression: str, valid: bool
) -> None:
    assert croniter.is_valid(expression) is valid
    assert (cron_error(conn, expression) is None) is valid


@pytest.mark.parametrize("expression", ["R * * * *", "0 9 * * * r/15", "0 R(0-7)/2 * * *"])
def test_random_values_are_refused_though_croniter_reads_them(
    conn: psycopg.Connection, expression: str
) -> None:
    assert croniter.is_valid(expression)
    error = cron_error(conn, expression)
    assert error is not None and "R (random values) is not supported" in error


def test_seven_fields_are_refused_though_croniter_reads_a_year(conn: psycopg.Connection) -> None:
    assert croniter.is_valid("0 9 * * * 0 2030")
    assert cron_error(conn, "0 9 * * * 0 2030") == (
        "expected 5 fields (or 6 with seconds as the sixth) or a macro, got 7: "
        "a year field is not supported"
    )


# --- messages: the field named, the value shown -------------------------------


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        (None, "schedule is missing"),
        ("61 * * * *", 'minute field "61" is out of range 0-59'),
        ("0 24 * * *", 'hour field "24" is out of range 0-23'),
        ("0 9 32 * *", 'day-of-month field "32" is out of range 1-31'),
        ("0 9 * 13 *", 'month field "13" is out of range 1-12'),
        ("0 9 * * 8", 'day-of-week field "8" is out of range 0-7'),
        ("0 9 * * * 60", 'second field "60" is out of range 0-59'),
        ("0,61 * * * *", 'minute field "0,61": "61" is out of range 0-59'),
        ("0 9 * FOO *", 'month field "FOO" is not a number or a month name (JAN-DEC)'),
        ("0 9 * * MONDAY", 'day-of-week field "MONDAY" is not a number or a day name (SUN-SAT)'),
        ("*/0 * * * *", 'minute field "*/0": a step must be 1 or more'),
        ("-5 * * * *", 'minute field "-5": negative numbers are not allowed'),
        ("0 9 1,15W * *", 'day-of-month field "1,15W": W takes a single day, not a list'),
        ("0 9 * * 1#6", 'day-of-week field "1#6": the ordinal after # must be 1-5'),
        ("0 9 * * 1#2,3", 'day-of-week field "1#2,3" mixes nth weekdays (# or L) with plain days'),
        ("0 ? * * *", 'hour field "?": ? is allowed only in day-of-month and day-of-week'),
        (
            "5-1 * * * *",
            'minute field "5-1": a range must run upwards, and 5 comes after 1: to wrap past the '
            "end of the field, write two ranges (5-59,0-1)",
        ),
        (
            "0 9 * * FRI-MON",
            'day-of-week field "FRI-MON": a range must run upwards, and FRI comes after MON: to '
            "wrap past the end of the field, write two ranges (FRI-SAT,SUN-MON)",
        ),
        (
            "* 5-5 * * *",
            'hour field "5-5": a range needs two different ends: write 5 for that value alone, '
            "or * for every value (croniter reads an equal range as the whole field)",
        ),
        (
            "1,*,15 * * * *",
            'minute field "1,*,15": * must stand alone (a list with * in it names every value: '
            "write *)",
        ),
        (
            "0 0 1-31 * */2",
            'day-of-month field "1-31" names every day: write * (next to a restricted '
            'day-of-week, here "*/2", croniter reads such a field as * or as every day depending '
            "on how day-of-week is written)",
        ),
        ("H * * * *", 'minute field "H": H (hashed values) is not supported'),
        ("* * * *", "expected 5 fields (or 6 with seconds as the sixth) or a macro, got 4"),
        (
            "@reboot",
            'unknown macro "@reboot" (use @yearly, @annually, @monthly, @weekly, @daily, '
            "@midnight or @hourly)",
        ),
    ],
)
def test_error_names_the_field_and_shows_the_value(
    conn: psycopg.Connection, expression: str | None, message: str
) -> None:
    assert cron_error(conn, expression) == message


@pytest.mark.parametrize(
    ("schedule", "valid"),
    [
        ("0 9 * * *", True),
        ("0 9 * * * 30", True),
        ("@weekly", True),
        ("@Daily", True),
        ("5-1 * * * *", False),  # croniter wraps it; refused with the plain way to write it
        ("0 9 * * * 0 2030", False),
        ("@reboot", False),
        ("@hourly ", False),
        ("H * * * *", False),
        ("R 9 * * *", False),  # croniter accepts it; see docs/cron.md
        ("0\xa09 * * * *", False),
        ("0 9 30 2 *", False),  # February 30th never comes
        ("0 9 13 * 5#2", False),  # croniter would fire on every second Friday alone
        ("0 9 15W * 1", False),  # croniter would fire on the W day alone
        ("0 9 * * 1#2,1", False),  # croniter would ignore the plain Monday
        ("0 9 ? * L5", True),
    ],
)
def test_the_gate_judges_schedules_as_documented(
    conn: psycopg.Connection, schedule: str, valid: bool
) -> None:
    assert (cron_error(conn, schedule) is None) is valid


def test_a_valid_schedule_has_no_error(conn: psycopg.Connection) -> None:
    valid = ["0 9 * * 1-5", "*/15 * * * *", "0 9 * * * 30", "0 0 1 JAN *", "@daily", "@Weekly"]
    assert cron_errors(conn, valid) == [None] * len(valid)


def test_validator_answers_hostile_input_without_raising(conn: psycopg.Connection) -> None:
    hostile = [
        "",
        " " * 10_000,
        "9" * 100_000 + " * * * *",
        "*/" + "9" * 4300 + " * * * *",
        "1," * 20_000 + "1 * * * *",
        "\x01\x02 * * * *",
        "日 * * * *",
        "(((((",
        "\\ \\ \\ \\ \\",
        "R(99999999999999999999-999999999999999999999)/0 * * * *",
        "R(1-99999999999999999999) * * * *",
        "*/99999999999999999999 * * * *",
    ]
    errors = cron_errors(conn, hostile)
    # croniter reads the long ones; the caps on length and list items refuse them.
    assert [error is None for error in errors] == [
        croniter.is_valid(e) and not _refused_on_purpose(e) for e in hostile
    ]
    assert "at most 1000 are allowed" in errors[3] and "at most 1000" in errors[4]
    assert errors[-1] is None


# --- time zones ---------------------------------------------------------------


@pytest.mark.parametrize("timezone", ["Europe/Berlin", "America/New_York", "UTC", "Etc/GMT+5"])
def test_iana_time_zones_are_accepted(conn: psycopg.Connection, timezone: str) -> None:
    assert timezone_error(conn, timezone) is None


@pytest.mark.parametrize(
    "timezone",
    [
        "Mars/Olympus",
        "europe/berlin",
        "",
        "Europe/",
        "UTC+3",
        "CEST",
        "../etc/passwd",
        "posixrules",
    ],
)
def test_unknown_time_zones_are_refused_by_name(conn: psycopg.Connection, timezone: str) -> None:
    assert timezone_error(conn, timezone) == (
        f'unknown time zone "{timezone}": use an IANA name such as Europe/Berlin, '
        "America/New_York or UTC"
    )


def test_a_missing_time_zone_is_an_error_not_an_exception(conn: psycopg.Connection) -> None:
    assert timezone_error(conn, None) == "time zone is missing"


# --- check_schedule: the same rule, for a schedule not stored ------------------


def test_check_schedule_returns_nothing_for_a_valid_schedule(conn: psycopg.Connection) -> None:
    rows = conn.execute("select ceaseless.check_schedule('0 9 * * 1-5', 'Europe/Berlin')")
    assert len(rows.fetchall()) == 1
    # No time zone is UTC, as a routine's or loop's default.
    conn.execute("select ceaseless.check_schedule('@daily', null)")
    conn.execute("select ceaseless.check_schedule('@daily')")


@pytest.mark.parametrize(
    ("schedule", "timezone", "message"),
    [
        (
            "0 9 * * 5-1",
            "UTC",
            'schedule: day-of-week field "5-1": a range must run upwards, and 5 comes after 1: to '
            'wrap past the end of the field, write two ranges (5-6,0-1); got "0 9 * * 5-1"',
        ),
        (None, "UTC", "schedule: schedule is missing; got nothing"),
        (
            "@daily",
            "Mars/Base",
            'timezone: unknown time zone "Mars/Base": use an IANA name such as Europe/Berlin, '
            'America/New_York or UTC; got "Mars/Base"',
        ),
        (
            "0 9 * * *",
            "europe/berlin",
            'timezone: unknown time zone "europe/berlin": use an IANA name such as '
            'Europe/Berlin, America/New_York or UTC; got "europe/berlin"',
        ),
    ],
)
def test_check_schedule_raises_ce422_naming_the_field_the_rule_and_the_value(
    conn: psycopg.Connection, schedule: str | None, timezone: str, message: str
) -> None:
    with pytest.raises(psycopg.Error) as error:
        conn.execute("select ceaseless.check_schedule(%s, %s)", (schedule, timezone))
    assert error.value.sqlstate == "CE422"
    assert error.value.diag.message_primary == message


@pytest.mark.parametrize(
    "schedule",
    ["0 9 * * 1-5", "22-2 * * * *", "0 0 30 2 *", "0 0 13 * 5#2", "61 * * * *", "R * * * *",
     "0 0 1,*,15 * mon", "0 9 * * * 0 2030", "@reboot"],
)  # fmt: skip
def test_check_schedule_refuses_what_a_routine_insert_refuses_with_the_same_rule(
    conn: psycopg.Connection, schedule: str
) -> None:
    make_agent(conn)

    def rule(statement: Callable[[], object]) -> str | None:
        try:
            statement()
        except psycopg.Error as error:
            assert error.sqlstate == "CE422"
            return (error.diag.message_primary or "").split(": ", 1)[1]
        return None

    checked = rule(lambda: conn.execute("select ceaseless.check_schedule(%s)", (schedule,)))
    stored = rule(
        lambda: make_routine(conn, trigger_type="cron", trigger_config={"schedule": schedule})
    )
    assert checked == stored


def test_a_user_role_may_check_a_schedule(
    login_role: Callable[..., psycopg.Connection],
) -> None:
    alice = login_role("alice")
    alice.execute("select ceaseless.check_schedule('0 9 * * 1-5', 'Europe/Berlin')")
    with pytest.raises(psycopg.Error) as error:
        alice.execute("select ceaseless.check_schedule('0 9 * * 1-5', 'Mars/Base')")
    assert error.value.sqlstate == "CE422"
