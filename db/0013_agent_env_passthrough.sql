-- agents.env_passthrough: the names of the listener's environment variables an
-- agent may see.
--
-- An agent's environment is an allowlist (PATH, HOME, LANG, LC_*, TERM,
-- TMPDIR, USER, its own `env`), no longer a copy of the listener's: agents read
-- untrusted text, and the listener's environment holds its database URL and
-- its host's secrets. A variable an agent CLI needs from the host (a proxy, a
-- credentials path) is named here, one lane at a time.

set local search_path = ceaseless, pg_catalog, public;

alter table agents
    add column env_passthrough text[] not null default '{}',
    -- Each entry a plain variable name: a NULL, an empty name or a pattern
    -- would be silently ignored by the listener, and the operator would look
    -- for the variable in the agent and not find it. At most 100 names. The
    -- names are joined with commas and the pattern reads each one; splitting
    -- the joined text again must give the list back, so no name can smuggle a
    -- comma (or hide a NULL, which the join skips).
    add constraint env_passthrough_names
        check (cardinality(env_passthrough) = 0
               or (cardinality(env_passthrough) <= 100
                   and array_position(env_passthrough, null) is null
                   and array_to_string(env_passthrough, ',')
                       ~ '^[A-Za-z_][A-Za-z0-9_]*(,[A-Za-z_][A-Za-z0-9_]*)*$'
                   and string_to_array(array_to_string(env_passthrough, ','), ',')
                       = env_passthrough)),
    -- The database's variables (DATABASE_URL, libpq's PG*) and ceaseless' own
    -- (CEASELESS_*) never reach an agent: with them a prompt injection would
    -- connect to the queue's database. Compared case-insensitively.
    add constraint env_passthrough_not_database
        check (not (',' || upper(array_to_string(env_passthrough, ',')) || ',')
                   ~ ',(DATABASE_URL|PG[A-Z0-9_]*|CEASELESS_[A-Z0-9_]*),');

comment on column agents.env_passthrough is
    'Names of the listener''s environment variables this agent also gets (never DATABASE_URL, PG* or CEASELESS_*).';
