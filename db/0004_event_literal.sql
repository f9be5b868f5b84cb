-- A cheap prefilter for event matching.
--
-- Matching an event runs each of the user's event patterns, and PostgreSQL
-- keeps only 32 compiled regular expressions per session: with a thousand
-- routines every event recompiled a thousand patterns (about 9 ms). Most
-- patterns contain a literal that every match must contain ("deploy " in
-- "deploy (failed|broken)"); a strpos() on it rules a routine out without
-- compiling anything.

set local search_path = ceaseless, pg_catalog, public;

alter table routines
    add column event_literal text not null default '';

comment on column routines.event_literal is
    'For event routines: a string every content matching the pattern contains (or '''' when none '
    'is known), derived by _regex_required_literal at validation; checked before the regex.';
