"""The event prefilter's promise: every content a pattern matches contains its literal.

A wrong literal would silently drop events, so the promise is checked against
PostgreSQL's own regex engine over generated patterns and contents.
"""

from __future__ import annotations

import psycopg
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

ALPHABET = "ab. -"

_literal = st.sampled_from(list("ab -"))
_escaped = st.sampled_from(["\\.", "\\-", "\\*", "\\ "])
_class = st.sampled_from(["[ab]", "[^a]", "[]a]", "[a-b]", "\\d", "\\w", "."])


def _atoms(inner: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    group = st.builds(
        lambda x, y, alt: f"({x}|{y})" if alt else f"({x}{y})", inner, inner, st.booleans()
    )
    return st.one_of(_literal, _literal, _literal, _escaped, _class, group)


_quantifier = st.sampled_from(["", "", "", "?", "*", "+", "{0,2}", "{1,3}", "{2}", "*?", "+?"])
_piece = st.builds(
    lambda atom, q: atom + q, _atoms(st.text(alphabet="ab", min_size=1, max_size=3)), _quantifier
)
_pattern = st.builds(
    lambda start, pieces, end, alt: (
        ("^" if start else "") + "".join(pieces) + ("$" if end else "") + ("|ab" if alt else "")
    ),
    st.booleans(),
    st.lists(_piece, min_size=1, max_size=8),
    st.booleans(),
    st.integers(0, 9).map(lambda n: n == 0),
)


def test_literal_of_a_generated_pattern_is_in_every_match(conn: psycopg.Connection) -> None:
    contents = st.lists(st.text(alphabet=ALPHABET, max_size=12), min_size=30, max_size=30)

    @settings(max_examples=300, deadline=None)
    @given(pattern=_pattern, samples=contents)
    def holds(pattern: str, samples: list[str]) -> None:
        rows = conn.execute(
            "select c, ceaseless._regex_required_literal(%s) from unnest(%s::text[]) c "
            "where c ~ %s and strpos(c, ceaseless._regex_required_literal(%s)) = 0",
            (pattern, samples, pattern, pattern),
        ).fetchall()
        assert rows == [], f"pattern {pattern!r} matched {rows[0][0]!r} without {rows[0][1]!r}"

    holds()


@pytest.mark.parametrize(
    ("pattern", "literal"),
    [
        ("deploy (failed|broken)", "deploy "),
        ("^error: .*timeout", "error: "),
        ("colou?r", "colo"),
        ("x{0,3}yz", "yz"),
        ("foo\\.bar", "foo.bar"),
        ("a|b", ""),
        ("(?i)hello", ""),
        ("***=a.b", "a.b"),
    ],
)
def test_known_patterns(conn: psycopg.Connection, pattern: str, literal: str) -> None:
    row = conn.execute("select ceaseless._regex_required_literal(%s)", (pattern,)).fetchone()
    assert row == (literal,)


def test_event_routine_stores_its_literal_and_still_matches(conn: psycopg.Connection) -> None:
    from tests.factories import make_agent, make_routine

    make_agent(conn)
    routine = make_routine(
        conn, trigger_type="event", trigger_config={"pattern": "deploy (failed|broken)"}
    )
    row = conn.execute(
        "select event_literal from ceaseless.routines where id = %s", (routine,)
    ).fetchone()
    assert row == ("deploy ",)
    fired = conn.execute(
        "insert into ceaseless.events (user_id, content) "
        "values ('alice', 'the deploy broken again') returning fired_count"
    )
    assert fired.fetchone() == (1,)
