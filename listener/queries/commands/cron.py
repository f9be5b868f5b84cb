"""`ceaseless cron preview` and `… backfill`: the check of a schedule, and the firing of its
missed slots, as the database makes them.

check_schedule answers whether a schedule and time zone are ones a routine or a
loop may store, by the same rule the validation triggers apply, so whoever shows
a schedule before it is stored refuses exactly what an INSERT would.

backfill_routine and backfill_loop fire the slots of a routine's or loop's
schedule between two times that never fired, the database enumerating them (the
gate's own reading of the schedule) and judging each fire as cron's.

Guarantees: check_schedule reads nothing but the time zone names and writes
nothing; it raises the database's CE422, its message naming the field (schedule
or timezone), the rule and the value, when the schedule is refused. A backfill is
one statement: every slot it fires, and its audit row, commit together.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum

from psycopg import sql

from listener.queries.commands import Connection, Listing, listing


def check_schedule(conn: Connection, schedule: str, timezone: str | None) -> None:
    """Return when the database would store `schedule` read in `timezone` (None: UTC)."""
    conn.execute("select ceaseless.check_schedule(%s, %s)", (schedule, timezone))


class Backfilled(StrEnum):
    """What a backfill fires: the function of each kind (backfill_routine, backfill_loop)."""

    ROUTINE = "routine"
    LOOP = "loop"


def backfill(
    conn: Connection,
    kind: Backfilled,
    row_id: str,
    start: datetime,
    end: datetime,
    most: int | None,
) -> Listing:
    """backfill_routine / backfill_loop over [start, end): one row per slot, in time order.

    `most` None leaves p_max to the function's default.
    """
    function = sql.Identifier("ceaseless", f"backfill_{kind.value}")
    limit = sql.SQL(", p_max => %(most)s") if most is not None else sql.SQL("")
    return listing(
        conn,
        sql.SQL(
            "select slot_at as slot, outcome, run_id as run, status, skip_reason as reason "
            "from {}(%(id)s, %(start)s, %(end)s{}) "
            "order by slot_at"
        ).format(function, limit),
        {"id": row_id, "start": start, "end": end, "most": most},
    )
