"""The docs harness itself: it reads pages as written and fails on a wrong example."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.docs.markdown import read
from tests.docs.runner import (
    Error,
    PageRun,
    Table,
    compare_tables,
    documented_errors,
    documented_tables,
    error_matches,
    printed_errors,
    printed_tables,
)


def _page(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "page.md"
    path.write_text(text)
    return path


def test_blocks_carry_their_directives_and_nested_fences_stay_whole(tmp_path: Path) -> None:
    page = read(
        _page(
            tmp_path,
            "# Page\n\n<!-- docs-test: listener: --poll-interval 60 -->\n\n"
            "<!-- docs-test: before: select 1; -->\n"
            "<!-- docs-test: replace: '…' => :'id' -->\n\n"
            "```sql\nselect '…';\n```\n\n"
            "````text\n```ceaseless\n{}\n```\n````\n\n"
            "- a list item:\n\n"
            "  <!-- docs-test: not run: shown only -->\n"
            "  ```sh\n  echo indented\n  ```\n\n"
            "```python\nprint()\n```\n",
        )
    )
    assert page.listener == ["--poll-interval", "60"]
    assert [(b.line, b.language) for b in page.blocks] == [
        (8, "sql"),
        (12, "text"),
        (21, "sh"),
        (25, "python"),
    ]
    sql, text, sh, python = page.blocks
    assert sql.runnable_text() == "select 1;\nselect :'id';\n"
    assert sql.shown_after == "```ceaseless\n{}\n```\n"
    assert text.not_run == "a text block: shown, not run"
    assert sh.text == "echo indented\n" and sh.not_run == "shown only"
    assert python.not_run == "a python block: shown, not run"
    assert page.stray == []


def test_a_directive_above_no_block_is_stray_and_an_unknown_one_is_refused(tmp_path: Path) -> None:
    page = read(_page(tmp_path, "<!-- docs-test: not run: why -->\n\nSome prose.\n"))
    assert [d.kind for d in page.stray] == ["not run"]
    with pytest.raises(ValueError, match="unknown docs-test directive 'skip'"):
        read(_page(tmp_path, "<!-- docs-test: skip: why -->\n```sql\nselect 1;\n```\n"))
    with pytest.raises(ValueError, match="not run: say why"):
        read(_page(tmp_path, "<!-- docs-test: not run: -->\n```sql\nselect 1;\n```\n"))


def test_documented_errors_are_read_with_their_continuations_details_and_sqlstate() -> None:
    errors = documented_errors(
        "update x set y = 1;\n"
        "-- ERROR:  settings.lease_secs: must be an integer\n"
        '--         from 2 to 86400; got "soon"   (CE422)\n'
        "insert into t values (1);  -- ERROR: no routine with id … (SQLSTATE CE404)\n"
        "insert into agents values ('x');\n"
        '-- ERROR:  new row violates check constraint "c"\n'
        "-- DETAIL:  Failing values: timeout_secs = -5.\n"
        "-- the next comment is not part of it\n"
    )
    assert errors == [
        Error("CE422", 'settings.lease_secs: must be an integer from 2 to 86400; got "soon"'),
        Error("CE404", "no routine with id …"),
        Error(None, 'new row violates check constraint "c"', "Failing values: timeout_secs = -5."),
    ]


def test_printed_errors_are_read_from_psql_verbose_output() -> None:
    stderr = (
        "psql:/w/page.sql:7: NOTICE:  00000: nothing to do\n"
        'psql:/w/page.sql:9: ERROR:  23514: new row for relation "agents" violates check\n'
        "DETAIL:  Failing values: timeout_secs = -5.\n"
        "SCHEMA NAME:  ceaseless\n"
        "LOCATION:  ExecConstraints, execMain.c:2000\n"
        "psql:/w/page.sql:12: ERROR:  CE404: cancel_job: no job with id 6a1f0000\n"
        "HINT:  list jobs with select * from ceaseless.job_queue\n"
    )
    assert printed_errors(stderr) == [
        Error(
            "23514",
            'new row for relation "agents" violates check',
            "Failing values: timeout_secs = -5.",
        ),
        Error(
            "CE404",
            "cancel_job: no job with id 6a1f0000",
            hint="list jobs with select * from ceaseless.job_queue",
        ),
    ]


@pytest.mark.parametrize(
    ("documented", "matches"),
    [
        (Error("CE404", "cancel_job: no job with id 6a1f…"), True),
        (Error(None, "cancel_job: no job with id 6a1f…"), True),
        (Error(None, "cancel_job: … job with id"), True),
        (Error("CE422", "cancel_job: no job with id 6a1f…"), False),
        (Error(None, "cancel_job: no routine with id …"), False),
        (Error(None, "with id … cancel_job"), False),
        (Error(None, "cancel_job: no job", "a detail it does not have"), False),
    ],
)
def test_a_documented_error_matches_in_order_with_ellipses(
    documented: Error, matches: bool
) -> None:
    printed = Error("CE404", "cancel_job: no job with id 0b6c1d2e-0000-4000-8000-000000000000")
    assert error_matches(documented, printed) is matches


def test_a_wrong_example_fails_its_page_and_a_right_one_passes(db_url: str, tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    page = read(
        _page(
            tmp_path,
            "```sql\ncreate table t (n int check (n > 0));\ninsert into t values (1) "
            "returning n \\gset\n```\n\n"
            "```sql\ninsert into t values (-:n);\n"
            '-- ERROR:  new row for relation "t" violates check constraint "t_n_check"\n```\n\n'
            "```sql\ninsert into t values (0);\n"
            '-- ERROR:  new row for relation "t" violates something else\n```\n\n'
            "```sql\nselect * from nowhere;\n```\n\n"
            '```sh\ntest "$(psql -XAtc \'select count(*) from t\' "$DATABASE_URL")" = 1\n```\n\n'
            "```sh\nceaseless job list --all >/dev/null && false\n```\n\n"
            "<!-- docs-test: not run: it would fail -->\n```sql\nselect 1/0;\n```\n\n"
            "```sql\nselect 1 as\n```\n",
        )
    )
    results = PageRun(page, db_url, work).run(timeout=120)
    assert [(r.block.line, bool(r.problems)) for r in results] == [
        (1, False),
        (6, False),
        (11, True),
        (16, True),
        (20, False),
        (24, True),
        (33, True),
    ]
    assert "violates something else" in results[2].problems[0]
    assert 'relation "nowhere" does not exist' in results[3].problems[0]
    assert "bash exited with 1" in results[5].problems[0]
    assert "syntax error" in results[6].problems[0]


def test_a_complaint_of_psql_itself_fails_the_block(db_url: str, tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    page = read(_page(tmp_path, "```sql\nselect 1 as n where false \\gset\n```\n"))
    [result] = PageRun(page, db_url, work).run(timeout=60)
    [problem] = result.problems
    assert problem.startswith("an error the page does not show: ERROR: psql: ")
    assert "no rows returned for \\gset" in problem


def test_shown_result_tables_are_compared_with_what_psql_printed() -> None:
    shown = documented_tables(
        "select state, outcome, took from runs;\n"
        "--    state   |  outcome  |  took\n"
        "-- -----------+-----------+--------\n"
        "--  delivered | succeeded | 00:00:01\n"
        "--  blocked   | needs_…   | 00:00:02\n"
        "-- not a table\n"
    )
    assert shown == [
        Table(
            ["state", "outcome", "took"],
            [["delivered", "succeeded", "00:00:01"], ["blocked", "needs_…", "00:00:02"]],
        )
    ]
    printed = printed_tables(
        "   state   |   outcome   | took \n"
        "-----------+-------------+------\n"
        " delivered | succeeded   | 00:00:09\n"
        " blocked   | needs_human | 00:00:07\n"
        "(2 rows)\n\n"
    )
    assert compare_tables(shown, printed, {"took"}) == []
    assert compare_tables(shown, printed, set()) == [
        "column took: the page shows '00:00:01', psql printed '00:00:09'",
        "column took: the page shows '00:00:02', psql printed '00:00:07'",
    ]
    assert compare_tables(shown, printed_tables(""), set()) == [
        "no result with the columns ['state', 'outcome', 'took'] was printed"
    ]


def test_a_shell_block_must_print_the_response_it_shows(db_url: str, tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    page = read(
        _page(
            tmp_path,
            "```sh\necho 'HTTP/1.1 401 Unauthorized'\n# HTTP/1.1 202 Accepted\n```\n\n"
            "```sh\necho 'HTTP/1.1 202 Accepted'\n# HTTP/1.1 202 Accepted  {}\n```\n",
        )
    )
    refused, accepted = PageRun(page, db_url, work).run(timeout=60)
    assert refused.problems[0].startswith("the page shows HTTP/1.1 202, which curl did not print")
    assert accepted.problems == []
