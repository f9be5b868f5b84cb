"""Time partitions or batched DELETE for the history: measured on `audit_log`.

`audit_log` is where partitions would be simplest (append-only, no key references it), so it
is where their price and their gain show plainest. Two databases of one server: one as shipped,
one whose `audit_log` is replaced by a copy partitioned by day (`PARTITIONED`: the same columns,
defaults, checks, indexes and triggers, the key widened to (id, at) as PostgreSQL requires, one
partition a day from 40 days back to 5 ahead). Three measurements, each on both:

- prune: `history` audit rows 36 to 38 days old, written as a bulk load; then removed as
  retention removes them (`_delete_audit_rows` in batches of 1,000) from the plain table, and
  by dropping the partitions that hold them from the other: seconds and WAL bytes;
- drain: `jobs` noop jobs drained by one listener (three audit rows a job), the two databases
  in turn for `runs` rounds: jobs/s;
- read: one job's audit rows by entity, as the run observer, `run_events` and the dashboard
  read them, beside `history` rows of the last 35 days: buffers and planning time.

`python -m bench.partitions` runs it alone; docs/performance.md ("History that stays cheap")
reports it.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import Annotated, Any

import psycopg
import typer

from bench import ours
from bench.server import DatabaseUrlOpt, Server, provision

PARTITIONED = """
set local search_path = ceaseless, pg_catalog;
alter table audit_log rename to audit_log_plain;
create sequence audit_log_by_day_seq;
-- Its columns, defaults and checks; not its identity, which PostgreSQL 15 does not allow on a
-- partitioned table (a sequence's default stands in), and its key widened by the partition key.
create table audit_log (
    like audit_log_plain including defaults including constraints,
    primary key (id, at)
) partition by range (at);
alter table audit_log alter column id set default nextval('audit_log_by_day_seq');
create index on audit_log (entity, entity_id, id) where entity_id is not null;
create index on audit_log (entity, entity_key, id) where entity_key is not null;
create index on audit_log ((detail ->> 'loop_id'), id) where entity = 'topology_run';
do $$
declare
    d date;
begin
    for d in select generate_series(current_date - 40, current_date + 5, interval '1 day')::date
    loop
        execute format('create table audit_log_%s partition of audit_log '
                       'for values from (%L) to (%L)', to_char(d, 'YYYYMMDD'), d, d + 1);
    end loop;
end;
$$;
create trigger audit_log_actor_is_session before insert on audit_log for each row
    when (new.actor is distinct from session_user::text
          or new.worker is not null
             and not pg_has_role(session_user, 'ceaseless_listener', 'usage'))
    execute function _tg_audit_log_actor();
create trigger audit_log_append_only before delete or update on audit_log for each row
    execute function _tg_audit_log_append_only();
grant select on audit_log to ceaseless_operator;
grant select, insert on audit_log to ceaseless_listener;
grant usage on sequence audit_log_by_day_seq to ceaseless_listener;
"""

# `count` audit rows of made-up jobs, from `days_ago` days ago spread over `days` days.
OLD_ROWS = """
insert into ceaseless.audit_log (at, actor, entity, entity_id, action, old_state, new_state)
select now() - make_interval(days => %(days_ago)s)
         + g * (make_interval(days => %(days)s) / %(count)s), current_user, 'job',
       gen_random_uuid(), 'state', 'pending', 'running'
from generate_series(1, %(count)s) g
"""


class PartitionedServer(Server):
    """The same server, its template's audit_log partitioned by day."""

    def migrated_template(self) -> str:
        if self.template is not None:
            return self.template
        template = super().migrated_template()
        with psycopg.connect(self.url_for(template)) as conn:
            conn.execute(PARTITIONED)
        return template


@dataclass(frozen=True)
class Pruned:
    rows: int
    seconds: float
    wal_bytes: int


@dataclass(frozen=True)
class Read:
    buffers: int
    planning_ms: float


def _old_rows(conn: psycopg.Connection[Any], count: int, days_ago: int, days: int) -> None:
    with conn.transaction():
        # The history is the subject, not how it came to be: no triggers.
        conn.execute("set local session_replication_role = replica")
        conn.execute(OLD_ROWS, {"count": count, "days_ago": days_ago, "days": days})
    conn.execute("vacuum analyze ceaseless.audit_log")


def _value(conn: psycopg.Connection[Any], query: str, params: tuple[Any, ...] = ()) -> Any:
    row = conn.execute(query, params).fetchone()
    assert row is not None
    return row[0]


def _wal_position(conn: psycopg.Connection[Any]) -> int:
    """Bytes of WAL so far: this session's own where the server counts WAL per backend
    (PostgreSQL 18), so that other sessions' writes (the test run's other workers, or
    full-page images after their checkpoints) do not count; else the server's position,
    which a benchmark run has to itself."""
    if conn.info.server_version >= 180000:
        # The session's counts reach the shared statistics when it goes idle, at most once
        # a second unless forced; a cached snapshot would hide the new ones.
        conn.execute("select pg_stat_force_next_flush()")
        conn.execute("select pg_stat_clear_snapshot()")
        return int(_value(conn, "select wal_bytes from pg_stat_get_backend_wal(pg_backend_pid())"))
    return int(_value(conn, "select pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')"))


def prune(server: Server, history: int) -> Pruned:
    """Remove `history` audit rows past 30 days: batched DELETE, or dropped partitions."""
    partitioned = isinstance(server, PartitionedServer)
    with server.database(migrated=True) as url, psycopg.connect(url, autocommit=True) as conn:
        _old_rows(conn, history, days_ago=38, days=2)
        conn.execute(
            "update ceaseless.settings set value = '86400' "
            "where key = 'audit_log_min_retention_secs'"
        )
        wal = _wal_position(conn)
        started = time.perf_counter()
        removed = 0
        if partitioned:
            old = conn.execute(
                "select c.relname from pg_inherits i join pg_class c on c.oid = i.inhrelid "
                "where i.inhparent = 'ceaseless.audit_log'::regclass "
                "and c.relname < 'audit_log_' || to_char(current_date - 30, 'YYYYMMDD')"
            ).fetchall()
            removed = _value(
                conn,
                "select count(*) from ceaseless.audit_log where at < now() - interval '30 days'",
            )
            started = time.perf_counter()
            for (name,) in old:
                conn.execute(f"drop table ceaseless.{name}")
        else:
            while batch := _value(
                conn,
                "select ceaseless._delete_audit_rows(now() - interval '30 days', 1000)",
            ):
                removed += batch
        seconds = time.perf_counter() - started
        return Pruned(removed, seconds, _wal_position(conn) - wal)


def read(server: Server, history: int) -> Read:
    """One job's audit rows by entity, beside `history` older rows of the last 35 days (a
    retention period's worth)."""
    with server.database(migrated=True) as url, psycopg.connect(url, autocommit=True) as conn:
        _old_rows(conn, history, days_ago=35, days=35)
        ours.noop_lane(conn)
        job = _value(
            conn,
            "insert into ceaseless.job (kind, agent, prompt) values ('task', 'noop', 'x') "
            "returning id",
        )
        [(plan,)] = conn.execute(
            "explain (analyze, buffers, format json) select * from ceaseless.audit_log "
            "where entity = 'job' and entity_id = %s order by id",
            (job,),
        ).fetchall()
        top = plan[0]
        node = top["Plan"]
        return Read(
            int(node.get("Shared Hit Blocks", 0)) + int(node.get("Shared Read Blocks", 0)),
            float(top["Planning Time"]),
        )


def main(
    history: Annotated[int, typer.Option(help="Audit rows of history.")] = 1_000_000,
    jobs: Annotated[int, typer.Option(help="Noop jobs per drain.")] = 20_000,
    runs: Annotated[int, typer.Option(help="Drains of each table, in turn.")] = 3,
    database_url: DatabaseUrlOpt = None,
) -> None:
    """Batched DELETE against daily partitions for audit_log: prune, drain, read."""
    with provision(database_url) as plain:
        partitioned = PartitionedServer(plain.url)
        try:
            servers: dict[str, Server] = {"plain": plain, "by day": partitioned}
            drained: dict[str, list[float]] = {name: [] for name in servers}
            for _ in range(runs):
                for name, server in servers.items():
                    measured = ours.throughput(server, jobs, 1)
                    assert measured.lost == 0 and measured.duplicated == 0
                    drained[name].append(measured.values["jobs_per_s"])
            for name, server in servers.items():
                gone = prune(server, history)
                seen = read(server, history)
                rates = drained[name]
                typer.echo(
                    f"{name:>7}: prune {gone.rows:,} rows in {gone.seconds:.2f} s, "
                    f"WAL {gone.wal_bytes / 1e6:.1f} MB; drain {statistics.median(rates):,.0f} "
                    f"jobs/s [{min(rates):,.0f}-{max(rates):,.0f}]; one job's audit rows "
                    f"{seen.buffers} buffers, planned in {seen.planning_ms:.1f} ms"
                )
        finally:
            partitioned.close()


if __name__ == "__main__":
    typer.run(main)
