"""The migration runner: forward-only files in db/, idempotent files in functions/.

Called by `ceaseless migrate`, `ceaseless up` and the test fixtures.

Guarantees:
- each `db/NNNN_name.sql` is applied once, in its own transaction, and recorded
  in ceaseless.schema_migrations with its checksum;
- an applied migration whose file has since changed is a hard error naming the
  file: the database would no longer match what the repository says it is;
- every `functions/*.sql` file is re-applied on every run, in name order, in one
  transaction, so functions, triggers and views always match the repository;
- two runners at once are safe: a session advisory lock serialises them, and the
  second finds nothing left to apply.
"""

from __future__ import annotations

import contextlib
import hashlib
import re
from dataclasses import dataclass
from pathlib import Path

import pglast
import pglast.parser
import psycopg

import listener

MIGRATION_NAME = re.compile(r"^(?P<version>\d{4})_(?P<name>[a-z0-9]+(?:_[a-z0-9]+)*)\.sql$")
FUNCTION_NAME = re.compile(r"^\d{2}_[a-z0-9]+(?:_[a-z0-9]+)*\.sql$")
# Any fixed number: it only has to be the same for every ceaseless runner.
_LOCK_KEY = 0x6365_6173_656C


class MigrationError(RuntimeError):
    """A migration could not be applied; the message names the file."""


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    path: Path

    @property
    def checksum(self) -> str:
        return hashlib.sha256(self.path.read_bytes()).hexdigest()


@dataclass(frozen=True)
class MigrateReport:
    applied: list[Migration]
    functions: list[Path]


def sql_root() -> Path:
    """The directory holding db/ and functions/: inside the installed package, or the checkout."""
    package = Path(listener.__file__).resolve().parent
    packaged = package / "sql"
    return packaged if (packaged / "db").is_dir() else package.parent


def migrations(root: Path | None = None) -> list[Migration]:
    found: list[Migration] = []
    for path in sorted(((root or sql_root()) / "db").glob("*.sql")):
        match = MIGRATION_NAME.match(path.name)
        if match is None:
            raise MigrationError(
                f"{path.name}: migration files are named NNNN_snake_case.sql (0002_routines.sql)"
            )
        found.append(Migration(int(match["version"]), match["name"], path))
    by_version: dict[int, Migration] = {}
    for migration in found:
        if (other := by_version.get(migration.version)) is not None:
            raise MigrationError(
                f"{other.path.name} and {migration.path.name} share version "
                f"{migration.version:04d}; renumber the newer one"
            )
        by_version[migration.version] = migration
    return found


def function_files(root: Path | None = None) -> list[Path]:
    files = sorted(((root or sql_root()) / "functions").glob("*.sql"))
    for path in files:
        if not FUNCTION_NAME.match(path.name):
            raise MigrationError(f"{path.name}: function files are named NN_area.sql")
    return files


def _bootstrap(conn: psycopg.Connection) -> None:
    # The runner's own bookkeeping, so it lives here rather than in a
    # migration: it must exist before the first migration can be recorded.
    conn.execute("create schema if not exists ceaseless")
    conn.execute(
        """
        create table if not exists ceaseless.schema_migrations (
            version integer primary key,
            name text not null,
            checksum text not null,
            applied_at timestamptz not null default now()
        )
        """
    )
    conn.execute(
        "comment on table ceaseless.schema_migrations is "
        "'Migrations applied by `ceaseless migrate`, with the checksum of the file as applied.'"
    )


def _applied(conn: psycopg.Connection) -> dict[int, tuple[str, str]]:
    rows = conn.execute("select version, name, checksum from ceaseless.schema_migrations")
    return {version: (name, checksum) for version, name, checksum in rows}


def _execute_file(conn: psycopg.Connection, path: Path) -> None:
    """Run a file statement by statement, so an error names the statement's line."""
    text = path.read_text()
    try:
        pieces = pglast.split(text, with_parser=True, only_slices=True)
    except pglast.parser.ParseError as exc:
        # The parser reports a byte offset into the UTF-8 text.
        message, offset = exc.args[0], int(exc.args[1]) if len(exc.args) > 1 else 0
        line = text.encode()[:offset].count(b"\n") + 1
        raise MigrationError(f"{path.name}, line {line}: {message}") from exc
    for piece in pieces:
        start = piece.start
        statement = text[piece]
        try:
            conn.execute(statement.encode())
        except psycopg.Error as exc:
            line = text.count("\n", 0, start) + 1 + (len(statement) - len(statement.lstrip("\n")))
            raise MigrationError(f"{path.name}, statement at line {line}: {exc}") from exc


def pending(conn: psycopg.Connection, root: Path | None = None) -> list[Migration]:
    """Migrations not yet applied; raises if an applied one has changed on disk."""
    applied = _applied(conn)
    on_disk = migrations(root)
    names = {m.version: m.path.name for m in on_disk}
    for version, (name, _) in sorted(applied.items()):
        expected = f"{version:04d}_{name}.sql"
        if names.get(version) != expected:
            raise MigrationError(
                f"{expected} was applied to this database but is missing from db/ "
                f"(found {names.get(version, 'nothing')} for version {version:04d}). "
                "Migrations are forward-only: restore the file."
            )
    todo = []
    for migration in on_disk:
        recorded = applied.get(migration.version)
        if recorded is None:
            todo.append(migration)
        elif recorded[1] != migration.checksum:
            raise MigrationError(
                f"{migration.path.name} was changed after it was applied (checksum "
                f"{recorded[1][:12]} in the database, {migration.checksum[:12]} on disk). "
                "Migrations are forward-only: restore the file and add a new migration."
            )
    return todo


def migrate(url: str, *, dry_run: bool = False, root: Path | None = None) -> MigrateReport:
    """Apply pending migrations, then re-apply every functions/ file."""
    with psycopg.connect(url, autocommit=True, application_name="ceaseless migrate") as conn:
        conn.execute("select pg_advisory_lock(%s)", (_LOCK_KEY,))
        try:
            # Every file is checked before anything is applied, so a bad
            # functions/ name cannot leave a migrated database without functions.
            files = function_files(root)
            if dry_run:
                has_table = conn.execute(
                    "select to_regclass('ceaseless.schema_migrations') is not null"
                ).fetchone()
                todo = pending(conn, root) if has_table and has_table[0] else migrations(root)
                return MigrateReport(todo, files)
            _bootstrap(conn)
            todo = pending(conn, root)
            for migration in todo:
                with conn.transaction():
                    _execute_file(conn, migration.path)
                    conn.execute(
                        "insert into ceaseless.schema_migrations (version, name, checksum) "
                        "values (%s, %s, %s)",
                        (migration.version, migration.name, migration.checksum),
                    )
            with conn.transaction():
                for path in files:
                    _execute_file(conn, path)
            return MigrateReport(todo, files)
        finally:
            # Never let a failed unlock (a dead connection) hide the real
            # error; the lock dies with the session anyway.
            with contextlib.suppress(psycopg.Error):
                conn.execute("select pg_advisory_unlock(%s)", (_LOCK_KEY,))
