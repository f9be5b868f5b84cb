"""`ceaseless cron preview`: the check of a schedule, as the database makes it.

check_schedule answers whether a schedule and time zone are ones a routine or a
loop may store, by the same rule the validation triggers apply, so whoever shows
a schedule before it is stored refuses exactly what an INSERT would.

Guarantees: reads nothing but the time zone names and writes nothing; raises the
database's CE422, its message naming the field (schedule or timezone), the rule
and the value, when the schedule is refused.
"""

from __future__ import annotations

from listener.queries.commands import Connection


def check_schedule(conn: Connection, schedule: str, timezone: str | None) -> None:
    """Return when the database would store `schedule` read in `timezone` (None: UTC)."""
    conn.execute("select ceaseless.check_schedule(%s, %s)", (schedule, timezone))
