"""The migration runner against a real server: what it applies, records and refuses."""

from __future__ import annotations

import hashlib
import re
import shutil
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg.conninfo import make_conninfo

from listener.migrate import (
    MigrateReport,
    MigrationError,
    function_files,
    migrate,
    migrations,
    sql_root,
)

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


@pytest.fixture
def empty_url(server_url: str) -> Iterator[str]:
    """A database of its own with nothing in it: never migrated."""
    name = f"ceaseless_empty_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(server_url, autocommit=True) as conn:
        conn.execute(f'create database "{name}" template template0')
    try:
        yield make_conninfo(server_url, dbname=name)
    finally:
        with psycopg.connect(server_url, autocommit=True) as conn:
            conn.execute(f'drop database if exists "{name}" with (force)')


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """A copy of the repository's db/ and functions/ that a test may change."""
    for area in ("db", "functions"):
        shutil.copytree(sql_root() / area, tmp_path / area)
    return tmp_path


def test_migrating_twice_applies_each_migration_once(empty_url: str) -> None:
    everything = [m.path.name for m in migrations()]

    first = migrate(empty_url)
    second = migrate(empty_url)

    assert _names(first) == everything
    assert second.applied == []
    assert second.functions == function_files()


def test_reapplying_functions_changes_nothing(db_url: str) -> None:
    before = catalog(db_url)

    report = migrate(db_url)

    assert report.applied == []
    assert report.functions == function_files()
    assert catalog(db_url) == before


def test_dry_run_on_an_empty_database_lists_every_migration_and_changes_nothing(
    empty_url: str,
) -> None:
    report = migrate(empty_url, dry_run=True)

    assert _names(report) == [m.path.name for m in migrations()]
    assert _scalar(empty_url, "select to_regnamespace('ceaseless') is null") is True


def test_dry_run_on_a_migrated_database_lists_nothing(db_url: str) -> None:
    before = catalog(db_url)

    assert migrate(db_url, dry_run=True).applied == []
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
    empty_url: str, root: Path
) -> None:
    (root / "functions" / "1_x.sql").write_text("select 1;\n")

    with pytest.raises(MigrationError, match=re.escape("1_x.sql")):
        migrate(empty_url, root=root)
    assert _scalar(empty_url, "select to_regclass('ceaseless.job') is null") is True


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


def test_concurrent_migrations_apply_each_migration_once(empty_url: str) -> None:
    start = threading.Barrier(2)
    reports: list[MigrateReport] = []
    errors: list[BaseException] = []

    def run() -> None:
        start.wait()
        try:
            reports.append(migrate(empty_url))
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
        empty_url, "select count(*) = count(distinct version) from ceaseless.schema_migrations"
    )
    assert _scalar(empty_url, "select count(*) from ceaseless.schema_migrations") == len(
        migrations()
    )


def test_migrations_are_recorded_with_version_name_checksum_and_time(empty_url: str) -> None:
    with psycopg.connect(empty_url, autocommit=True) as conn:
        started = conn.execute("select now()").fetchone()
        migrate(empty_url)
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
