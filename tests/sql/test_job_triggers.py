"""The head of functions/10_jobs.sql lists the triggers of job in the order PostgreSQL fires
them, each with the file that defines it: the order is visible where the queue is written,
and stays true."""

from __future__ import annotations

import re
from pathlib import Path

import psycopg

from listener.database.reference import triggers

FUNCTIONS = Path(__file__).resolve().parents[2] / "functions"


def _listed() -> list[tuple[str, str]]:
    """(trigger, file) as the header of 10_jobs.sql lists them, in its order."""
    text = (FUNCTIONS / "10_jobs.sql").read_text()
    header = text.split("\n\n", 1)[0]  # the file's first comment block
    listed = []
    for name, rest in re.findall(r"^--     (job_\w+) +(.*(?:\n--  {20,}.*)*)", header, re.M):
        files = re.findall(r"\b\d\d_\w+\.sql\b", rest)
        where = files[0] if files else "same file"
        listed.append((name, where))
    return listed


def test_the_jobs_header_lists_every_trigger_of_job_in_firing_order(
    conn: psycopg.Connection,
) -> None:
    fired = [trigger.name for trigger in triggers(conn)["job"]]
    assert [name for name, _ in _listed()] == fired


def test_each_job_trigger_is_created_in_the_file_the_header_names() -> None:
    previous = None
    for name, where in _listed():
        # "same file": the one named on the line before.
        where = previous if where == "same file" else where
        assert where is not None, name
        text = (FUNCTIONS / where).read_text()
        assert (
            re.search(rf"create or replace trigger {name}\b", text)
            # A generated trigger: the file calls the function that creates it.
            or f"_statement_trigger('{name}'" in text
            or (name == "job_bounded_json" and "_install_bounded_json('job'" in text)
        ), (name, where)
        previous = where
