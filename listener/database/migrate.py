"""The migration runner: forward-only files in db/, idempotent files in functions/.

Called by `ceaseless migrate`, `ceaseless up` (on every start, so on a running
system) and the test fixtures.

Guarantees:
- each `db/NNNN_name.sql` is applied once, in its own transaction, and recorded
  in ceaseless.schema_migrations with its checksum; a migration that builds
  indexes CONCURRENTLY (and does nothing else) runs each statement on its own,
  outside a transaction, so a large hot table keeps taking writes while its
  index is built; an index a killed build left invalid is dropped and built
  again by the next run;
- an applied migration whose file has since changed is a hard error naming the
  file: the database would no longer match what the repository says it is;
- the `functions/*.sql` files are re-applied, in name order, in one
  transaction whose search_path is `ceaseless, pg_catalog, pg_temp` (what they
  create goes to schema ceaseless, and a table in the migrating session's own
  path shadows nothing they name; the files set none themselves), only when
  their checksum (names and contents of all of them, in order) differs from
  the one recorded in ceaseless.schema_functions, or when a db/ migration
  (other than indexes built concurrently) was applied since they last were;
  the checksum is recorded in the same transaction, so a failed re-apply is
  retried by the next run;
- on an unchanged schema, migrate only reads its two bookkeeping tables: it
  takes no lock stronger than ACCESS SHARE on any table of schema ceaseless,
  so `ceaseless up` on a busy database stalls nothing;
- every transaction runs with a lock_timeout: DDL that waits behind a long
  transaction gives up after a few seconds instead of queueing in front of
  every claim, and is retried with backoff; after the last attempt the error
  names the file and the statement;
- two runners at once are safe: a session advisory lock serialises them, and the
  second finds nothing left to apply.
"""

from __future__ import annotations

import contextlib
import hashlib
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import pglast
import pglast.ast
import pglast.parser
import psycopg
import psycopg.errors
from psycopg import sql

import listener
from listener.database import connections

MIGRATION_NAME = re.compile(r"^(?P<version>\d{4})_(?P<name>[a-z0-9]+(?:_[a-z0-9]+)*)\.sql$")
FUNCTION_NAME = re.compile(r"^\d{2}_[a-z0-9]+(?:_[a-z0-9]+)*\.sql$")
# Any fixed number: it only has to be the same for every ceaseless runner.
_LOCK_KEY = 0x6365_6173_656C

# PostgreSQL grants table locks in queue order: DDL waiting for a table that a
# long transaction holds makes every later claim, insert and update of that
# table wait behind it, even those that do not conflict with the long
# transaction. So DDL may wait this long at most (per attempt), and is then
# retried after LOCK_BACKOFF_SECS, doubled each time, LOCK_ATTEMPTS times in all.
LOCK_TIMEOUT_SECS = 3.0
LOCK_ATTEMPTS = 4
LOCK_BACKOFF_SECS = 1.0
# How often a runner asks again for the lock another runner holds.
_LOCK_POLL_SECS = 0.2


# What a role without superuser needs, said beside "permission denied": on a
# managed server that error is most often the first thing migrate says.
PRIVILEGES_HINT = (
    "The migrating role needs CONNECT and CREATE on the database and CREATEROLE; on PostgreSQL "
    "16 and later also the ADMIN option on ceaseless_listener, ceaseless_operator and "
    "ceaseless_user when they exist already; and once installed, it must own schema ceaseless. "
    'See docs/security.md, "Installing on a managed PostgreSQL".'
)


class MigrationError(RuntimeError):
    """A migration could not be applied; the message names the file."""


class MigrationLockTimeout(MigrationError):
    """A statement of a migration or function file waited for a lock longer than the timeout."""


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
    """What a run applied (or, on a dry run, would apply).

    `functions` lists the functions/ files re-applied, in order, and is empty
    when they were skipped; `functions_skipped` is True exactly then: the
    files were unchanged since they were last applied and no migration ran
    but indexes built concurrently.
    """

    applied: list[Migration]
    functions: list[Path]
    functions_skipped: bool = False


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


def functions_checksum(files: Sequence[Path]) -> str:
    """One checksum of the whole functions/ set: a renamed, added or removed file changes it."""
    digest = hashlib.sha256()
    for path in files:
        digest.update(path.name.encode() + b"\0")
        digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


def _bootstrap(conn: psycopg.Connection) -> None:
    # The runner's own bookkeeping, so it lives here rather than in a
    # migration: it must exist before the first migration can be recorded.
    # Checked first, without locking anything: COMMENT ON (and CREATE … IF
    # NOT EXISTS on some objects) would lock the table on every start.
    row = conn.execute(
        "select to_regclass('ceaseless.schema_migrations') is not null"
        " and to_regclass('ceaseless.schema_functions') is not null"
    ).fetchone()
    if row is not None and row[0]:
        return
    with conn.transaction():
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
        conn.execute(
            """
            create table if not exists ceaseless.schema_functions (
                singleton boolean primary key default true,
                checksum text not null,
                -- How many migrations were applied when the functions were:
                -- a migration applied by a run whose functions then failed
                -- must still get them re-applied, though they are unchanged.
                migration_count integer not null,
                files text[] not null,
                applied_at timestamptz not null default now(),

                -- One row: two would leave "which set is applied" ambiguous.
                constraint one_row check (singleton)
            )
            """
        )
        conn.execute(
            "comment on table ceaseless.schema_functions is "
            "'The functions/ set last applied by `ceaseless migrate`: its checksum, so an "
            "unchanged set is not re-applied. Delete the row to force a re-apply.'"
        )


def _applied(conn: psycopg.Connection) -> dict[int, tuple[str, str]]:
    rows = conn.execute("select version, name, checksum from ceaseless.schema_migrations")
    return {version: (name, checksum) for version, name, checksum in rows}


def _functions_current(conn: psycopg.Connection, checksum: str) -> bool:
    """Whether these functions/ were applied after every migration applied so far."""
    row = conn.execute(
        """
        select f.checksum = %s
               and f.migration_count = (select count(*) from ceaseless.schema_migrations)
        from ceaseless.schema_functions f
        """,
        (checksum,),
    ).fetchone()
    return row is not None and bool(row[0])


def _first_line(statement: str) -> str:
    """The statement's first line of SQL, to name it in an error."""
    lines = (line.strip() for line in statement.splitlines())
    return next((line for line in lines if line and not line.startswith("--")), "")


def _concurrent_indexes(path: Path) -> list[tuple[str, str]] | None:
    """The (index name, statement) of each CREATE INDEX CONCURRENTLY of a migration that builds
    indexes concurrently, or None for a migration that runs in a transaction.

    PostgreSQL refuses CONCURRENTLY inside a transaction, so such a migration
    is applied statement by statement; anything else in it would then be
    applied half-way on a failure, so it is refused. IF NOT EXISTS makes a
    statement safe to run again after a run died between two of them.
    """
    text = path.read_text()
    try:
        parsed = pglast.parse_sql(text)
    except pglast.parser.ParseError:
        return None  # _execute_file reports it with its line
    if not any(getattr(raw.stmt, "concurrent", False) for raw in parsed):
        return None
    found = []
    for raw in parsed:
        stmt = raw.stmt
        location = raw.stmt_location or 0
        statement = text.encode()[location : location + (raw.stmt_len or len(text.encode()))]
        statement_text = statement.decode()
        if not (isinstance(stmt, pglast.ast.IndexStmt) and stmt.concurrent and stmt.if_not_exists):
            raise MigrationError(
                f"{path.name}: a migration that builds indexes concurrently runs each statement "
                "on its own, outside a transaction, so it holds only CREATE INDEX CONCURRENTLY IF "
                f"NOT EXISTS statements; found: {_first_line(statement_text)}"
            )
        found.append((str(stmt.idxname), statement_text))
    return found


def _build_indexes(conn: psycopg.Connection, path: Path, indexes: list[tuple[str, str]]) -> None:
    """Build each index concurrently, in schema ceaseless; first drop one that a killed build
    left invalid (IF NOT EXISTS would otherwise keep it, unused, for ever).

    No lock_timeout: CONCURRENTLY waits for older transactions to end without
    blocking any reader or writer of the table meanwhile.
    """
    conn.execute("set search_path = ceaseless, pg_catalog, public")
    try:
        for name, statement in indexes:
            invalid = conn.execute(
                "select not i.indisvalid from pg_index i join pg_class c on c.oid = i.indexrelid "
                "where c.relname = %s and c.relnamespace = 'ceaseless'::regnamespace",
                (name,),
            ).fetchone()
            try:
                if invalid is not None and invalid[0]:
                    conn.execute(
                        sql.SQL("drop index concurrently if exists ceaseless.{}").format(
                            sql.Identifier(name)
                        )
                    )
                conn.execute(statement.encode())
            except psycopg.Error as exc:
                raise MigrationError(f"{path.name}, index {name}: {exc}") from exc
    finally:
        conn.execute("reset search_path")


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
            where = f"{path.name}, statement at line {line}"
            if isinstance(exc, psycopg.errors.LockNotAvailable | psycopg.errors.DeadlockDetected):
                raise MigrationLockTimeout(f"{where} ({_first_line(statement)}): {exc}") from exc
            if isinstance(exc, psycopg.errors.InsufficientPrivilege):
                raise MigrationError(f"{where}: {exc}\n{PRIVILEGES_HINT}") from exc
            raise MigrationError(f"{where}: {exc}") from exc


def _transaction(
    conn: psycopg.Connection,
    work: Callable[[], None],
    *,
    lock_timeout: float,
    attempts: int,
    backoff: float,
) -> None:
    """Run `work` in one transaction under lock_timeout, retrying it when a lock was not granted.

    Retrying the whole transaction is safe: a lock timeout rolls all of it back.
    """
    for attempt in range(1, attempts + 1):
        try:
            with conn.transaction():
                conn.execute(
                    "select set_config('lock_timeout', %s, true)",
                    (f"{max(round(lock_timeout * 1000), 1)}ms",),
                )
                work()
            return
        except MigrationLockTimeout as exc:
            if attempt == attempts:
                raise MigrationLockTimeout(
                    f"{exc} — gave up after {attempts} attempts of {lock_timeout:g} s each: "
                    "another transaction holds a lock on that table. Find it with "
                    "`select pid, xact_start, state, query from pg_stat_activity "
                    "order by xact_start limit 5`, let it finish (or end it), then migrate again."
                ) from exc
            time.sleep(backoff * 2 ** (attempt - 1))


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


def _try_runner_lock(conn: psycopg.Connection) -> bool:
    row = conn.execute("select pg_try_advisory_lock(%s)", (_LOCK_KEY,)).fetchone()
    return bool(row and row[0])


def migrate(
    url: str,
    *,
    dry_run: bool = False,
    root: Path | None = None,
    reapply_functions: bool = False,
    lock_timeout: float = LOCK_TIMEOUT_SECS,
    attempts: int = LOCK_ATTEMPTS,
    backoff: float = LOCK_BACKOFF_SECS,
) -> MigrateReport:
    """Apply pending migrations, then re-apply functions/ if they or the schema changed.

    `reapply_functions` re-applies them regardless (say, after an operator
    dropped a function by hand); `lock_timeout`, `attempts` and `backoff`
    bound how long DDL may wait for a table lock, and how often it retries.
    """
    with connections.connect(url, application_name="ceaseless migrate") as conn:
        # A second runner waits for the first, asking again and again rather
        # than waiting inside one statement: a waiting statement is an open
        # transaction, which an index the first runner builds CONCURRENTLY
        # would wait for in turn (a deadlock).
        while not _try_runner_lock(conn):
            time.sleep(_LOCK_POLL_SECS)
        try:
            # Every file is checked before anything is applied, so a bad
            # functions/ name cannot leave a migrated database without functions.
            files = function_files(root)
            checksum = functions_checksum(files)
            if dry_run:
                has_tables = conn.execute(
                    "select to_regclass('ceaseless.schema_migrations') is not null,"
                    " to_regclass('ceaseless.schema_functions') is not null"
                ).fetchone() or (False, False)
                todo = pending(conn, root) if has_tables[0] else migrations(root)
                unchanged = bool(
                    has_tables[1]
                    and not todo
                    and not reapply_functions
                    and _functions_current(conn, checksum)
                )
                return MigrateReport(todo, [] if unchanged else files, unchanged)
            _bootstrap(conn)
            todo = pending(conn, root)
            for migration in todo:
                indexes = _concurrent_indexes(migration.path)
                if indexes is not None:
                    _build_indexes(conn, migration.path, indexes)
                    # An index changes nothing the functions were written
                    # against: when they were current, they stay so, and are
                    # not re-applied (which would lock the hot tables).
                    with conn.transaction():
                        current = _functions_current(conn, checksum)
                        conn.execute(
                            "insert into ceaseless.schema_migrations (version, name, checksum) "
                            "values (%s, %s, %s)",
                            (migration.version, migration.name, migration.checksum),
                        )
                        if current:
                            conn.execute(
                                "update ceaseless.schema_functions "
                                "set migration_count = migration_count + 1"
                            )
                    continue

                def apply(migration: Migration = migration) -> None:
                    _execute_file(conn, migration.path)
                    conn.execute(
                        "insert into ceaseless.schema_migrations (version, name, checksum) "
                        "values (%s, %s, %s)",
                        (migration.version, migration.name, migration.checksum),
                    )

                _transaction(
                    conn, apply, lock_timeout=lock_timeout, attempts=attempts, backoff=backoff
                )
            # Re-applying is not free even when nothing changed: CREATE OR
            # REPLACE TRIGGER locks its table against writes and CREATE OR
            # REPLACE VIEW locks the view against reads until commit.
            if not reapply_functions and _functions_current(conn, checksum):
                return MigrateReport(todo, [], functions_skipped=True)

            def apply_functions() -> None:
                conn.execute("set local search_path = ceaseless, pg_catalog, pg_temp")
                for path in files:
                    _execute_file(conn, path)
                conn.execute(
                    """
                    insert into ceaseless.schema_functions
                        (singleton, checksum, migration_count, files, applied_at)
                    values (true, %s, (select count(*) from ceaseless.schema_migrations), %s,
                            now())
                    on conflict (singleton) do update
                    set checksum = excluded.checksum,
                        migration_count = excluded.migration_count,
                        files = excluded.files,
                        applied_at = excluded.applied_at
                    """,
                    (checksum, [path.name for path in files]),
                )

            _transaction(
                conn, apply_functions, lock_timeout=lock_timeout, attempts=attempts, backoff=backoff
            )
            return MigrateReport(todo, files)
        finally:
            # Never let a failed unlock (a dead connection) hide the real
            # error; the lock dies with the session anyway.
            with contextlib.suppress(psycopg.Error):
                conn.execute("select pg_advisory_unlock(%s)", (_LOCK_KEY,))
