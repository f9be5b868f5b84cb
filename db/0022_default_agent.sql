-- The default agent (settings.default_agent): the lane that runs a routine,
-- a job or a topology node which names none. A routine inserted in the
-- seed's shape, with no agent column, then works.
--
-- Stored as JSON null until an operator sets it: with no default, a row that
-- names no agent is refused naming the field (functions/93_default_agent.sql),
-- never given a lane nobody chose. No column or constraint changes: routines
-- .agent and job.agent stay NOT NULL (a BEFORE trigger fills them first),
-- and the setting is checked by a trigger when written, since a CHECK cannot
-- read the agent registry.

set local search_path = ceaseless, pg_catalog, public;

insert into settings (key, value, description) values
    ('default_agent', 'null',
     'The agent (lane) for a routine, a job or a topology node that names none, filled in when '
     'the row is written. JSON null: no default, and such a row is refused. Set it with '
     'update ceaseless.settings set value = to_jsonb(''NAME''::text) where key = ''default_agent''.')
on conflict (key) do nothing;
