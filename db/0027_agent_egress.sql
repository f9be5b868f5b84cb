-- agents.egress: where a sandboxed agent's connections may go.
--
-- A sandboxed agent has a network namespace of its own: its own loopback and,
-- unless egress is '{none}', an egress proxy as its only way out, which lets
-- through the hosts and ports listed here ('{open}': any public address) and
-- nothing else; never the host's loopback, where the listener's dashboard and
-- a trust-auth PostgreSQL answer (listener/agents/network.py). The rules of a
-- value are checked by _tg_agents_validate_egress (functions/), which names
-- the entry and the rule broken (CE422).
--
-- The default lets the Claude Code and OpenCode CLIs reach their providers and
-- their logins, as seen by running them through the proxy and read from their
-- builds (docs/agents.md lists why each host is there). Existing lanes get it
-- too: a lane that needs more (a forge to push to, another provider) names
-- its hosts.

set local search_path = ceaseless, pg_catalog, public;

alter table agents
    add column egress text[] not null default '{api.anthropic.com,platform.claude.com,claude.ai,console.anthropic.com,models.dev,models.opencode.ai,opencode.ai,registry.npmjs.org,api.openai.com,auth.openai.com,chatgpt.com,openrouter.ai}';

comment on column agents.egress is
    'Where a sandboxed agent may connect, through its egress proxy: {none}, {open} (any public '
    'address) or host[:port] entries (*.domain for its subdomains, IP literals, port 443 when '
    'none is given).';
