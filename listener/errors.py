"""Our SQLSTATEs, in one place: the Python mirror of the table in docs/errors.md.

SQL functions raise these codes (class `CE`); callers map them to exceptions and
HTTP status codes by code, never by message text. A test asserts every code raised
in functions/ is listed here and in the docs.
"""

from enum import StrEnum


class SqlState(StrEnum):
    TAKEN_BACK = "CE000"
    """Never reaches a caller: a dry run of prune raises it to undo the deletes it counted."""

    NOT_FOUND = "CE404"
    """The id or token names no row (cancel_job on an unknown job, an unknown webhook)."""

    BAD_SIGNATURE = "CE401"
    """A webhook's signature does not match its body and timestamp."""

    STALE_TIMESTAMP = "CE403"
    """A webhook's timestamp is further from now than webhook_window_secs."""

    DISABLED = "CE410"
    """The routine or loop a webhook targets is disabled, or so is the agent that runs it."""

    COOLDOWN = "CE411"
    """The routine is cooling down after its last run."""

    CONCURRENCY = "CE412"
    """The routine's max_concurrent running runs are reached."""

    GLOBAL_CAP = "CE415"
    """The global cap on running routine runs (setting routine_max_running) is reached."""

    REPLAY = "CE413"
    """A webhook signature was already used within the window."""

    DUPLICATE = "CE414"
    """The routine already ran for identical content within its dedup window."""

    INVALID_STATE = "CE409"
    """The row exists but is in a state the operation does not apply to."""

    INVALID_ARGUMENT = "CE422"
    """An argument is out of range or missing (claim_jobs with p_limit 0)."""

    MISSING_SETTING = "CE500"
    """A row of ceaseless.settings that a function needs has been deleted."""
