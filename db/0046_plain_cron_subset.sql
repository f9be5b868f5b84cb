-- The cron gate accepts a plain subset of croniter's language
-- (functions/35_cron.sql): ranges only run upwards, so the helper that
-- expanded reversed and equal ranges croniter's way is gone, and the day-field
-- check now takes the day-of-week values too. Dropped once here, as
-- db/0032 does, rather than on every re-apply of functions/.
--
-- Schedules already stored in a form the gate now refuses (a reversed or equal
-- range, a * in a list, a day field naming every day next to a restricted
-- other) are left as they are: croniter reads them as the gate did when they
-- were stored, so they keep firing on the same slots. docs/cron.md shows the
-- query that lists them; a change of the row's configuration checks it again.

set local search_path = ceaseless, pg_catalog, public;

drop function if exists _cron_range(integer, integer, integer, boolean, integer, integer);
drop function if exists _cron_days_error(text, text, text, integer[], integer[]);
