-- Fairness and priority within a lane: a job's priority (higher first) and
-- fairness key, a lane's fairness (fifo, or round_robin across owners and,
-- within an owner, across its fairness keys), and where a round-robin lane's
-- turn stands. Routines and loops set the priority and key of the jobs they
-- create. The claim that reads them is claim_jobs (functions/10_jobs.sql),
-- its round robin _round_robin_pick (functions/12_lanes.sql).

set local search_path = ceaseless, pg_catalog, public;

alter table job
    -- Outside a small band a priority is a typo or an arms race between
    -- owners; the band leaves room for tiers (100, 500) without meaning.
    add column priority integer not null default 0
        constraint priority_bounded check (priority between -1000 and 1000),
    -- An empty key would be a second, invisible default; an unbounded one a
    -- way to bloat the claim's index with a megabyte per entry.
    add column fairness_key text
        constraint fairness_key_bounded check (char_length(fairness_key) between 1 and 200);

-- Existing jobs take their owner as their key, as a new job does.
update job set fairness_key = user_id;

alter table job
    alter column fairness_key set default current_user,
    alter column fairness_key set not null;

comment on column job.priority is
    'Higher first within a lane (and, in a round_robin lane, within the job''s fairness key); '
    'between -1000 and 1000, default 0. Ties go to the job due first.';
comment on column job.fairness_key is
    'Whose turn the job waits for in a round_robin lane: the lane takes turns across owners '
    '(user_id) first, then across each owner''s fairness keys, so a key can only share out its '
    'owner''s turns. Default: the owner.';

-- The fifo claim walks a lane's due jobs by priority, then by when they fell
-- due. Same name as before: every reader of a lane's pending jobs (the claim,
-- the metrics) uses it for its leading agent column.
drop index job_claimable_idx;
create index job_claimable_idx on job (agent, priority desc, run_after)
    where state = 'pending';

-- The round-robin claim's skip scan: the next owner with due work after the
-- lane's turn, then the next key of that owner, then its best job, each one
-- probe of this index (partial: only pending jobs, so finished history adds
-- nothing to it).
create index job_fair_claim_idx on job (agent, user_id, fairness_key, priority desc, run_after)
    where state = 'pending';

alter table agents
    add column fairness text not null default 'fifo'
        -- An unknown value would be claimed as neither: a lane whose jobs
        -- never run.
        constraint fairness_known check (fairness in ('fifo', 'round_robin'));

comment on column agents.fairness is
    'How the lane orders its due jobs: fifo (by priority, then by when they fell due) or '
    'round_robin (one job per owner in turn, and within an owner one per fairness key in turn, '
    'each key''s jobs by priority then due time).';

-- Where a round-robin lane's turn stands: the owner served last. The claim
-- starts after it, so every owner with due work is served once before any
-- owner twice, across claims as within one. No foreign key to agents: its
-- check would run for every owner's first turn inside the claim, and a row
-- left by a deleted or renamed lane only says where a lane of that name
-- starts its ring.
create table lane_turns (
    agent text primary key,
    user_id text not null
);

-- Within each owner, the fairness key served last (no foreign key, as
-- above).
create table owner_turns (
    agent text not null,
    user_id text not null,
    fairness_key text not null,
    primary key (agent, user_id)
);

comment on table lane_turns is
    'The owner a round_robin lane served last; the next claim starts with the owner after it '
    '(written by claim_jobs under the lane lock).';
comment on table owner_turns is
    'The fairness key a round_robin lane served last for each owner; that owner''s next turn '
    'goes to the key after it.';

alter table routines
    add column job_priority integer not null default 0
        constraint job_priority_bounded check (job_priority between -1000 and 1000),
    add column job_fairness_key text
        constraint job_fairness_key_bounded
            check (char_length(job_fairness_key) between 1 and 200);

alter table loops
    add column job_priority integer not null default 0
        constraint job_priority_bounded check (job_priority between -1000 and 1000),
    add column job_fairness_key text
        constraint job_fairness_key_bounded
            check (char_length(job_fairness_key) between 1 and 200);

comment on column routines.job_priority is
    'The priority of the jobs this routine''s fires create (job.priority).';
comment on column routines.job_fairness_key is
    'The fairness key of the jobs this routine''s fires create; NULL: the routine''s owner.';
comment on column loops.job_priority is
    'The priority of the jobs of every node of this loop''s iterations (job.priority).';
comment on column loops.job_fairness_key is
    'The fairness key of the jobs of every node of this loop''s iterations; NULL: the loop''s '
    'owner.';
