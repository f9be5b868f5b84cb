"""The schema, rendered from the catalog for people: the SQL reference and the schema dump.

`render` writes docs/sql-reference.md from the `COMMENT ON` text of each table, view and
function, with each table's triggers in firing order and each function's parameters and
the file of functions/ that defines it; `schema_dump` writes tests/schema.sql, every
object a fresh install creates. Both are generated (bin/regen-sql-reference) and compared
with a fresh install by tests, so neither can drift from the schema and every schema
change shows in review.

Guarantees: the output depends only on the schema, never on the server's version (15 or
newer), its owner role, the order the catalog returns rows in, or object ids. Both read
the catalog with functions that deparse the same way on every supported version
(pg_get_constraintdef, pg_get_indexdef, pg_get_triggerdef, pg_get_viewdef,
pg_get_function_arguments); what a version adds (PostgreSQL 18's NOT NULL constraint
rows, 17's MAINTAIN privilege held by the owner) is left out or folded into what every
version shows.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pglast
import psycopg
from psycopg.rows import namedtuple_row

SCHEMA = "ceaseless"

# --- shared catalog reads -------------------------------------------------------------------


@dataclass(frozen=True)
class Function:
    oid: int
    name: str
    identity: str  # pg_get_function_identity_arguments: tells overloads apart
    arguments: str  # pg_get_function_arguments: names, types, modes and defaults
    result: str
    input_names: tuple[str, ...]
    comment: str | None


_FUNCTIONS = """
select p.oid::bigint, p.proname, pg_get_function_identity_arguments(p.oid),
       pg_get_function_arguments(p.oid), coalesce(pg_get_function_result(p.oid), ''),
       array(select coalesce(p.proargnames[i], '')
             from generate_series(1, coalesce(cardinality(p.proallargtypes), p.pronargs)) i
             where coalesce(p.proargmodes[i], 'i') in ('i', 'b', 'v')
             order by i),
       obj_description(p.oid, 'pg_proc')
from pg_proc p
where p.pronamespace = %(schema)s::regnamespace
order by p.proname, 3
"""


def _functions(conn: psycopg.Connection) -> list[Function]:
    rows = conn.execute(_FUNCTIONS, {"schema": SCHEMA}).fetchall()
    return [
        Function(oid, name, identity, arguments, result, tuple(names), comment)
        for oid, name, identity, arguments, result, names, comment in rows
    ]


def _split_top_level(text: str) -> list[str]:
    """Split a deparsed argument list at the commas outside parentheses, brackets and quotes."""
    parts: list[str] = []
    depth, start, quote = 0, 0, ""
    for i, ch in enumerate(text):
        if quote:
            if ch == quote:
                quote = ""
        elif ch in "'\"":
            quote = ch
        elif ch in "([":
            depth += 1
        elif ch in ")]":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(text[start:i].strip())
            start = i + 1
    if text[start:].strip():
        parts.append(text[start:].strip())
    return parts


@dataclass(frozen=True)
class Parameter:
    mode: str  # "", "OUT", "INOUT" or "VARIADIC"
    name: str
    type: str
    default: str | None


def parameters(function: Function) -> list[Parameter]:
    """The parameters of a function as declared, in order, with their defaults."""
    found = []
    for entry in _split_top_level(function.arguments):
        mode = ""
        for keyword in ("INOUT", "OUT", "VARIADIC", "IN"):
            if entry.startswith(keyword + " "):
                mode = "" if keyword == "IN" else keyword
                entry = entry.removeprefix(keyword + " ")
                break
        declared, _, default = entry.partition(" DEFAULT ")
        name, _, type_ = declared.partition(" ")
        found.append(Parameter(mode, name.strip('"'), type_, default or None))
    return found


def defining_files(files: Sequence[Path]) -> dict[tuple[str, tuple[str, ...]], str]:
    """Where each function of schema ceaseless is created: (name, input names) → file name.

    A later file wins, as it does when functions/ is applied in file order.
    """
    found: dict[tuple[str, tuple[str, ...]], str] = {}
    inputs = {"FUNC_PARAM_DEFAULT", "FUNC_PARAM_IN", "FUNC_PARAM_INOUT", "FUNC_PARAM_VARIADIC"}
    for path in files:
        for raw in pglast.parse_sql(path.read_text()):
            statement = raw.stmt
            if type(statement).__name__ != "CreateFunctionStmt":
                continue
            # migrate applies functions/ with search_path ceaseless: most names are bare.
            *schema, name = [part.sval for part in statement.funcname]
            if schema not in ([], [SCHEMA]):
                continue
            names = tuple(p.name or "" for p in statement.parameters or () if p.mode.name in inputs)
            found[(name, names)] = path.name
    return found


# --- the SQL reference (docs/sql-reference.md) ----------------------------------------------

_RELATIONS = """
select case c.relkind when 'v' then 'view' else 'table' end, c.relname,
       obj_description(c.oid, 'pg_class')
from pg_class c
where c.relnamespace = %(schema)s::regnamespace and c.relkind in ('r', 'v', 'p')
order by c.relname
"""

# tgtype bits (pg_trigger.h): 1 row, 2 before, 4 insert, 8 delete, 16 update, 32 truncate,
# 64 instead of.
_TRIGGERS = """
select c.relname, t.tgname, (t.tgtype & 1) <> 0, (t.tgtype & 2) <> 0, (t.tgtype & 64) <> 0,
       array_remove(array[case when t.tgtype & 4 <> 0 then 'insert' end,
                          case when t.tgtype & 16 <> 0 then 'update' end,
                          case when t.tgtype & 8 <> 0 then 'delete' end,
                          case when t.tgtype & 32 <> 0 then 'truncate' end], null),
       p.proname, t.tgenabled, t.tgdeferrable,
       array(select a.attname from unnest(t.tgattr) k join pg_attribute a
             on a.attrelid = t.tgrelid and a.attnum = k order by a.attname)
from pg_trigger t
join pg_class c on c.oid = t.tgrelid
join pg_proc p on p.oid = t.tgfoid
where c.relnamespace = %(schema)s::regnamespace and not t.tgisinternal
"""

_TRIGGER_NOTE = (
    "Each table's triggers are listed in the order PostgreSQL fires them for one statement: "
    "statement-level BEFORE, row-level BEFORE (or INSTEAD OF), row-level AFTER, statement-level "
    "AFTER. Within one of these, triggers fire in the alphabetical order of their names "
    "(PostgreSQL fires triggers of the same timing and event in name order), so a trigger's "
    "name decides whether it sees the row before or after a sibling has changed it."
)


@dataclass(frozen=True)
class Trigger:
    table: str
    name: str
    row: bool
    before: bool
    instead: bool
    events: tuple[str, ...]
    function: str
    enabled: str
    deferrable: bool
    columns: tuple[str, ...]

    @property
    def phase(self) -> int:
        """Position of this trigger's group in a statement's firing order."""
        if not self.row:
            return 0 if self.before else 3
        return 1 if self.before or self.instead else 2

    def when(self) -> str:
        timing = "instead of" if self.instead else "before" if self.before else "after"
        events = " or ".join(
            f"update of {', '.join(self.columns)}" if e == "update" and self.columns else e
            for e in self.events
        )
        level = "each row" if self.row else "each statement"
        extra = ""
        if self.deferrable:
            extra = ", deferrable (fires at commit when deferred)"
        if self.enabled == "D":
            extra += ", disabled"
        return f"{timing} {events}, {level}{extra}"


def triggers(conn: psycopg.Connection) -> dict[str, list[Trigger]]:
    """Each table's triggers, in firing order."""
    by_table: dict[str, list[Trigger]] = defaultdict(list)
    for row in conn.execute(_TRIGGERS, {"schema": SCHEMA}).fetchall():
        trigger = Trigger(*row[:5], tuple(row[5]), row[6], row[7], row[8], tuple(row[9]))
        by_table[trigger.table].append(trigger)
    for found in by_table.values():
        found.sort(key=lambda t: (t.phase, t.name))
    return by_table


def _text(comment: str | None) -> str:
    return " ".join((comment or "(no comment)").split())


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _function_files(functions: Iterable[Function]) -> dict[int, str]:
    """Where each function comes from: `functions/FILE`, or, for a function another one
    generates with dynamic SQL (its comment says "generated by NAME"), NAME's file."""
    from listener.database.migrate import function_files

    files = defining_files(function_files())
    by_name = {name: file for (name, _), file in files.items()}
    found = {}
    for function in functions:
        file = files.get((function.name, function.input_names))
        if file is not None:
            found[function.oid] = f"functions/{file}"
            continue
        generator = re.search(r"generated by (\w+)", function.comment or "")
        if generator and generator[1] in by_name:
            found[function.oid] = f"functions/{by_name[generator[1]]} (generated by {generator[1]})"
        else:
            found[function.oid] = "not in functions/"
    return found


def render(conn: psycopg.Connection) -> str:
    relations = conn.execute(_RELATIONS, {"schema": SCHEMA}).fetchall()
    by_table = triggers(conn)
    functions = _functions(conn)
    files = _function_files(functions)
    lines = [
        "# SQL reference",
        "",
        "Generated from the catalog of a fresh install (the `COMMENT ON` text of schema "
        "`ceaseless`, each table's triggers, each function's parameters) by "
        "`bin/regen-sql-reference`; do not edit by hand. `ceaseless docs sql-reference` "
        "renders the same page from the database it is pointed at.",
        "",
        "- [Tables](#tables)",
        "- [Views](#views)",
        "- [Functions](#functions)",
        "",
        "## Tables",
        "",
        "INSERT into these is the API; their constraints are the rules.",
        "",
        _TRIGGER_NOTE,
    ]
    for kind, name, comment in relations:
        if kind != "table":
            continue
        lines += ["", f"### `{name}`", "", _text(comment)]
        if found := by_table.get(name):
            lines += ["", "| fires | trigger | calls |", "|---|---|---|"]
            for trigger in found:
                calls = f"[`{trigger.function}`](#{trigger.function})"
                lines.append(f"| {trigger.when()} | `{trigger.name}` | {calls} |")
    lines += ["", "## Views", "", "The operator's interface: query them in psql."]
    for kind, name, comment in relations:
        if kind == "view":
            lines += ["", f"### `{name}`", "", _text(comment)]
    lines += [
        "",
        "## Functions",
        "",
        "Public functions first; `_`-prefixed ones are internal helpers. Each names the file "
        "of `functions/` that defines it.",
    ]
    ordered = sorted(functions, key=lambda f: (f.name.startswith("_"), f.name, f.identity))
    previous = None
    for function in ordered:
        if function.name != previous:
            lines += ["", f"### `{function.name}`"]
            previous = function.name
        where = files[function.oid]
        names = ", ".join(p.name for p in parameters(function) if p.mode != "OUT")
        signature = f"{function.name}({names})"
        lines += [
            "",
            _text(function.comment),
            "",
            f"`{signature}` → `{function.result}` · {where}",
        ]
        inputs = [p for p in parameters(function) if p.mode != "OUT"]
        if inputs:
            lines += ["", "| parameter | type | default |", "|---|---|---|"]
            for p in inputs:
                mode = f"{p.mode.lower()} " if p.mode else ""
                default = f"`{_cell(p.default)}`" if p.default else ""
                lines.append(f"| {mode}`{p.name}` | `{_cell(p.type)}` | {default} |")
    return "\n".join(lines) + "\n"


# --- the schema dump (tests/schema.sql) ------------------------------------------------------

_DUMP_HEADER = """\
-- The schema a fresh install creates: every role, table, column, constraint, index,
-- trigger, policy, grant, sequence, view and function of schema ceaseless, and every
-- comment. Generated from the catalog by bin/regen-sql-reference; do not edit by hand.
-- tests/sql/test_schema_dump.py compares a fresh install with it, so every schema change
-- shows here in review, as the net effect of db/ and functions/.
--
-- A function's body is not repeated here: it lives once, in the file of functions/ named
-- above it, and its digest (md5 of the source text) stands for it, so a changed body
-- shows as a changed line.
-- Privileges the owning role holds are left out: the owner is whoever ran the migrations.
"""

# The roles the migrations create are those granted the schema: roles are cluster-wide, and
# others on the same server (a test's login roles, another application's) are no part of it.
_SCHEMA_ROLES = """
select x.grantee from pg_namespace n, aclexplode(n.nspacl) x
where n.nspname = %(schema)s and x.grantee <> n.nspowner
"""

_ROLES = f"""
select r.rolname as name, r.rolcanlogin as login, r.rolinherit as inherit,
       r.rolbypassrls as bypassrls, r.rolcreaterole as createrole, r.rolcreatedb as createdb
from pg_roles r where r.oid in ({_SCHEMA_ROLES}) order by 1
"""

_MEMBERSHIPS = f"""
select distinct g.rolname, m.rolname
from pg_auth_members a
join pg_roles g on g.oid = a.roleid
join pg_roles m on m.oid = a.member
where a.roleid in ({_SCHEMA_ROLES}) and a.member in ({_SCHEMA_ROLES})
order by 1, 2
"""

# The grants on an object, one row per grantee and privilege, without the owner's own.
_ACL = """
select coalesce(g.rolname, 'public'), x.privilege_type, x.is_grantable
from aclexplode(%(acl)s::aclitem[]) x
left join pg_roles g on g.oid = x.grantee
where x.grantee <> %(owner)s::oid
order by 1, 2
"""

_SCHEMA = """
select n.nspowner::bigint as owner, n.nspacl::text[] as acl,
       obj_description(n.oid, 'pg_namespace') as comment
from pg_namespace n where n.nspname = %(schema)s
"""

_TABLES = """
select c.oid::bigint as oid, c.relname as name, c.relkind as kind,
       c.relpersistence as persistence, c.relrowsecurity as rls, c.relforcerowsecurity as force_rls,
       c.reloptions as options, c.relowner::bigint as owner, c.relacl::text[] as acl,
       obj_description(c.oid, 'pg_class') as comment, c.relreplident as replica_identity
from pg_class c
where c.relnamespace = %(schema)s::regnamespace and c.relkind in ('r', 'p', 'v', 'S')
order by c.relname
"""

_COLUMNS = """
select a.attname as name, format_type(a.atttypid, a.atttypmod) as type,
       case when a.attcollation <> t.typcollation then quote_ident(co.collname) end as collation,
       pg_get_expr(d.adbin, d.adrelid) as expression, a.attnotnull as not_null,
       a.attidentity as identity, a.attgenerated as generated, a.attacl::text[] as acl,
       col_description(a.attrelid, a.attnum) as comment
from pg_attribute a
join pg_type t on t.oid = a.atttypid
left join pg_collation co on co.oid = a.attcollation
left join pg_attrdef d on d.adrelid = a.attrelid and d.adnum = a.attnum
where a.attrelid = %(oid)s::oid and a.attnum > 0 and not a.attisdropped
order by a.attnum
"""

# Constraint rows of kind 'n' (NOT NULL, PostgreSQL 18) are left out: attnotnull says
# the same on every version.
_CONSTRAINTS = """
select conname, pg_get_constraintdef(oid)
from pg_constraint
where conrelid = %(oid)s::oid and contype in ('p', 'u', 'c', 'f', 'x')
order by conname
"""

# Indexes that back a constraint are the constraint's, shown above.
_INDEXES = """
select pg_get_indexdef(i.indexrelid)
from pg_index i
join pg_class c on c.oid = i.indexrelid
where i.indrelid = %(oid)s::oid
  and not exists (select from pg_constraint k where k.conindid = i.indexrelid
                  and k.conrelid = i.indrelid)
order by c.relname
"""

_TRIGGER_DEFS = """
select pg_get_triggerdef(oid), tgname, tgenabled
from pg_trigger where tgrelid = %(oid)s::oid and not tgisinternal
order by tgname
"""

_POLICIES = """
select policyname as name, permissive, roles::text[] as roles, cmd as command, qual as using,
       with_check as checked
from pg_policies
where schemaname = %(schema)s and tablename = %(table)s
order by policyname
"""

_SEQUENCE = """
select format_type(s.seqtypid, null) as type, s.seqstart as start,
       s.seqincrement as increment, s.seqmin as minvalue, s.seqmax as maxvalue,
       s.seqcache as cache, s.seqcycle as cycle,
       (select format('%%I.%%I.%%I', %(schema)s::text, c.relname, a.attname)
        from pg_depend d
        join pg_class c on c.oid = d.refobjid
        join pg_attribute a on a.attrelid = d.refobjid and a.attnum = d.refobjsubid
        where d.objid = s.seqrelid and d.classid = 'pg_class'::regclass
          and d.refclassid = 'pg_class'::regclass and d.deptype in ('a', 'i')) as owned_by
from pg_sequence s where s.seqrelid = %(oid)s::oid
"""

_FUNCTION_DETAILS = """
select l.lanname as language, p.provolatile as volatility, p.proisstrict as strict,
       p.prosecdef as definer, p.proleakproof as leakproof, p.proparallel as parallel,
       p.procost as cost, p.prorows as rows, p.proretset as returns_set, p.proconfig as config,
       p.proowner::bigint as owner, coalesce(p.proacl, acldefault('f', p.proowner))::text[] as acl,
       md5(p.prosrc) as digest
from pg_proc p join pg_language l on l.oid = p.prolang
where p.oid = %(oid)s::oid
"""

_PRIVILEGE_ORDER = [
    "SELECT",
    "INSERT",
    "UPDATE",
    "DELETE",
    "TRUNCATE",
    "REFERENCES",
    "TRIGGER",
    "USAGE",
    "CREATE",
    "EXECUTE",
    "MAINTAIN",
]


def _rows(conn: psycopg.Connection, query: str, params: dict[str, Any]) -> list[Any]:
    with conn.cursor(row_factory=namedtuple_row) as cursor:
        return cursor.execute(query, params).fetchall()  # type: ignore[call-overload]


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _ident(name: str) -> str:
    if re.fullmatch(r"[a-z_][a-z0-9_]*", name):
        return name
    return '"' + name.replace('"', '""') + '"'


def _grants(
    conn: psycopg.Connection, acl: list[str] | None, owner: int, target: str, columns: str = ""
) -> Iterator[str]:
    """GRANT statements for an ACL: one per set of privileges, naming every grantee that holds
    exactly that set; the owner's own privileges are left out."""
    held: dict[tuple[str, bool], list[str]] = defaultdict(list)
    if acl is not None:
        for grantee, privilege, grantable in conn.execute(_ACL, {"acl": acl, "owner": owner}):
            held[(grantee, grantable)].append(privilege)
    by_privileges: dict[tuple[tuple[str, ...], bool], list[str]] = defaultdict(list)
    for (grantee, grantable), privileges in held.items():
        ordered = tuple(sorted(privileges, key=_PRIVILEGE_ORDER.index))
        by_privileges[(ordered, grantable)].append(grantee)
    for (privileges, grantable), grantees in sorted(by_privileges.items()):
        listed = ", ".join(p.lower() for p in privileges)
        option = " with grant option" if grantable else ""
        to = ", ".join(_ident(g) for g in sorted(grantees))
        yield f"grant {listed}{columns} on {target} to {to}{option};"


def _column_grants(
    conn: psycopg.Connection, columns: list[Any], owner: int, target: str
) -> Iterator[str]:
    """Column privileges: one GRANT per privilege set, naming its columns in table order."""
    by_acl: dict[tuple[str, ...], list[str]] = defaultdict(list)
    for column in columns:
        if column.acl is not None:
            by_acl[tuple(sorted(column.acl))].append(_ident(column.name))
    for acl, names in sorted(by_acl.items(), key=lambda item: item[1]):
        yield from _grants(conn, list(acl), owner, target, f" ({', '.join(names)})")


def _comment(kind: str, target: str, text: str | None) -> Iterator[str]:
    if text is not None:
        yield f"comment on {kind} {target} is {_literal(text)};"


def _dump_roles(conn: psycopg.Connection) -> Iterator[str]:
    yield "-- Roles (created by the migrations, granted the schema; cluster-wide, so a second"
    yield "-- database on the server reuses them)"
    yield ""
    for role in _rows(conn, _ROLES, {"schema": SCHEMA}):
        attributes = ["login" if role.login else "nologin"]
        attributes += ["inherit" if role.inherit else "noinherit"]
        attributes += [a for a in ("bypassrls", "createrole", "createdb") if getattr(role, a)]
        yield f"create role {_ident(role.name)} {' '.join(attributes)};"
    for group, member in conn.execute(_MEMBERSHIPS, {"schema": SCHEMA}):
        yield f"grant {_ident(group)} to {_ident(member)};"


def _dump_schema(conn: psycopg.Connection) -> Iterator[str]:
    [schema] = _rows(conn, _SCHEMA, {"schema": SCHEMA})
    yield ""
    yield f"create schema {SCHEMA};"
    yield from _comment("schema", SCHEMA, schema.comment)
    yield from _grants(conn, schema.acl, schema.owner, f"schema {SCHEMA}")


def _column(column: Any) -> str:
    text = f"    {_ident(column.name)} {column.type}"
    if column.collation:
        text += f" collate {column.collation}"
    if column.generated:
        stored = "stored" if column.generated == "s" else "virtual"
        text += f" generated always as ({column.expression}) {stored}"
    elif column.identity:
        text += f" generated {'always' if column.identity == 'a' else 'by default'} as identity"
    elif column.expression is not None:
        text += f" default {column.expression}"
    if column.not_null:
        text += " not null"
    return text


_REPLICA_IDENTITY = {"n": "nothing", "f": "full", "i": "using index"}


def _dump_table(conn: psycopg.Connection, table: Any) -> Iterator[str]:
    target = f"{SCHEMA}.{_ident(table.name)}"
    columns = _rows(conn, _COLUMNS, {"oid": table.oid})
    constraints = conn.execute(_CONSTRAINTS, {"oid": table.oid}).fetchall()
    body = [_column(c) for c in columns]
    body += [f"    constraint {_ident(name)} {definition}" for name, definition in constraints]
    unlogged = "unlogged " if table.persistence == "u" else ""
    yield ""
    yield f"create {unlogged}table {target} ("
    yield ",\n".join(body)
    yield ")" + (f" with ({', '.join(table.options)})" if table.options else "") + ";"
    if table.rls:
        yield f"alter table {target} enable row level security;"
    if table.force_rls:
        yield f"alter table {target} force row level security;"
    if table.replica_identity in _REPLICA_IDENTITY:
        yield f"alter table {target} replica identity {_REPLICA_IDENTITY[table.replica_identity]};"
    for (definition,) in conn.execute(_INDEXES, {"oid": table.oid}):
        yield f"{definition};"
    for definition, name, enabled in conn.execute(_TRIGGER_DEFS, {"oid": table.oid}):
        yield f"{definition};"
        if enabled == "D":
            yield f"alter table {target} disable trigger {_ident(name)};"
    for policy in _rows(conn, _POLICIES, {"schema": SCHEMA, "table": table.name}):
        yield _policy(target, policy)
    yield from _comment("table", target, table.comment)
    for column in columns:
        yield from _comment("column", f"{target}.{_ident(column.name)}", column.comment)
    yield from _grants(conn, table.acl, table.owner, f"table {target}")
    yield from _column_grants(conn, columns, table.owner, f"table {target}")


def _policy(target: str, policy: Any) -> str:
    text = f"create policy {_ident(policy.name)} on {target}"
    if policy.permissive != "PERMISSIVE":
        text += " as restrictive"
    roles = ", ".join(_ident(r) for r in sorted(policy.roles))
    text += f" for {policy.command.lower()} to {roles}"
    if policy.using is not None:
        text += f"\n    using ({policy.using})"
    if policy.checked is not None:
        text += f"\n    with check ({policy.checked})"
    return text + ";"


def _dump_view(conn: psycopg.Connection, view: Any) -> Iterator[str]:
    target = f"{SCHEMA}.{_ident(view.name)}"
    [(definition,)] = conn.execute("select pg_get_viewdef(%s::oid, true)", (view.oid,))
    columns = _rows(conn, _COLUMNS, {"oid": view.oid})
    options = f" with ({', '.join(view.options)})" if view.options else ""
    yield ""
    yield f"create view {target}{options} as"
    yield definition.rstrip().rstrip(";") + ";"
    yield from _comment("view", target, view.comment)
    for column in columns:
        yield from _comment("column", f"{target}.{_ident(column.name)}", column.comment)
    yield from _grants(conn, view.acl, view.owner, f"table {target}")


def _dump_sequence(conn: psycopg.Connection, sequence: Any) -> Iterator[str]:
    target = f"{SCHEMA}.{_ident(sequence.name)}"
    [s] = _rows(conn, _SEQUENCE, {"oid": sequence.oid, "schema": SCHEMA})
    text = (
        f"create sequence {target} as {s.type} start {s.start} increment {s.increment}"
        f" minvalue {s.minvalue} maxvalue {s.maxvalue} cache {s.cache}"
    )
    text += " cycle" if s.cycle else ""
    text += f" owned by {s.owned_by}" if s.owned_by else ""
    yield ""
    yield text + ";"
    yield from _comment("sequence", target, sequence.comment)
    yield from _grants(conn, sequence.acl, sequence.owner, f"sequence {target}")


_VOLATILITY = {"i": "immutable", "s": "stable", "v": "volatile"}
_PARALLEL = {"s": "parallel safe", "r": "parallel restricted"}


def _dump_function(conn: psycopg.Connection, function: Function, file: str) -> Iterator[str]:
    [f] = _rows(conn, _FUNCTION_DETAILS, {"oid": function.oid})
    target = f"{SCHEMA}.{_ident(function.name)}({function.identity})"
    attributes = [f"returns {function.result}", f"language {f.language}"]
    attributes += [_VOLATILITY[f.volatility]]
    attributes += ["strict"] if f.strict else []
    attributes += ["security definer"] if f.definer else []
    attributes += ["leakproof"] if f.leakproof else []
    attributes += [_PARALLEL[f.parallel]] if f.parallel in _PARALLEL else []
    attributes += [f"cost {f.cost:g}"] if f.cost != 100 else []
    attributes += [f"rows {f.rows:g}"] if f.returns_set and f.rows != 1000 else []
    for setting in f.config or []:
        key, _, value = setting.partition("=")
        attributes.append(f"set {key} = {value}")
    yield ""
    yield f"-- {file}, body md5 {f.digest}"
    yield f"create function {SCHEMA}.{_ident(function.name)}({function.arguments})"
    yield "\n".join(f"    {attribute}" for attribute in attributes) + ";"
    yield from _comment("function", target, function.comment)
    yield from _grants(conn, f.acl, f.owner, f"function {target}")


def schema_dump(conn: psycopg.Connection) -> str:
    """Every object of a fresh install as SQL, in a fixed order, for tests/schema.sql."""
    relations = _rows(conn, _TABLES, {"schema": SCHEMA})
    parts: list[str] = [_DUMP_HEADER]
    parts += _dump_roles(conn)
    parts += _dump_schema(conn)
    parts += ["", "-- Tables"]
    for relation in relations:
        if relation.kind in ("r", "p"):
            parts += _dump_table(conn, relation)
    parts += ["", "-- Sequences"]
    for relation in relations:
        if relation.kind == "S":
            parts += _dump_sequence(conn, relation)
    parts += ["", "-- Views"]
    for relation in relations:
        if relation.kind == "v":
            parts += _dump_view(conn, relation)
    parts += ["", "-- Functions"]
    functions = _functions(conn)
    files = _function_files(functions)
    for function in functions:
        parts += _dump_function(conn, function, files[function.oid])
    return "\n".join(parts) + "\n"
