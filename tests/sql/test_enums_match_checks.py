"""The CHECK IN-lists of db/ and the enums of listener/enums.py say the same thing.

An IN-list is `x IN ('a', …)` or, written as one array constant, `x = ANY ('{a,…}'::text[])`
(db/0098 says why).

The migrations are read with pglast in order, so a later migration that widens
a list (ALTER TABLE … DROP CONSTRAINT, ADD CONSTRAINT) is what counts. Every
IN-list found must be mirrored by an enum or listed in NO_MIRROR_YET, so a new
list is noticed when it is added.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Iterator
from enum import StrEnum
from pathlib import Path

import psycopg
from pglast import ast, parse_sql
from pglast.enums import (
    A_Expr_Kind,
    AlterTableType,
    BoolExprType,
    ConstrType,
    NullTestType,
    ObjectType,
)
from pglast.stream import RawStream

from listener.database.migrate import migrate, migrations, sql_root
from listener.enums import (
    ActionType,
    Adapter,
    ApprovalDecision,
    Billing,
    Fairness,
    Forge,
    HeldReason,
    JobKind,
    JobState,
    LoopOverlapPolicy,
    LoopSkipReason,
    LoopStoppedReason,
    LoopTrigger,
    NodeGate,
    NotificationKind,
    NotificationSource,
    Outcome,
    OverlapPolicy,
    RepeatPolicyKind,
    RoutineRunStatus,
    RunTriggerType,
    Sandbox,
    SkipReason,
    TopologyNodeState,
    TopologyRunStatus,
    TriggerType,
)

Key = tuple[str, str]  # (table, column or expression)

MIRRORED: dict[Key, type[StrEnum]] = {
    ("job", "state"): JobState,
    ("job", "kind"): JobKind,
    ("agents", "fairness"): Fairness,
    ("job", "forge"): Forge,
    ("tracked_repo", "forge"): Forge,
    ("agent_run", "pr_forge"): Forge,
    ("agents", "adapter"): Adapter,
    ("agent_run", "adapter"): Adapter,
    ("agent_run", "billing"): Billing,
    ("agent_run", "outcome"): Outcome,
    ("routines", "trigger_type"): TriggerType,
    ("routine_runs", "trigger_type"): RunTriggerType,
    ("routines", "action_type"): ActionType,
    ("routine_runs", "status"): RoutineRunStatus,
    ("routine_runs", "skip_reason"): SkipReason,
    ("topology_runs", "status"): TopologyRunStatus,
    ("topology_runs", "trigger_type"): LoopTrigger,
    ("topology_runs", "skip_reason"): LoopSkipReason,
    ("topology_nodes", "state"): TopologyNodeState,
    ("topology_nodes", "gate"): NodeGate,
    ("loops", "repeat_policy ->> 'kind'"): RepeatPolicyKind,
    ("loops", "stopped_reason"): LoopStoppedReason,
    ("approvals", "decision"): ApprovalDecision,
    ("notifications", "kind"): NotificationKind,
    ("notifications", "source_table"): NotificationSource,
    ("listener_reports", "sandbox"): Sandbox,
    ("routines", "overlap_policy"): OverlapPolicy,
    ("loops", "overlap_policy"): LoopOverlapPolicy,
    ("held_fires", "policy"): OverlapPolicy,
    ("held_fires", "reason"): HeldReason,
}

# Lists only SQL reads or writes so far. Give one a StrEnum and move it to
# MIRRORED as soon as Python code compares against its values.
NO_MIRROR_YET: set[Key] = {
    ("agent_run", "ended_by"),
    ("webhook_deliveries", "target"),
    ("notifications", "status"),
    ("topology_nodes", "on_expiry"),
}


def _in_list(expr: ast.Node) -> tuple[ast.Node, list[str]] | None:
    """(tested expression, values) of `x IN ('a', …)` or `x = ANY ('{a,…}'::text[])`, also
    under `x IS NULL OR …`."""
    if (
        isinstance(expr, ast.BoolExpr)
        and expr.boolop == BoolExprType.OR_EXPR
        and len(expr.args) == 2
        and isinstance(expr.args[0], ast.NullTest)
        and expr.args[0].nulltesttype == NullTestType.IS_NULL
    ):
        expr = expr.args[1]
    if not (isinstance(expr, ast.A_Expr) and expr.name[0].sval == "="):
        return None
    if expr.kind == A_Expr_Kind.AEXPR_OP_ANY:
        values = _array_literal(expr.rexpr)
        return None if values is None else (expr.lexpr, values)
    if expr.kind == A_Expr_Kind.AEXPR_IN and all(
        isinstance(v, ast.A_Const) and isinstance(v.val, ast.String) for v in expr.rexpr
    ):
        return expr.lexpr, [v.val.sval for v in expr.rexpr]
    return None


def _array_literal(expr: ast.Node) -> list[str] | None:
    """The values of a text array constant of plain words, `'{a,b}'::text[]`."""
    if not (
        isinstance(expr, ast.TypeCast)
        and expr.typeName.names[-1].sval == "text"
        and expr.typeName.arrayBounds
        and isinstance(expr.arg, ast.A_Const)
        and isinstance(expr.arg.val, ast.String)
        and re.fullmatch(r"\{\w+(,\w+)*\}", expr.arg.val.sval)
    ):
        return None
    return expr.arg.val.sval[1:-1].split(",")


def _column_refs(node: ast.Node) -> int:
    count = 0

    def walk(value: object) -> None:
        nonlocal count
        if isinstance(value, ast.ColumnRef):
            count += 1
        elif isinstance(value, ast.Node):
            for name in value:
                walk(getattr(value, name))
        elif isinstance(value, tuple):
            for item in value:
                walk(item)

    walk(node)
    return count


def _checks(table: str, constraint: ast.Constraint) -> Iterator[tuple[str, Key, frozenset[str]]]:
    """(constraint name, key, values) when the constraint is a CHECK IN-list."""
    if constraint.contype != ConstrType.CONSTR_CHECK:
        return
    found = _in_list(constraint.raw_expr)
    if found is None:
        return
    tested, values = found
    column = tested.fields[-1].sval if isinstance(tested, ast.ColumnRef) else None
    # PostgreSQL's name for an unnamed CHECK: <table>_<column>_check when the
    # expression mentions exactly one column, else <table>_check.
    only_column = column if _column_refs(constraint.raw_expr) == 1 else None
    name = constraint.conname or "_".join(p for p in (table, only_column, "check") if p)
    yield name, (table, column or RawStream()(tested)), frozenset(values)


def migration_in_lists(
    root: Path | None = None,
) -> dict[str, dict[str, tuple[Key, frozenset[str]]]]:
    """table → constraint name → (key, values), as the migrations leave them."""
    tables: dict[str, dict[str, tuple[Key, frozenset[str]]]] = {}
    for migration in migrations(root):
        for raw in parse_sql(migration.path.read_text()):
            stmt = raw.stmt
            if isinstance(stmt, ast.CreateStmt):
                table = stmt.relation.relname
                constraints = tables[table] = {}
                for element in stmt.tableElts or ():
                    if isinstance(element, ast.ColumnDef):
                        for c in element.constraints or ():
                            constraints.update((n, (k, v)) for n, k, v in _checks(table, c))
                    elif isinstance(element, ast.Constraint):
                        constraints.update((n, (k, v)) for n, k, v in _checks(table, element))
            elif isinstance(stmt, ast.DropStmt) and stmt.removeType == ObjectType.OBJECT_TABLE:
                for names in stmt.objects:
                    tables.pop(names[-1].sval, None)
            elif isinstance(stmt, ast.AlterTableStmt):
                table = stmt.relation.relname
                constraints = tables.setdefault(table, {})
                for cmd in stmt.cmds:
                    if cmd.subtype == AlterTableType.AT_DropConstraint:
                        constraints.pop(cmd.name, None)
                    elif cmd.subtype == AlterTableType.AT_AddConstraint:
                        constraints.update((n, (k, v)) for n, k, v in _checks(table, cmd.def_))
                    elif cmd.subtype == AlterTableType.AT_AddColumn:
                        for c in cmd.def_.constraints or ():
                            constraints.update((n, (k, v)) for n, k, v in _checks(table, c))
    return tables


def _last_definitions(root: Path | None = None) -> dict[Key, frozenset[str]]:
    """(table, column) → values; a later definition of the same pair replaces an earlier one."""
    return {
        key: values for named in migration_in_lists(root).values() for key, values in named.values()
    }


def in_database(conn: psycopg.Connection) -> dict[tuple[str, str], frozenset[str]]:
    """(table, constraint name) → values of every CHECK IN-list in the database."""
    rows = conn.execute(
        """
        select c.conrelid::regclass::text, c.conname, pg_get_constraintdef(c.oid)
        from pg_constraint c
        where c.connamespace = 'ceaseless'::regnamespace and c.contype = 'c'
        """
    ).fetchall()
    found = {}
    for relation, name, definition in rows:
        stmt = parse_sql(f"alter table t add constraint c {definition}")[0].stmt
        values = _any_array(stmt.cmds[0].def_.raw_expr)
        if values is not None:
            found[(relation.removeprefix("ceaseless."), name)] = values
    return found


def in_migrations(root: Path | None = None) -> dict[tuple[str, str], frozenset[str]]:
    """in_database() as predicted from the migrations alone."""
    return {
        (table, name): values
        for table, named in migration_in_lists(root).items()
        for name, (_, values) in named.items()
        if len(values) > 1  # PostgreSQL stores a one-value list as `x = 'a'`
    }


def test_every_mirrored_check_list_matches_its_enum() -> None:
    found = _last_definitions()
    mismatched = {
        f"{table}.{column} ({enum.__name__})": {
            "only in the CHECK": sorted(found.get((table, column), set()) - set(enum)),
            "only in the enum": sorted(set(enum) - found.get((table, column), set())),
        }
        for (table, column), enum in MIRRORED.items()
        if found.get((table, column)) != set(enum)
    }
    assert mismatched == {}


def test_every_check_list_is_mirrored_or_known_to_have_no_mirror_yet() -> None:
    found = set(_last_definitions())
    assert sorted(found - MIRRORED.keys() - NO_MIRROR_YET) == [], (
        "a new CHECK IN-list: add a StrEnum to listener/enums.py and MIRRORED, or NO_MIRROR_YET"
    )
    assert sorted(NO_MIRROR_YET - found) == [], "NO_MIRROR_YET names a list no migration defines"
    assert sorted(NO_MIRROR_YET & MIRRORED.keys()) == []


def test_no_column_has_two_check_lists() -> None:
    # Two lists on one column allow only the values in both: a widening
    # migration that added its list without dropping the old one.
    keys = [key for named in migration_in_lists().values() for key, _ in named.values()]
    assert sorted({key for key in keys if keys.count(key) > 1}) == []


def test_check_lists_read_from_the_migrations_are_those_in_the_database(
    conn: psycopg.Connection,
) -> None:
    # Guards the reading above: a list changed by means it does not follow
    # (a DO block, a renamed constraint) shows up as a difference here.
    assert in_migrations() == in_database(conn)


def test_a_later_migration_that_widens_a_list_is_what_counts(db_url: str, tmp_path: Path) -> None:
    for area in ("db", "functions"):
        shutil.copytree(sql_root() / area, tmp_path / area)
    widened = [*JobKind, "review"]
    (tmp_path / "db" / "9999_widen_job_kind.sql").write_text(
        "alter table ceaseless.job drop constraint job_kind_check,\n"
        "    add constraint job_kind_check check (kind in ("
        + ", ".join(f"'{kind}'" for kind in widened)
        + "));\n"
        "alter table ceaseless.approvals drop constraint decision_known;\n"
    )
    migrate(db_url, root=tmp_path)

    found = _last_definitions(tmp_path)
    assert found[("job", "kind")] == set(widened)
    assert ("approvals", "decision") not in found
    with psycopg.connect(db_url) as conn:
        assert in_migrations(tmp_path) == in_database(conn)


def _any_array(expr: ast.Node) -> frozenset[str] | None:
    """The values of `x = ANY (ARRAY['a'::text, …])` or `x = ANY ('{a,…}'::text[])`, also
    under `x IS NULL OR …`."""
    if isinstance(expr, ast.BoolExpr) and expr.boolop == BoolExprType.OR_EXPR:
        if len(expr.args) != 2 or not isinstance(expr.args[0], ast.NullTest):
            return None
        expr = expr.args[1]
    if not (isinstance(expr, ast.A_Expr) and expr.kind == A_Expr_Kind.AEXPR_OP_ANY):
        return None
    literal = _array_literal(expr.rexpr)
    if literal is not None:
        return frozenset(literal)
    if not isinstance(expr.rexpr, ast.A_ArrayExpr):
        return None
    values = set()
    for element in expr.rexpr.elements:
        while isinstance(element, ast.TypeCast):
            element = element.arg
        if not (isinstance(element, ast.A_Const) and isinstance(element.val, ast.String)):
            return None
        values.add(element.val.sval)
    return frozenset(values)
