"""The table-health scenario of the benchmark, small: both variants drain every job, the
defaults variant really runs without ceaseless's storage parameters, and the numbers are there."""

from __future__ import annotations

import psycopg
import pytest

from bench import table_health
from bench.server import Server

# A scenario of the benchmark, run small: what it checks is the harness and the
# listener, not the server version, so it runs on the embedded server only (.ci/run).
pytestmark = pytest.mark.slow


def test_the_defaults_variant_resets_every_parameter_db_0091_sets(server_url: str) -> None:
    server = Server(server_url)
    try:
        with server.database(migrated=True) as url, psycopg.connect(url, autocommit=True) as conn:
            shipped = conn.execute(
                "select count(*) from pg_class where relnamespace = 'ceaseless'::regnamespace "
                "and relkind = 'r' "
                "and reloptions is not null"
            ).fetchone()
            table_health._reset(conn)
            left = conn.execute(
                "select array_agg(relname) from pg_class "
                "where relnamespace = 'ceaseless'::regnamespace and relkind = 'r' "
                "and reloptions is not null"
            ).fetchone()
    finally:
        server.close()
    assert shipped is not None and shipped[0] >= 9
    assert left == (None,)


def test_both_variants_drain_every_job_and_report_the_hot_tables(server_url: str) -> None:
    server = Server(server_url)
    try:
        for variant in table_health.VARIANTS:
            seconds, health = table_health.drain(server, variant, 200)
            assert seconds > 0
            assert set(health) == set(table_health.TABLES)
            assert health["job"].live + health["job"].dead >= 200
    finally:
        server.close()
