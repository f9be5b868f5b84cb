"""The migration runner against a real server: what it applies, records and refuses."""

from __future__ import annotations

import contextlib
import hashlib
import re
import shutil
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import psycopg.errors
import pytest
from pglast import ast, parse_plpgsql, parse_sql
from pglast.parser import ParseError
from psycopg import sql

from listener.database.migrate import (
    MigrateReport,
    MigrationError,
    function_files,
    functions_checksum,
    migrate,
    migrations,
    sql_root,
)
from tests.factories import make_agent, make_job

# A description of everything migrate creates, without oids: equal snapshots
# mean an equal schema even when views were dropped and recreated.
_CATALOG = """
select 'function', p.oid::regprocedure::text, pg_get_functiondef(p.oid)
from pg_proc p
where p.pronamespace = 'ceaseless'::regnamespace
union all
select 'view', c.relname, pg_get_viewdef(c.oid)
from pg_class c
where c.relnamespace = 'ceaseless'::regnamespace and c.relkind in ('v', 'm')
union all
select 'column', format('%s.%s', c.relname, a.attname),
       format('%s %s not null=%s default=%s', a.attnum, format_type(a.atttypid, a.atttypmod),
              a.attnotnull, pg_get_expr(d.adbin, d.adrelid))
from pg_class c
join pg_attribute a on a.attrelid = c.oid and a.attnum > 0 and not a.attisdropped
left join pg_attrdef d on d.adrelid = c.oid and d.adnum = a.attnum
where c.relnamespace = 'ceaseless'::regnamespace
union all
select 'constraint', format('%s.%s', c.conrelid::regclass, c.conname), pg_get_constraintdef(c.oid)
from pg_constraint c
where c.connamespace = 'ceaseless'::regnamespace
union all
select 'index', i.indexrelid::regclass::text, pg_get_indexdef(i.indexrelid)
from pg_index i
join pg_class c on c.oid = i.indrelid
where c.relnamespace = 'ceaseless'::regnamespace
union all
select 'trigger', format('%s.%s', t.tgrelid::regclass, t.tgname), pg_get_triggerdef(t.oid)
from pg_trigger t
join pg_class c on c.oid = t.tgrelid
where c.relnamespace = 'ceaseless'::regnamespace and not t.tgisinternal
union all
select 'comment', pg_describe_object(d.classoid, d.objoid, d.objsubid), d.description
from pg_description d
where pg_describe_object(d.classoid, d.objoid, d.objsubid) like '%ceaseless.%'
order by 1, 2
"""


def catalog(url: str) -> list[tuple[str, str, str]]:
    with psycopg.connect(url) as conn:
        return conn.execute(_CATALOG).fetchall()


def _scalar(url: str, query: str) -> object:
    with psycopg.connect(url) as conn:
        row = conn.execute(query).fetchone()
    assert row is not None
    return row[0]


def _names(report: MigrateReport) -> list[str]:
    return [m.path.name for m in report.applied]


def _recorded_checksum(url: str) -> object:
    return _scalar(url, "select checksum from ceaseless.schema_functions")


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """A copy of the repository's db/ and functions/ that a test may change."""
    for area in ("db", "functions"):
        shutil.copytree(sql_root() / area, tmp_path / area)
    return tmp_path


def test_migrating_twice_applies_each_migration_once(empty_db_url: str) -> None:
    everything = [m.path.name for m in migrations()]

    first = migrate(empty_db_url)
    second = migrate(empty_db_url)

    assert _names(first) == everything
    assert (first.functions, first.functions_skipped) == (function_files(), False)
    assert second.applied == []
    assert (second.functions, second.functions_skipped) == ([], True)


def test_reapplying_functions_changes_nothing(db_url: str) -> None:
    # Also proves every view of functions/ still applies, as CREATE OR REPLACE,
    # over the one already in a migrated database.
    before = catalog(db_url)

    report = migrate(db_url, reapply_functions=True)

    assert report.applied == []
    assert report.functions == function_files()
    assert catalog(db_url) == before


def test_dry_run_on_an_empty_database_lists_every_migration_and_changes_nothing(
    empty_db_url: str,
) -> None:
    report = migrate(empty_db_url, dry_run=True)

    assert _names(report) == [m.path.name for m in migrations()]
    assert _scalar(empty_db_url, "select to_regnamespace('ceaseless') is null") is True


def test_dry_run_on_a_migrated_database_lists_nothing(db_url: str) -> None:
    before = catalog(db_url)

    report = migrate(db_url, dry_run=True)

    assert (report.applied, report.functions, report.functions_skipped) == ([], [], True)
    assert catalog(db_url) == before


def test_dry_run_lists_only_pending_migrations_and_applies_none(db_url: str, root: Path) -> None:
    (root / "db" / "9999_later.sql").write_text("create table ceaseless.later (id integer);\n")

    assert _names(migrate(db_url, dry_run=True, root=root)) == ["9999_later.sql"]
    assert _scalar(db_url, "select to_regclass('ceaseless.later') is null") is True


@pytest.mark.parametrize("dry_run", [False, True], ids=["migrate", "dry_run"])
def test_applied_migration_changed_on_disk_is_an_error_naming_the_file(
    db_url: str, root: Path, dry_run: bool
) -> None:
    changed = migrations(root)[0].path
    changed.write_text(changed.read_text() + "\n-- an afterthought\n")

    with pytest.raises(MigrationError, match=re.escape(changed.name)):
        migrate(db_url, dry_run=dry_run, root=root)


@pytest.mark.parametrize("name", ["2_x.sql", "0002-Bad.sql", "0002_Bad.sql", "00002_x.sql"])
def test_migration_file_with_a_bad_name_is_an_error_naming_it(
    db_url: str, root: Path, name: str
) -> None:
    (root / "db" / name).write_text("create table ceaseless.misnamed (id integer);\n")

    with pytest.raises(MigrationError, match=re.escape(name)):
        migrate(db_url, root=root)
    assert _scalar(db_url, "select to_regclass('ceaseless.misnamed') is null") is True


def test_function_file_with_a_bad_name_is_refused_before_any_migration_is_applied(
    empty_db_url: str, root: Path
) -> None:
    (root / "functions" / "1_x.sql").write_text("select 1;\n")

    with pytest.raises(MigrationError, match=re.escape("1_x.sql")):
        migrate(empty_db_url, root=root)
    assert _scalar(empty_db_url, "select to_regclass('ceaseless.job') is null") is True


def test_two_migrations_with_one_version_is_an_error_naming_both_files(
    db_url: str, root: Path
) -> None:
    (root / "db" / "0001_again.sql").write_text("select 1;\n")

    with pytest.raises(MigrationError) as error:
        migrate(db_url, root=root)
    assert "0001_again.sql" in str(error.value)
    assert "0001_foundation.sql" in str(error.value)


def test_failing_migration_rolls_back_entirely_and_names_its_file_and_line(
    db_url: str, root: Path
) -> None:
    (root / "db" / "9998_broken.sql").write_text(
        "-- Fails half-way — after creating a table.\n"
        "create table ceaseless.half_done (id integer);\n"
        "insert into ceaseless.half_done values (1);\n"
        "\n"
        "/* the failing statement */\n"
        "select\n"
        "    1 / 0;\n"
    )
    (root / "db" / "9999_after.sql").write_text("create table ceaseless.after (id integer);\n")

    with pytest.raises(MigrationError, match=r"9998_broken\.sql, statement at line 6\b"):
        migrate(db_url, root=root)

    assert _scalar(db_url, "select to_regclass('ceaseless.half_done') is null") is True
    assert _scalar(db_url, "select to_regclass('ceaseless.after') is null") is True
    assert _scalar(db_url, "select max(version) from ceaseless.schema_migrations") == max(
        m.version for m in migrations()
    )


def test_migration_with_a_syntax_error_is_an_error_naming_its_file_and_line(
    db_url: str, root: Path
) -> None:
    (root / "db" / "9999_typo.sql").write_text(
        "create table ceaseless.typo_ok (id integer);\ncreate tabel ceaseless.typo (id integer);\n"
    )

    with pytest.raises(MigrationError, match=r"9999_typo\.sql.*line 2\b"):
        migrate(db_url, root=root)
    assert _scalar(db_url, "select to_regclass('ceaseless.typo_ok') is null") is True


def test_failing_function_file_rolls_back_every_function_file(db_url: str, root: Path) -> None:
    helpers = root / "functions" / "00_helpers.sql"
    helpers.write_text(
        helpers.read_text() + "\ncomment on function _actor() is 'changed by a failed run';\n"
    )
    (root / "functions" / "99_broken.sql").write_text("select 1;\n\nselect 1 / 0;\n")
    before = catalog(db_url)

    with pytest.raises(MigrationError, match=r"99_broken\.sql, statement at line 3\b"):
        migrate(db_url, root=root)

    assert catalog(db_url) == before
    assert _recorded_checksum(db_url) == functions_checksum(function_files())


def test_concurrent_migrations_apply_each_migration_once(empty_db_url: str) -> None:
    start = threading.Barrier(2)
    reports: list[MigrateReport] = []
    errors: list[BaseException] = []

    def run() -> None:
        start.wait()
        try:
            reports.append(migrate(empty_db_url))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert errors == []
    assert sorted(len(r.applied) for r in reports) == [0, len(migrations())]
    assert _scalar(
        empty_db_url, "select count(*) = count(distinct version) from ceaseless.schema_migrations"
    )
    assert _scalar(empty_db_url, "select count(*) from ceaseless.schema_migrations") == len(
        migrations()
    )


def test_migrations_are_recorded_with_version_name_checksum_and_time(empty_db_url: str) -> None:
    with psycopg.connect(empty_db_url, autocommit=True) as conn:
        started = conn.execute("select now()").fetchone()
        migrate(empty_db_url)
        rows = conn.execute(
            "select version, name, checksum, applied_at between %s and now() "
            "from ceaseless.schema_migrations order by version",
            started,
        ).fetchall()

    assert rows == [
        (m.version, m.name, hashlib.sha256(m.path.read_bytes()).hexdigest(), True)
        for m in migrations()
    ]


def test_applied_migration_missing_from_disk_is_an_error_naming_it(db_url: str, root: Path) -> None:
    (root / "db" / "0001_foundation.sql").rename(root / "db" / "0001_renamed.sql")

    with pytest.raises(MigrationError, match=re.escape("0001_foundation.sql")):
        migrate(db_url, root=root)


# --- functions/ are re-applied only when they changed -------------------------

_OPERATORS_ACTOR = (
    "create or replace function ceaseless._actor() returns text language sql stable "
    "as $$ select 'the operator''s own' $$"
)


def _replace_a_function_as_an_operator(url: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(_OPERATORS_ACTOR)


def _actor(url: str) -> object:
    return _scalar(url, "select ceaseless._actor()")


def _touch_functions(root: Path) -> None:
    """Change the functions/ set without changing what it creates."""
    views = root / "functions" / "90_views.sql"
    views.write_text(views.read_text() + "\n-- A comment added later.\n")


def test_unchanged_functions_are_not_reapplied(db_url: str) -> None:
    _replace_a_function_as_an_operator(db_url)

    report = migrate(db_url)

    assert _actor(db_url) == "the operator's own"
    assert (report.applied, report.functions, report.functions_skipped) == ([], [], True)


def test_changed_functions_are_reapplied_and_their_checksum_recorded(
    db_url: str, root: Path
) -> None:
    _replace_a_function_as_an_operator(db_url)
    _touch_functions(root)

    report = migrate(db_url, root=root)

    assert (report.functions, report.functions_skipped) == (function_files(root), False)
    assert _actor(db_url) != "the operator's own"
    assert _recorded_checksum(db_url) == functions_checksum(function_files(root))
    assert migrate(db_url, root=root).functions_skipped


def test_reapply_functions_reapplies_unchanged_ones(db_url: str) -> None:
    _replace_a_function_as_an_operator(db_url)

    report = migrate(db_url, reapply_functions=True)

    assert (report.functions, report.functions_skipped) == (function_files(), False)
    assert _actor(db_url) != "the operator's own"


def test_a_new_migration_reapplies_unchanged_functions(db_url: str, root: Path) -> None:
    # A migration may recreate a table, and with it lose the table's triggers.
    _replace_a_function_as_an_operator(db_url)
    (root / "db" / "9999_later.sql").write_text("create table ceaseless.later (id integer);\n")

    report = migrate(db_url, root=root)

    assert _names(report) == ["9999_later.sql"]
    assert report.functions == function_files(root)
    assert _actor(db_url) != "the operator's own"


def test_functions_a_failed_run_left_behind_a_new_migration_are_applied_by_the_next_run(
    db_url: str, root: Path
) -> None:
    (root / "db" / "9999_later.sql").write_text("create table ceaseless.later (id integer);\n")
    broken = root / "functions" / "99_broken.sql"
    broken.write_text("select 1 / 0;\n")
    with pytest.raises(MigrationError, match=re.escape("99_broken.sql")):
        migrate(db_url, root=root)
    # Back to the very set recorded before the migration: only the migration
    # since says the functions must be re-applied.
    broken.unlink()
    _replace_a_function_as_an_operator(db_url)

    report = migrate(db_url, root=root)

    assert report.applied == []
    assert report.functions == function_files(root)
    assert _actor(db_url) != "the operator's own"


def test_dry_run_lists_changed_functions_and_applies_none(db_url: str, root: Path) -> None:
    _replace_a_function_as_an_operator(db_url)
    _touch_functions(root)

    report = migrate(db_url, dry_run=True, root=root)

    assert (report.functions, report.functions_skipped) == (function_files(root), False)
    assert _actor(db_url) == "the operator's own"


def test_functions_checksum_changes_with_any_file_name_or_content(root: Path) -> None:
    functions = root / "functions"
    seen = {functions_checksum(function_files(root))}

    _touch_functions(root)
    seen.add(functions_checksum(function_files(root)))
    (functions / "99_extra.sql").write_text("select 1;\n")
    seen.add(functions_checksum(function_files(root)))
    (functions / "99_extra.sql").rename(functions / "98_extra.sql")
    seen.add(functions_checksum(function_files(root)))

    assert len(seen) == 4
    assert functions_checksum(function_files(root)) in seen


# --- on a running system -------------------------------------------------------


def test_migrate_on_an_unchanged_schema_takes_no_lock_stronger_than_access_share(
    db_url: str,
) -> None:
    # EXCLUSIVE admits only ACCESS SHARE beside it. While the holder keeps it on
    # every table and view of the schema, a migrate that wants anything
    # stronger (DDL, COMMENT ON, a write to a bookkeeping table) waits, and
    # does not finish in time.
    outcome: list[object] = []

    def run() -> None:
        try:
            outcome.append(migrate(db_url))
        except BaseException as exc:
            outcome.append(exc)

    thread = threading.Thread(target=run)
    with psycopg.connect(db_url) as holder:
        names = holder.execute(
            "select c.relname from pg_class c where c.relnamespace = 'ceaseless'::regnamespace "
            "and c.relkind in ('r', 'p', 'v', 'm') order by 1"
        ).fetchall()
        holder.execute(
            sql.SQL("lock table {} in exclusive mode").format(
                sql.SQL(", ").join(sql.Identifier("ceaseless", name) for (name,) in names)
            )
        )
        thread.start()
        thread.join(10)
        finished = not thread.is_alive()
        holder.rollback()
    thread.join(60)

    assert finished, "migrate waited for a lock a reader's ACCESS SHARE would not need"
    assert len(outcome) == 1 and isinstance(outcome[0], MigrateReport), outcome
    assert outcome[0].functions_skipped


def _wait_for(predicate: Callable[[], bool], timeout: float, message: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(message)
        time.sleep(0.01)


def _migrate_waits_for_a_lock(conn: psycopg.Connection) -> bool:
    row = conn.execute(
        "select exists (select from pg_stat_activity where datname = current_database() "
        "and application_name = 'ceaseless migrate' and wait_event_type = 'Lock')"
    ).fetchone()
    return row is not None and bool(row[0])


def test_migrate_queued_for_a_table_lock_holds_up_writers_no_longer_than_its_lock_timeout(
    db_url: str, root: Path
) -> None:
    lock_timeout = 1.0
    _touch_functions(root)
    outcome: list[object] = []

    def run() -> None:
        try:
            outcome.append(
                migrate(db_url, root=root, lock_timeout=lock_timeout, attempts=100, backoff=0.05)
            )
        except BaseException as exc:
            outcome.append(exc)

    thread = threading.Thread(target=run)
    with (
        psycopg.connect(db_url) as long_transaction,
        psycopg.connect(db_url, autocommit=True) as writer,
    ):
        make_agent(writer)
        # Like a claim that has not committed yet: it does not conflict with
        # other writers, but it does with the trigger DDL of functions/.
        long_transaction.execute("lock table ceaseless.job in row exclusive mode")
        thread.start()
        _wait_for(
            lambda: _migrate_waits_for_a_lock(writer), 10, "migrate never waited for job's lock"
        )
        # An enqueue (ROW EXCLUSIVE) queues behind the waiting DDL; without a
        # lock_timeout it would wait as long as the long transaction lasts.
        writer.execute("set statement_timeout = '10s'")
        started = time.monotonic()
        with contextlib.suppress(psycopg.errors.QueryCanceled):
            make_job(writer)
        waited = time.monotonic() - started
        retrying = thread.is_alive()
        long_transaction.rollback()
    thread.join(30)

    # Without the lock_timeout: the whole statement_timeout, 10 s.
    assert waited < lock_timeout + 1.0
    assert retrying, "migrate gave up while the lock was held; it should retry"
    assert len(outcome) == 1 and isinstance(outcome[0], MigrateReport), outcome
    assert outcome[0].functions == function_files(root)
    assert _recorded_checksum(db_url) == functions_checksum(function_files(root))


def test_migrate_that_never_gets_its_table_lock_fails_naming_file_and_statement(
    db_url: str, root: Path
) -> None:
    _touch_functions(root)
    _replace_a_function_as_an_operator(db_url)

    with psycopg.connect(db_url) as long_transaction:
        long_transaction.execute("lock table ceaseless.job in row exclusive mode")
        started = time.monotonic()
        with pytest.raises(
            MigrationError,
            # The first statement of functions/ that needs a lock on job.
            # (Generated by a function, so PostgreSQL's CONTEXT names the trigger
            # on a line of its own.)
            match=r"(?s)02_bounded_json\.sql, statement at line \d+ "
            r"\(select _install_bounded_json\('job', '\{payload\}'\)\).*lock timeout"
            r".*job_bounded_json.*after 3 attempts",
        ):
            migrate(db_url, root=root, lock_timeout=0.2, attempts=3, backoff=0.05)
        took = time.monotonic() - started

    assert took < 3 * 0.2 + 0.05 + 0.1 + 3.0
    # Rolled back whole, checksum included: the next run tries again.
    assert _actor(db_url) == "the operator's own"
    assert _recorded_checksum(db_url) == functions_checksum(function_files())


# --- data lives in db/, and re-applying functions/ never changes it ------------


def test_reapplied_functions_bring_back_no_deleted_setting_or_time_zone(
    db_url: str, root: Path
) -> None:
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("delete from ceaseless.settings")
        conn.execute("delete from ceaseless.timezone_names where name = 'Europe/Berlin'")
    _touch_functions(root)

    report = migrate(db_url, root=root)

    assert report.functions == function_files(root)
    assert _scalar(db_url, "select array_agg(key) from ceaseless.settings") is None
    berlin = "select count(*) from ceaseless.timezone_names where name = 'Europe/Berlin'"
    assert _scalar(db_url, berlin) == 0


def test_seed_migration_fills_settings_and_every_time_zone_the_server_knows(
    conn: psycopg.Connection,
) -> None:
    settings = dict(conn.execute("select key, value from ceaseless.settings").fetchall())
    missing_zones = conn.execute(
        "select count(*) from pg_timezone_names z "
        "where z.name !~ '^(posix/|right/|posixrules$)' "
        "and not exists (select from ceaseless.timezone_names t where t.name = z.name)"
    ).fetchone()

    assert settings["webhook_max_body_bytes"] == 1048576
    assert settings["notification_max_attempts"] == 5
    assert settings["notification_sinks"] == {"default": {"type": "log"}}
    assert missing_zones == (0,)
    assert conn.execute("select count(*) > 300 from ceaseless.timezone_names").fetchone() == (True,)


def test_seed_migration_on_a_database_migrated_before_it_brings_back_no_deleted_setting(
    db_url: str,
) -> None:
    # Such a database had its notification settings from functions/ already.
    (seed,) = [m for m in migrations() if m.name == "seed_data"]
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("delete from ceaseless.schema_migrations where version = %s", (seed.version,))
        conn.execute(
            "delete from ceaseless.settings "
            "where key in ('notification_max_attempts', 'webhook_max_body_bytes')"
        )

    report = migrate(db_url)

    assert _names(report) == [seed.path.name]
    keys = _scalar(db_url, "select array_agg(key order by key) from ceaseless.settings")
    assert isinstance(keys, list)
    assert "notification_max_attempts" not in keys
    assert {"notification_sinks", "webhook_max_body_bytes"} <= set(keys)


def test_time_zone_missing_from_the_table_is_accepted_when_the_server_knows_it(
    conn: psycopg.Connection,
) -> None:
    # As after a tzdata upgrade that added a zone the seed migration never saw.
    conn.execute("delete from ceaseless.timezone_names where name = 'America/Nuuk'")

    def error(zone: str) -> object:
        row = conn.execute("select ceaseless._timezone_error(%s)", (zone,)).fetchone()
        assert row is not None
        return row[0]

    assert error("America/Nuuk") is None
    assert str(error("America/Atlantis")).startswith('unknown time zone "America/Atlantis"')
    assert str(error("posix/Europe/Berlin")).startswith("unknown time zone")


# --- nothing is dropped with CASCADE ---------------------------------------------

_DYNAMIC_SQL = {
    "PLpgSQL_stmt_dynexecute": "query",
    "PLpgSQL_stmt_dynfors": "query",
    "PLpgSQL_stmt_return_query": "dynquery",
    "PLpgSQL_stmt_open": "dynquery",
}


def _walk(tree: Any, key: str | None = None) -> Iterator[tuple[str | None, Any]]:
    yield key, tree
    if isinstance(tree, dict):
        for k, v in tree.items():
            yield from _walk(v, k)
    elif isinstance(tree, list | tuple):
        for v in tree:
            yield from _walk(v, key)


def _cascading(tree: Any) -> bool:
    """Whether a parse tree drops, truncates or alters anything with CASCADE."""
    return any(
        k == "behavior" and isinstance(v, dict) and v.get("name") == "DROP_CASCADE"
        for k, v in _walk(tree)
    )


def _string_constants(tree: Any) -> Iterator[str]:
    for _, node in _walk(tree):
        if isinstance(node, dict) and node.get("@") == "A_Const":
            value = node.get("val")
            if isinstance(value, dict) and value.get("@") == "String":
                yield value["sval"]


def cascades(text: str) -> list[str]:
    """The first line of every statement in `text` that uses CASCADE to drop something.

    Looks into PL/pgSQL bodies too: their static SQL is parsed, and the string
    constants their dynamic SQL is built from are searched for the word.
    """
    found = []
    for raw in parse_sql(text):
        end = raw.stmt_location + raw.stmt_len if raw.stmt_len else len(text)
        statement = text[raw.stmt_location : end].strip()
        trees: list[Any] = [raw.stmt(skip_none=True)]
        dynamic: list[str] = []
        if isinstance(raw.stmt, ast.CreateFunctionStmt):
            language = next(
                (o.arg.sval.lower() for o in raw.stmt.options or () if o.defname == "language"),
                "sql",
            )
            body = next((o.arg for o in raw.stmt.options or () if o.defname == "as"), None)
            if language == "plpgsql":
                for key, node in _walk(parse_plpgsql(statement)):
                    if key == "PLpgSQL_expr" and isinstance(node, dict):
                        query = node["query"]
                        with contextlib.suppress(ParseError):
                            trees.append([s.stmt(skip_none=True) for s in parse_sql(query)])
                        with contextlib.suppress(ParseError):
                            trees.append(
                                [s.stmt(skip_none=True) for s in parse_sql(f"select {query}")]
                            )
                    if key in _DYNAMIC_SQL and isinstance(node, dict) and _DYNAMIC_SQL[key] in node:
                        query = node[_DYNAMIC_SQL[key]]["PLpgSQL_expr"]["query"]
                        with contextlib.suppress(ParseError):
                            dynamic += _string_constants(
                                [s.stmt(skip_none=True) for s in parse_sql(f"select {query}")]
                            )
            elif language == "sql" and body is not None:
                trees.append([s.stmt(skip_none=True) for s in parse_sql(body[0].sval)])
        if any(_cascading(tree) for tree in trees) or any(
            re.search(r"\bcascade\b", constant, re.IGNORECASE) for constant in dynamic
        ):
            found.append(statement.splitlines()[0])
    return found


def test_cascade_check_finds_every_form() -> None:
    found = cascades(
        """
        drop view if exists a cascade;
        drop view if exists b;
        alter table t drop column c cascade;
        truncate t cascade;
        create table x (a int references y on delete cascade);
        create function f() returns void language plpgsql as $$
        begin
            drop table t cascade;
        end $$;
        create function g(p text) returns void language plpgsql as $$
        begin
            execute format('drop table %I cascade', p);
        end $$;
        create function h() returns void language plpgsql as $$
        begin
            drop table t;
        end $$;
        create function k() returns void language sql as 'drop table t cascade';
        """
    )
    assert found == [
        "drop view if exists a cascade",
        "alter table t drop column c cascade",
        "truncate t cascade",
        "create function f() returns void language plpgsql as $$",
        "create function g(p text) returns void language plpgsql as $$",
        "create function k() returns void language sql as 'drop table t cascade'",
    ]


@pytest.mark.parametrize(
    "path",
    [m.path for m in migrations()] + function_files(),
    ids=lambda p: f"{p.parent.name}/{p.name}",
)
def test_nothing_is_dropped_with_cascade(path: Path) -> None:
    # CASCADE silently drops whatever an operator built on ours (a view over
    # job_queue); without it, PostgreSQL refuses and names the dependent object.
    assert cascades(path.read_text()) == [], f"{path.name}: drop without CASCADE"


def test_no_drop_in_functions_names_an_object_that_exists(conn: psycopg.Connection) -> None:
    """A re-apply of functions/ drops nothing it then creates again: what newer code replaced is
    dropped once, by a migration (db/), and a drop left in functions/ names nothing that
    exists."""
    drops = []
    for path in function_files():
        text = path.read_text()
        drops += [(path.name, m) for m in re.findall(r"(?im)^\s*drop\s+[^;]*;", text)]
    existing = []
    for name, statement in drops:
        function = re.match(r"(?is)drop function if exists (.+);", statement.strip())
        trigger = re.match(r"(?is)drop trigger if exists (\w+) on (\w+);", statement.strip())
        if function:
            found = conn.execute(
                "select to_regprocedure('ceaseless.' || %s) is not null", (function[1],)
            ).fetchone()
        elif trigger:
            found = conn.execute(
                "select exists (select from pg_trigger where tgname = %s "
                "and tgrelid = to_regclass('ceaseless.' || %s))",
                (trigger[1], trigger[2]),
            ).fetchone()
        else:
            found = (True,)  # a drop of another kind of object: not expected in functions/
        if found != (False,):
            existing.append((name, statement))
    assert existing == []


# Functions the one trigger layer (functions/31-32_*.sql) replaced; db/0033 drops them.
REPLACED_BY_THE_TRIGGER_LAYER = [
    "unscheduled_cron_routines(uuid[])",
    "unscheduled_cron_loops(uuid[])",
    "due_cron_routines(timestamptz, integer)",
    "due_cron_loops(timestamptz, integer)",
    "fire_cron_routines(uuid[], timestamptz[], integer[], timestamptz)",
    "fire_cron_loops(uuid[], timestamptz[], integer[], timestamptz)",
    "set_next_fires(uuid[], text[], text[], timestamptz[])",
    "set_loop_next_fires(uuid[], text[], text[], timestamptz[])",
    "disable_routine(uuid, text)",
    "disable_loop(uuid, text)",
    "next_cron_fire()",
    "next_cron_loop_fire()",
    "_receive_loop_webhook(ceaseless.loops, bytea, jsonb)",
    "_invalid(text, text, jsonb)",
    "_invalid_loop(text, text, jsonb)",
]


def test_a_database_from_before_the_one_trigger_layer_keeps_none_of_what_it_replaced(
    db_url: str,
) -> None:
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("set search_path = ceaseless, pg_catalog")
        for signature in REPLACED_BY_THE_TRIGGER_LAYER:
            conn.execute(f"create function {signature} returns void language sql as 'select'")
        conn.execute("delete from ceaseless.schema_migrations where name = 'one_trigger_layer'")

    report = migrate(db_url)

    assert _names(report) == ["0033_one_trigger_layer.sql"]
    with psycopg.connect(db_url, autocommit=True) as conn:
        left = [
            signature
            for signature in REPLACED_BY_THE_TRIGGER_LAYER
            if conn.execute(
                "select to_regprocedure('ceaseless.' || %s) is not null", (signature,)
            ).fetchone()
            != (False,)
        ]
    assert left == []


# Functions each folded into one that its callers now share; db/0047 drops them.
WRITTEN_ONCE = [
    "_resume_session_id_ok(text)",
    "_acts_for_job_refs(ceaseless.job)",
    "_is_positive_int_or_null(jsonb)",
    "_invalid_repo(text, text, jsonb)",
    "_remember_fire(text, bigint)",
    "_remember_loop_fire(uuid)",
    "_loop_secret_hex()",
]


def test_a_database_from_before_each_rule_was_written_once_keeps_none_of_the_copies(
    db_url: str,
) -> None:
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("set search_path = ceaseless, pg_catalog")
        for signature in WRITTEN_ONCE:
            conn.execute(f"create function {signature} returns void language sql as 'select'")
        conn.execute("delete from ceaseless.schema_migrations where name = 'rules_written_once'")

    report = migrate(db_url)

    assert _names(report) == ["0047_rules_written_once.sql"]
    with psycopg.connect(db_url, autocommit=True) as conn:
        left = [
            signature
            for signature in WRITTEN_ONCE
            if conn.execute(
                "select to_regprocedure('ceaseless.' || %s) is not null", (signature,)
            ).fetchone()
            != (False,)
        ]
    assert left == []


# -- indexes built concurrently ------------------------------------------------


def _index_valid(url: str, name: str) -> object:
    return _scalar(
        url,
        "select coalesce((select i.indisvalid from pg_index i "
        "join pg_class c on c.oid = i.indexrelid "
        f"where c.relname = '{name}' and c.relnamespace = 'ceaseless'::regnamespace), null)",
    )


def test_an_index_migration_builds_concurrently_while_a_writer_holds_the_table(
    db_url: str, root: Path
) -> None:
    (root / "db" / "9999_later_index.sql").write_text(
        "-- A later index, built while the table is written.\n"
        "create index concurrently if not exists job_later_idx on job (updated_at);\n"
    )
    with psycopg.connect(db_url) as writer:
        # An open transaction that has written to job: a plain CREATE INDEX
        # would wait for it; a concurrent build waits too, but the writer can
        # go on writing meanwhile, which is the point.
        make_agent(writer)
        make_job(writer)
        done = threading.Event()

        def migrate_later() -> None:
            migrate(db_url, root=root)
            done.set()

        thread = threading.Thread(target=migrate_later, daemon=True)
        thread.start()
        time.sleep(0.5)
        # The build is under way, waiting for this transaction: it still writes.
        make_job(writer)
        assert not done.is_set()
        writer.commit()
        thread.join(30)
    assert done.is_set()
    assert _index_valid(db_url, "job_later_idx") is True
    assert _names(migrate(db_url, root=root)) == []


def test_an_index_left_invalid_by_a_killed_build_is_built_again(db_url: str, root: Path) -> None:
    (root / "db" / "9999_later_index.sql").write_text(
        "create index concurrently if not exists job_later_idx on job (updated_at);\n"
    )
    # What a build killed half-way leaves: the index, marked invalid, and the
    # migration not recorded.
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("create index job_later_idx on ceaseless.job (updated_at)")
        conn.execute(
            "update pg_index set indisvalid = false "
            "where indexrelid = 'ceaseless.job_later_idx'::regclass"
        )
    assert _index_valid(db_url, "job_later_idx") is False
    assert _names(migrate(db_url, root=root)) == ["9999_later_index.sql"]
    assert _index_valid(db_url, "job_later_idx") is True


@pytest.mark.parametrize(
    "text",
    [
        "create index concurrently if not exists job_later_idx on job (updated_at);\n"
        "alter table job add column later integer;\n",
        "create index concurrently job_later_idx on job (updated_at);\n",
    ],
    ids=["another statement", "no if not exists"],
)
def test_an_index_migration_holding_anything_else_is_refused_before_it_runs(
    db_url: str, root: Path, text: str
) -> None:
    (root / "db" / "9999_later_index.sql").write_text(text)
    with pytest.raises(MigrationError, match=re.escape("9999_later_index.sql: a migration that")):
        migrate(db_url, root=root)
    assert _index_valid(db_url, "job_later_idx") is None


def test_an_index_migration_leaves_current_functions_unapplied(db_url: str, root: Path) -> None:
    (root / "db" / "9998_later_index.sql").write_text(
        "create index concurrently if not exists job_later_idx on job (updated_at);\n"
    )
    report = migrate(db_url, root=root)
    assert (_names(report), report.functions_skipped) == (["9998_later_index.sql"], True)
    # A later migration of any other kind re-applies them, as before.
    (root / "db" / "9999_later.sql").write_text("create table ceaseless.later (id integer);\n")
    report = migrate(db_url, root=root)
    assert (_names(report), report.functions_skipped) == (["9999_later.sql"], False)
