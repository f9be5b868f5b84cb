"""The check of a cron schedule, as the database makes it (functions/35_cron.sql).

One statement: check_schedule answers whether a schedule and time zone are
ones a routine or a loop may store, by the same rule the validation triggers
apply, so whoever shows a schedule before it is stored (`ceaseless cron
preview`) refuses exactly what an INSERT would.

Guarantees: the statement returns one row when the schedule is valid, and
fails with SQLSTATE CE422, its message naming the field (schedule or
timezone), the rule and the value, when it is not; it reads nothing but the
time zone names and writes nothing.
"""

from __future__ import annotations

# Parameters: the schedule, then the IANA time zone (NULL: UTC).
CHECK_SCHEDULE = "select ceaseless.check_schedule(%s, %s)"
