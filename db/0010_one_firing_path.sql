-- One firing path without a hot row.
--
-- Before this migration every fire and every finish of a routine run locked
-- the single routine_run_gauge row until commit. Under event load that row
-- serialised all of them (a few hundred runs per second), and because a fire
-- took it between two routine locks, an event that fired several routines
-- deadlocked with a finish batch that took the same locks the other way round.
--
-- Now the count of running runs is spread over shards that no transaction ever
-- waits for (functions/41_routine_firing.sql picks an unlocked one), and fires
-- are serialised against each other — and against the cap — by a
-- transaction-scoped advisory lock that finishes never take. The lock order of
-- every operation is written down in functions/41_routine_firing.sql.

set local search_path = ceaseless, pg_catalog, public;

-- The number of running routine runs is the sum of `running` over all rows.
-- A fire adds to, and a finish takes from, whichever shard its transaction
-- could lock without waiting, so one shard may go negative while the sum
-- stays exact; that is why there is no per-row "not negative" check here
-- (the tests check the sum against count(*) of running runs).
create table routine_run_shards (
    shard smallint primary key,
    running integer not null default 0,

    -- A fixed set of rows: the shard chooser reads them all, and a row
    -- outside the range would be a shard nobody sums.
    constraint shard_in_range check (shard between 0 and 63)
);

comment on table routine_run_shards is
    'Running routine_runs, counted in 64 shards kept by trigger; the sum is the global cap''s '
    'measure. A single shard may be negative: only the sum means anything.';

insert into routine_run_shards (shard, running)
select s, case when s = 0 then coalesce((select running from routine_run_gauge), 0) else 0 end
from generate_series(0, 63) s;

-- The old gauge's triggers are replaced when functions/ is applied, right
-- after this file; nothing writes routine_runs in between.
drop table routine_run_gauge;

-- A routine whose agent is disabled would leave a pending job nobody claims
-- and a run that holds its max_concurrent slot and a global-cap slot forever:
-- such a fire is refused, and says why. NOT VALID, like every constraint on a
-- table that holds rows (0008): 0012 validates the old rows under a lock that
-- lets fires go on.
alter table routine_runs drop constraint routine_runs_skip_reason_check;
alter table routine_runs add constraint skip_reason_known
    check (skip_reason in ('cooldown', 'concurrency', 'dedup', 'global_cap', 'missed_slots',
                           'disabled', 'agent_disabled')) not valid;

comment on column routine_runs.skip_reason is
    'Why a fire was refused: cooldown, concurrency (max_concurrent), dedup, global_cap '
    '(routine_max_running), disabled (the routine), agent_disabled (its agent), or '
    'missed_slots (cron slots that passed while no listener ran, collapsed into one fire).';
