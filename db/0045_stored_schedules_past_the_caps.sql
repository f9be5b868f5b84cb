-- Cron routines stored before the caps on schedules (db/0015) and still past
-- them are disabled, with the reason in last_error. 0015 left them to the
-- listener, which checked the caps again before computing a slot; the
-- listener now trusts the database's check at INSERT, so a schedule of 50,000
-- list items (0.6 s of croniter on every fire) must not stay enabled. Its
-- owner shortens the schedule and enables the routine again (the update is
-- validated). The caps are _input_cap('schedule') and ('schedule_items'),
-- written out because functions/ are applied after the migrations; loops
-- came after the caps and never held such a schedule.

set local search_path = ceaseless, pg_catalog, public;

update routines
set enabled = false,
    last_error = 'disabled when the listener stopped checking schedules itself: a schedule may '
                 'be at most 1000 characters long, with at most 60 items in a field; shorten '
                 'trigger_config.schedule, then enable the routine again'
where trigger_type = 'cron'
  and (char_length(trigger_config ->> 'schedule') > 1000
       or exists (select
                  from regexp_split_to_table(trigger_config ->> 'schedule', '[ \t\n\r\f\v]+') f
                  where cardinality(string_to_array(f, ',')) > 60));
