"""The PostgreSQL every system is measured on, and a fresh database per run.

Default: a dedicated embedded PostgreSQL 18 in a temporary home, started for the
run and stopped after, so results do not depend on what else a machine's server
holds. `--database-url` measures on an existing server instead. Either way every
system (ours and the peers) gets its own empty database on that one server, with
the server's settings untouched.

`--reset-setting FUNCTION:SETTING` measures ceaseless without one of the planner
settings its functions carry: the migrated template (which every run of ours
clones) gets `ALTER FUNCTION … RESET`, so the function runs with the server's
value. That is how docs/performance.md, "Planner settings on functions", judges
whether a setting still pays.
"""

from __future__ import annotations

import shutil
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import psycopg
import typer
from psycopg import sql
from psycopg.conninfo import make_conninfo

from listener.database.embedded import EmbeddedServer
from listener.database.migrate import migrate

# Every scenario's command measures on a fresh embedded server unless given one.
DatabaseUrlOpt = Annotated[
    str | None,
    typer.Option(help="Measure on this server (default: a fresh embedded PostgreSQL 18)."),
]


@dataclass(frozen=True)
class Reset:
    """A planner setting to take off one of ceaseless's functions for a run."""

    function: str
    setting: str

    @classmethod
    def parse(cls, text: str) -> Reset:
        function, _, setting = text.partition(":")
        if not function or not setting:
            raise ValueError(
                f"expected FUNCTION:SETTING, e.g. claim_jobs:enable_seqscan; got {text!r}"
            )
        return cls(function, setting)

    def apply(self, conn: psycopg.Connection) -> None:
        # By name alone: every function that carries a setting has one signature.
        conn.execute(
            sql.SQL("alter function ceaseless.{} reset {}").format(
                sql.Identifier(self.function), sql.Identifier(self.setting)
            )
        )


@dataclass
class Server:
    url: str
    template: str | None = None
    resets: tuple[Reset, ...] = ()

    def url_for(self, database: str) -> str:
        return make_conninfo(self.url, dbname=database)

    def settings(self) -> dict[str, str]:
        names = [
            "server_version",
            "shared_buffers",
            "fsync",
            "synchronous_commit",
            "max_connections",
            "work_mem",
            "wal_level",
        ]
        with psycopg.connect(self.url, autocommit=True) as conn:
            rows = conn.execute(
                "select name, setting || coalesce(' ' || unit, '') from pg_settings "
                "where name = any(%s)",
                (names,),
            ).fetchall()
        return dict(rows)

    def migrated_template(self) -> str:
        """A database with ceaseless migrated, cloned for each of our runs."""
        if self.template is None:
            self.template = f"bench_tpl_{uuid.uuid4().hex[:8]}"
            with psycopg.connect(self.url, autocommit=True) as conn:
                conn.execute(f'create database "{self.template}"')
            migrate(self.url_for(self.template))
            if self.resets:
                with psycopg.connect(self.url_for(self.template), autocommit=True) as conn:
                    for reset in self.resets:
                        reset.apply(conn)
        return self.template

    @contextmanager
    def database(self, *, migrated: bool) -> Iterator[str]:
        name = f"bench_{uuid.uuid4().hex[:10]}"
        template = f' template "{self.migrated_template()}"' if migrated else ""
        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute(f'create database "{name}"{template}')
        try:
            yield self.url_for(name)
        finally:
            with psycopg.connect(self.url, autocommit=True) as conn:
                conn.execute(f'drop database if exists "{name}" with (force)')

    def close(self) -> None:
        if self.template:
            with psycopg.connect(self.url, autocommit=True) as conn:
                conn.execute(f'drop database if exists "{self.template}" with (force)')


@contextmanager
def provision(database_url: str | None, resets: tuple[Reset, ...] = ()) -> Iterator[Server]:
    if database_url:
        server = Server(make_conninfo(database_url, dbname="postgres"), resets=resets)
        try:
            yield server
        finally:
            server.close()
        return
    home = Path(tempfile.mkdtemp(prefix="ceaseless-bench-"))
    home.chmod(0o755)  # as root the server's own OS user must reach it
    embedded = EmbeddedServer(home)
    server = Server(make_conninfo(embedded.start(), dbname="postgres"), resets=resets)
    try:
        yield server
    finally:
        server.close()
        embedded.stop()
        shutil.rmtree(home, ignore_errors=True)
