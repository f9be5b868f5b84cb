-- Untrusted text is bounded: event patterns may not use back-references, and
-- patterns, schedules, prompts, event content and job prompts and payloads
-- have length caps (functions/00_helpers.sql, _input_cap). The rules live in
-- the validation functions; this migration only deals with routines stored
-- before them.
--
-- An event routine whose pattern breaks the new rules is disabled, with the
-- reason in last_error, rather than left to run: its pattern is run against
-- every event of its user, and a back-reference can hold each such INSERT for
-- seconds. Its owner fixes the pattern and enables it again (the update is
-- validated). The test below is _regex_backreference's and the cap is
-- _input_cap('pattern'), written out because functions/ are applied after
-- the migrations. Cron routines need nothing here: the listener checks the
-- schedule caps itself and disables a routine whose schedule breaks them.
-- Longer prompts keep working: they cost only their own runs.

set local search_path = ceaseless, pg_catalog, public;

update routines
set enabled = false,
    last_error = 'disabled when back-references and patterns over 2000 characters were '
                 'forbidden: fix trigger_config.pattern, then enable the routine again'
where trigger_type = 'event'
  and enabled
  and (char_length(trigger_config ->> 'pattern') > 2000
       or (left(trigger_config ->> 'pattern', 4) <> '***='
           and (trigger_config ->> 'pattern') ~ '(?:^|[^\\])(?:\\\\)*\\[1-9]'));
