-- tracked_repo.tokens_allowed: may the listener spend its forge tokens on this repo?
--
-- The listener's tokens (forge_token_source) are the deployment's identity on
-- the forge, and they can read whatever that identity can: a private
-- repository of the organisation the deployment works for. A user who tracks
-- victim-org/private-repo would otherwise have the listener poll it, clone it
-- into the user's agent's workspace and write to it with those tokens: the
-- listener acting as a confused deputy. So a repo a user tracks is served
-- anonymously (public repositories only) until an operator says the tokens
-- may be used for it, and loses that again when its user points it at another
-- repository (the rule lives in _tg_tracked_repo_validate, functions/).
--
-- The column's default is true because the trigger decides for every INSERT
-- and UPDATE: a row written by an operator, a listener or the database's
-- owner keeps what it says; one written by a user role is always false. A
-- user role has no privilege on the column at all.

set local search_path = ceaseless, pg_catalog, public;

alter table tracked_repo add column tokens_allowed boolean not null default true;

comment on column tracked_repo.tokens_allowed is
    'May the listener use its forge tokens (forge_token_source) for this repo? Set by an operator '
    '(always false on a row a user role wrote or retargeted); without it the repo is polled, '
    'cloned and written to anonymously.';

-- The repos already tracked keep their tokens only when their owner is a role
-- that acts for everyone: a repo a user role tracked was never vetted.
update tracked_repo r
   set tokens_allowed = exists (
       select 1 from pg_roles g
       where g.rolname = r.user_id
         and (pg_has_role(g.oid, 'ceaseless_operator', 'usage')
              or pg_has_role(g.oid, 'ceaseless_listener', 'usage')));

-- labels_due now returns the repo's tokens_allowed: a new result type, which
-- CREATE OR REPLACE cannot give an existing function (functions/ recreates it).
drop function if exists labels_due(integer, timestamptz);
