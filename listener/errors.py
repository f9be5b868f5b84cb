"""Our SQLSTATEs, in one place: the Python mirror of the table in docs/errors.md.

SQL functions raise these codes (class `CE`); callers map them to exceptions and
HTTP status codes by code, never by message text. A test asserts every code raised
in functions/ is listed here and in the docs.
"""

from enum import StrEnum


class SqlState(StrEnum):
    NOT_FOUND = "CE404"
    """The id or token names no row (cancel_job on an unknown job)."""

    INVALID_STATE = "CE409"
    """The row exists but is in a state the operation does not apply to."""

    INVALID_ARGUMENT = "CE422"
    """An argument is out of range or missing (claim_jobs with p_limit 0)."""

    MISSING_SETTING = "CE500"
    """A row of ceaseless.settings that a function needs has been deleted."""
