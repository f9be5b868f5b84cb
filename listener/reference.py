"""The SQL reference in docs/, generated from the catalog's COMMENT ON text.

Each table, view and function documents itself where it is defined; this module
renders those comments as markdown so the docs cannot drift from the schema (a
test regenerates the page and compares it with the committed one).
"""

from __future__ import annotations

import psycopg

_OBJECTS = """
select case c.relkind when 'v' then 'view' else 'table' end, c.relname, '', d.description
from pg_class c
join pg_namespace n on n.oid = c.relnamespace
left join pg_description d on d.objoid = c.oid and d.objsubid = 0
where n.nspname = 'ceaseless' and c.relkind in ('r', 'v')
union all
select 'function', p.proname, pg_get_function_identity_arguments(p.oid), d.description
from pg_proc p
join pg_namespace n on n.oid = p.pronamespace
left join pg_description d on d.objoid = p.oid
where n.nspname = 'ceaseless'
"""

_SECTIONS = [
    ("table", "Tables", "INSERT into these is the API; their constraints are the rules."),
    ("view", "Views", "The operator's interface: query them in psql."),
    ("function", "Functions", "Public functions first; `_`-prefixed ones are internal helpers."),
]


def render(conn: psycopg.Connection) -> str:
    rows = conn.execute(_OBJECTS).fetchall()
    lines = [
        "# SQL reference",
        "",
        "Generated from the `COMMENT ON` text of schema `ceaseless` by "
        "`ceaseless docs sql-reference`; do not edit by hand.",
    ]
    for kind, title, blurb in _SECTIONS:
        lines += ["", f"## {title}", "", blurb, ""]
        chosen = sorted(
            (r for r in rows if r[0] == kind),
            key=lambda r: (r[1].startswith("_"), r[1], r[2]),
        )
        for _, name, arguments, description in chosen:
            signature = f"{name}({arguments})" if kind == "function" else name
            text = " ".join((description or "(no comment)").split())
            lines.append(f"- **`{signature}`** — {text}")
    return "\n".join(lines) + "\n"
