-- A loop's pace: the least time between two of its iterations' fires. An
-- on_completion loop whose iterations end at once would otherwise start the
-- next in the same instant, forever, each iteration writing its runs, nodes,
-- jobs and audit rows. A fire that comes sooner waits as a held fire
-- (held_fires, blocked_by min_interval) until the interval has passed; it is
-- deferred, never skipped.

set local search_path = ceaseless, pg_catalog, public;

alter table loops
    -- 0 is no pacing at all, chosen by hand. A negative interval would mean
    -- nothing, and one past a day is a schedule, which cron says better.
    add column min_interval_secs integer not null default 1
        constraint loops_min_interval_secs_bounded check (min_interval_secs between 0 and 86400);

comment on column loops.min_interval_secs is
    'The least seconds between two fires of this loop''s iterations (0: unpaced): a fire sooner '
    'after the latest iteration was fired waits in held_fires (blocked_by min_interval) until '
    'then. run_loop is not paced.';

comment on column held_fires.blocked_by is
    'The skip reason that refused it (cooldown, concurrency, live_iteration), or min_interval '
    'for a loop''s fire that came sooner than its min_interval_secs; NULL before any.';
comment on column held_fires.fire_at is
    'The earliest moment fire_held tries it (a debounce window''s end, a cooldown''s end, the end '
    'of a loop''s min_interval_secs); NULL: when a run of its target ends.';
