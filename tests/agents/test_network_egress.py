"""agents.egress: {none}, {open} or host[:port] entries, refused at INSERT with CE422 otherwise;
the default lets the agent CLIs reach their providers, and the listener reads it as stored."""

from __future__ import annotations

import asyncio

import psycopg
import pytest

from listener.agents.egress import Policy, parse_entry
from listener.queries.registry import load_agents
from tests.factories import make_agent

# What the Claude Code and OpenCode CLIs contact, seen through the proxy and in
# their builds (docs/agents.md says why each is there).
CLI_HOSTS = {
    "api.anthropic.com",
    "platform.claude.com",
    "claude.ai",
    "models.opencode.ai",
    "registry.npmjs.org",
    "api.openai.com",
}


def test_a_new_lane_may_reach_the_agent_clis_providers_and_the_listener_reads_it(
    conn: psycopg.Connection, db_url: str
) -> None:
    make_agent(conn, "claude", "claude_code", ["claude"])
    make_agent(conn, "shut", "command", ["x"], egress=["none"])

    async def load() -> dict:
        async with await psycopg.AsyncConnection.connect(db_url) as aconn:
            return await load_agents(aconn)

    agents = asyncio.run(load())
    assert set(agents["claude"].egress) >= CLI_HOSTS
    policy = Policy.parse(agents["claude"].egress)
    assert not policy.open and all(e.port == 443 for e in policy.entries)
    assert agents["shut"].egress == ("none",)


@pytest.mark.parametrize(
    ("egress", "rule"),
    [
        (None, "must not be NULL"),
        ([], "must not be empty: '{none}' gives no network"),
        (["none", "api.example.com"], "'none' stands alone"),
        (["api.example.com", "open"], "'open' stands alone"),
        ([None], "must not hold NULL"),
        (["api.example.com:0"], "the port must be a number from 1 to 65535"),
        (["api.example.com:65536"], "the port must be a number from 1 to 65535"),
        (["api.example.com:443443"], "must be host or host:port"),
        (["https://api.example.com"], "must be host or host:port"),
        (["api.example.com/v1"], "the host must be a name"),
        (["-api.example.com"], "the host must be a name"),
        (["api..example.com"], "the host must be a name"),
        (["api.example.com."], "the host must be a name"),
        ([" api.example.com"], "the host must be a name"),
        (["*"], "the host must be a name"),
        (["*.com"], "*. must come before a domain of two labels or more"),
        (["a.*.example.com"], "the host must be a name"),
        (["1.2.3"], "a host of digits and dots must be an IPv4 address"),
        (["10.0.0.256:80"], "a host of digits and dots must be an IPv4 address"),
        (["[::1"], "an IPv6 address goes in brackets"),
        (["[127.0.0.1]:80"], "only an IPv6 address goes in brackets"),
        (["[1::2::3]"], "is not an IPv6 address"),
        (["::1"], "must be host or host:port"),
        (["x" * 64 + ".example.com"], "the host must be a name"),
        (["a.example.com"] * 101, "at most 100 entries"),
    ],
)
def test_a_bad_egress_is_refused_naming_the_field_the_rule_and_the_entry(
    conn: psycopg.Connection, egress: list[str | None] | None, rule: str
) -> None:
    with pytest.raises(psycopg.Error) as caught:
        make_agent(conn, "lane", "command", ["x"], egress=egress)
    error = caught.value
    assert error.sqlstate == "CE422"
    assert (error.diag.table_name, error.diag.column_name) == ("agents", "egress")
    message = error.diag.message_primary or ""
    assert message.startswith("agents.egress: ") and rule in message, message
    if egress and len(egress) == 1 and egress[0]:
        assert f'got "{egress[0]}"' in message  # the entry itself, to find it in a long list


def test_an_update_is_checked_as_an_insert_is(conn: psycopg.Connection) -> None:
    make_agent(conn, "lane", "command", ["x"])
    with pytest.raises(psycopg.Error) as caught:
        conn.execute("update ceaseless.agents set egress = '{}' where name = 'lane'")
    assert caught.value.sqlstate == "CE422"


GOOD = [
    ["none"],
    ["NONE"],
    ["open"],
    ["Open"],
    [
        "api.example.com",
        "API.Example.com:8443",
        "*.example.com",
        "*.svc.example.com:80",
        "localhost:11434",
        "gitea:3000",
        "10.0.0.5:5432",
        "127.0.0.1:8080",
        "[2001:db8::1]",
        "[::1]:8080",
        "xn--bcher-kva.example",
    ],
]


@pytest.mark.parametrize("egress", GOOD)
def test_none_open_and_well_formed_entries_are_stored_as_given(
    conn: psycopg.Connection, egress: list[str]
) -> None:
    make_agent(conn, "lane", "command", ["x"], egress=egress)
    row = conn.execute("select egress from ceaseless.agents where name = 'lane'").fetchone()
    assert row == (egress,)


SHAPES = [
    "api.example.com",
    "api.example.com:1",
    "api.example.com:65535",
    "api.example.com:0443",
    "*.example.com:443",
    "*.a.b",
    "*.1.2",
    "1.2.3.4",
    "01.2.3.4",
    "1.2.3.4:80",
    "255.255.255.255",
    "256.1.1.1",
    "1.2.3",
    "[::1]",
    "[::1]:80",
    "[::ffff:127.0.0.1]:80",
    "[1.2.3.4]",
    "[::1]:",
    "host:",
    ":443",
    "",
    "a_b.example.com",
    "-a.example.com",
    "a-.example.com",
    "a" * 63 + ".com",
    "a" * 64 + ".com",
    ".".join(["a" * 50] * 5),
    "*.com",
    "*example.com",
    "ex ample.com",
    "bücher.example",
]


def test_what_the_database_accepts_is_what_the_proxy_reads(conn: psycopg.Connection) -> None:
    # The database is the gate and the proxy parses again: they must not disagree,
    # or a stored lane would fail every run (or the proxy would read another host).
    for text in SHAPES:
        row = conn.execute("select ceaseless._egress_entry_error(%s)", (text,)).fetchone()
        assert row is not None
        try:
            parse_entry(text)
        except ValueError as exc:
            assert row[0] is not None, f"the database accepts {text!r}, the proxy does not: {exc}"
        else:
            assert row[0] is None, f"the proxy reads {text!r}, the database refuses it: {row[0]}"


def test_a_user_sees_where_its_lanes_agents_may_connect_but_not_their_keys(
    conn: psycopg.Connection, login_role
) -> None:
    make_agent(conn, "lane", "command", ["x"], env={"API_KEY": "k"}, egress=["api.example.com"])
    conn.commit()
    alice = login_role("alice")
    assert alice.execute("select egress from ceaseless.agents").fetchall() == [
        (["api.example.com"],)
    ]
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        alice.execute("select env from ceaseless.agents")
