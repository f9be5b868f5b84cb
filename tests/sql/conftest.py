"""Fixtures of the SQL tests: login roles that connect for real."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator

import psycopg
import pytest
from psycopg.conninfo import make_conninfo

PASSWORD = "a-test-password"


@pytest.fixture
def login_role(
    conn: psycopg.Connection, db_url: str
) -> Iterator[Callable[..., psycopg.Connection]]:
    """Create login roles (members of the given group role); yield a connector; drop them after."""
    created: list[str] = []
    opened: list[psycopg.Connection] = []

    def connect(name: str, group: str = "ceaseless_user") -> psycopg.Connection:
        role = f"{name}_{uuid.uuid4().hex[:8]}"
        conn.execute(f"create role {role} login password '{PASSWORD}' in role {group}")
        conn.commit()
        created.append(role)
        user = psycopg.connect(make_conninfo(db_url, user=role, password=PASSWORD), autocommit=True)
        opened.append(user)
        return user

    yield connect
    for user in opened:
        user.close()
    conn.rollback()
    for role in created:
        conn.execute(f"drop owned by {role}")
        conn.execute(f"drop role {role}")
    conn.commit()
