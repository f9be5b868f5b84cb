"""History at scale: what the hot statements and the operator views read, with an empty history
and with a large one.

A database that has run for months holds `jobs` finished jobs, as many agent runs and three
audit rows per job (written as a bulk load, their triggers off: the history is the subject, not
how it came to be), beside the same live work as an empty one: 1,000 pending jobs and 10
routines. Each probe runs twice to warm its plan and is then read with EXPLAIN (ANALYZE,
BUFFERS) through auto_explain, nested statements included; the report gives each probe's buffers
on both databases. A probe whose buffers grow with the history reads the history.

`python -m bench.history` runs it alone (10,000,000 jobs: about ten minutes of loading).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated

import psycopg
import typer

from bench.plans import explained, shared_buffers
from bench.server import DatabaseUrlOpt, Server, provision

FIRST_ROUTINE = "select id from ceaseless.routines where name = 'r1'"
# The statements a listener runs on every job or tick, and what operators read.
PROBES: dict[str, str] = {
    "claim_jobs (10, start)": "select * from ceaseless.claim_jobs('w1', 10, p_start => true)",
    "expire_leases": "select ceaseless.expire_leases(now())",
    "due_schedules": "select * from ceaseless.due_schedules(now(), 100)",
    "metrics_snapshot": "select * from ceaseless.metrics_snapshot(now())",
    "cancel_orphaned_topology_jobs": "select ceaseless.cancel_orphaned_topology_jobs(now())",
    "run_routine": f"select ceaseless.run_routine(({FIRST_ROUTINE}))",
    "explain_routine": f"select * from ceaseless.explain_routine(({FIRST_ROUTINE}))",
    "explain_job": "select * from ceaseless.explain_job((select min(id::text)::uuid "
    "from ceaseless.job_queue))",
    **{
        f"view {view}": f"select * from ceaseless.{view}"
        for view in (
            "job_queue",
            "stuck_jobs",
            "governor_usage",
            "owner_budget_usage",
            "routine_status",
            "listener_status",
            "notification_status",
            "loop_status",
            "repo_status",
            "forge_pipeline",
            "retention_status",
        )
    },
}


def _load(conn: psycopg.Connection, jobs: int) -> None:
    conn.execute(
        "insert into ceaseless.agents (name, adapter, max_concurrent) values ('noop', 'noop', 100)"
    )
    conn.execute(
        "insert into ceaseless.routines (name, user_id, trigger_type, trigger_config, "
        "  action_type, action_config, agent, max_concurrent) "
        "select 'r' || g, 'owner' || g, 'manual', '{}', 'lightweight', '{\"prompt\": \"p\"}', "
        "  'noop', 5 from generate_series(1, 10) g"
    )
    if jobs:
        with conn.transaction():
            conn.execute("set local session_replication_role = replica")
            conn.execute(
                "insert into ceaseless.job (kind, state, agent, prompt, attempts, user_id, "
                "  fairness_key, created_at, updated_at, run_after, finished_at) "
                "select 'task', 'delivered', 'noop', 'history', 1, 'owner' || (g %% 100), "
                "  'owner' || (g %% 100), t, t, t, t "
                "from generate_series(1, %s) g, "
                "  lateral (select now() - interval '20 days' + g * interval '100 microseconds' "
                "           as t) x",
                (jobs,),
            )
            conn.execute(
                "insert into ceaseless.agent_run (job_id, agent, adapter, worker, attempt, "
                "  outcome, started_at, finished_at, ended_by) "
                "select id, 'noop', 'noop', 'old', 1, 'succeeded', created_at, finished_at, "
                "  'agent' from ceaseless.job"
            )
            conn.execute(
                "insert into ceaseless.audit_log (at, actor, entity, entity_id, action, "
                "  old_state, new_state) "
                "select j.created_at, current_user, 'job', j.id, s.action, s.old, s.new "
                "from ceaseless.job j, (values ('insert', null, 'pending'), "
                "  ('state', 'pending', 'running'), ('state', 'running', 'delivered')) "
                "  s (action, old, new)"
            )
    conn.execute(
        "insert into ceaseless.job (kind, agent, prompt) "
        "select 'task', 'noop', 'live' from generate_series(1, 1000)"
    )
    for table in ("job", "agent_run", "audit_log", "routines"):
        conn.execute(f"vacuum analyze ceaseless.{table}")


def _buffers(conn: psycopg.Connection, query: str) -> int:
    """The top statement's shared buffers (hit and read), its nested statements included."""
    with explained(conn) as plans:
        conn.execute(query).fetchall()
    return shared_buffers(plans[-1]["Plan"])


def probe(server: Server, jobs: int) -> dict[str, int]:
    """Each probe's buffers on a database with `jobs` finished jobs of history."""
    with server.database(migrated=True) as url, psycopg.connect(url, autocommit=True) as conn:
        _load(conn, jobs)
        found: dict[str, int] = {}
        for name, query in PROBES.items():
            run: Callable[[], int] = lambda q=query: _buffers(conn, q)  # noqa: E731
            run()
            run()
            found[name] = run()
        return found


def main(
    jobs: Annotated[int, typer.Option(help="Finished jobs of history (with their runs).")] = (
        10_000_000
    ),
    database_url: DatabaseUrlOpt = None,
) -> None:
    """Buffers of the hot statements and the operator views, without and with a large history."""
    with provision(database_url) as server:
        empty = probe(server, 0)
        full = probe(server, jobs)
    typer.echo(
        f"buffers, no history / {jobs:,} finished jobs, {jobs:,} agent runs, "
        f"{3 * jobs:,} audit rows"
    )
    for name in PROBES:
        typer.echo(f"{name:>32}: {empty[name]:>8,} / {full[name]:>8,}")


if __name__ == "__main__":
    typer.run(main)
