-- Overlap policies and debounce, once for routines and loops: what a fire
-- refused by cooldown, max_concurrent or a live iteration becomes, and how
-- many fires in a short window collapse into one. A fire that waits is a row
-- of held_fires, one table for both kinds, so it is visible and survives a
-- restart of every listener.

set local search_path = ceaseless, pg_catalog, public;

alter table routines
    -- skip: the refused fire is recorded as skipped. buffer_one / buffer_all:
    -- it waits in held_fires (the newest one / every one, in order) until its
    -- blocker clears. cancel_other: the live run is cancelled and the new
    -- fire starts. allow_all: max_concurrent is not judged (the global cap
    -- still is). A misspelt policy would silently behave as skip.
    add column overlap_policy text not null default 'skip'
        constraint routines_overlap_policy_known
            check (overlap_policy in ('skip', 'buffer_one', 'buffer_all', 'cancel_other',
                                      'allow_all')),
    -- Zero or less would hold a fire for no time, or fire it before the
    -- fire that asked: NULL is no debounce.
    add column debounce_secs integer
        constraint routines_debounce_secs_positive check (debounce_secs > 0),
    add column debounce_max_secs integer
        constraint routines_debounce_max_secs_positive check (debounce_max_secs > 0),
    -- A ceiling under the quiet period would fire before the window it bounds
    -- could close; a ceiling without a window bounds nothing.
    add constraint routines_debounce_max_at_least_secs
        check (debounce_max_secs >= debounce_secs),
    add constraint routines_debounce_max_needs_secs
        check (debounce_max_secs is null or debounce_secs is not null);

alter table loops
    -- As for routines, but allow_all: a loop's iterations form one chain (each
    -- reads the last one's final message, and numbers N + 1 after it), so two
    -- live at once would both claim to follow the same iteration.
    add column overlap_policy text not null default 'skip'
        constraint loops_overlap_policy_known
            check (overlap_policy in ('skip', 'buffer_one', 'buffer_all', 'cancel_other')),
    add column debounce_secs integer
        constraint loops_debounce_secs_positive check (debounce_secs > 0),
    add column debounce_max_secs integer
        constraint loops_debounce_max_secs_positive check (debounce_max_secs > 0),
    add constraint loops_debounce_max_at_least_secs check (debounce_max_secs >= debounce_secs),
    add constraint loops_debounce_max_needs_secs
        check (debounce_max_secs is null or debounce_secs is not null);

comment on column routines.overlap_policy is
    'What a fire refused by cooldown or max_concurrent becomes: skip (recorded as skipped), '
    'buffer_one (the newest waits in held_fires), buffer_all (every one waits, in order, up to '
    'settings.overlap_buffer_max), cancel_other (the live runs are cancelled and it starts), '
    'allow_all (max_concurrent not judged; the global cap still is).';
comment on column routines.debounce_secs is
    'Event and webhook fires closer together than this collapse into one, started this many '
    'seconds after the last of them; NULL: no debounce.';
comment on column routines.debounce_max_secs is
    'A debounced fire starts at the latest this many seconds after the first fire it collapses; '
    'NULL: no ceiling.';
comment on column loops.overlap_policy is
    'What a fire refused because an iteration is live becomes: skip, buffer_one, buffer_all or '
    'cancel_other (as routines.overlap_policy; no allow_all: iterations form one chain).';
comment on column loops.debounce_secs is
    'Event and webhook fires closer together than this collapse into one, started this many '
    'seconds after the last of them; NULL: no debounce.';
comment on column loops.debounce_max_secs is
    'A debounced fire starts at the latest this many seconds after the first fire it collapses; '
    'NULL: no ceiling.';

-- ---------------------------------------------------------------------------
-- Fires that wait: buffered (refused by an overlap rule under a buffer
-- policy) or debounced (inside a debounce window). One table for routines and
-- loops: fire_held releases both through the one firing path.
-- ---------------------------------------------------------------------------
create table held_fires (
    id uuid primary key default gen_random_uuid(),
    routine_id uuid references routines (id) on delete cascade,
    loop_id uuid references loops (id) on delete cascade,
    -- The owner of the routine or loop: what row-level security reads.
    user_id text not null,
    reason text not null,
    -- The guardrail that refused a buffered fire (cooldown, concurrency,
    -- live_iteration); NULL for a debounced one not yet refused.
    blocked_by text,
    -- The policy that held it: buffer_one keeps one row per target.
    policy text not null,
    trigger_type text not null,
    trigger_detail text,
    -- What the fire carries: a routine's context, a loop's webhook body or
    -- event. The newest fire's, for a debounced row.
    context text,
    -- The cron slot a cron or backfill fire stands for: the run's slot_at
    -- when it starts, and what backfill reads as "this slot is fired".
    slot_at timestamptz,
    first_at timestamptz not null,
    last_at timestamptz not null,
    -- The earliest moment to try: a debounce window's end, a cooldown's end;
    -- NULL when only a run's end can clear the blocker (then the run's end
    -- wakes the scheduler).
    fire_at timestamptz,
    collapsed integer not null default 1,
    -- Release order within a target: buffer_all keeps its fires in order.
    seq bigint generated always as identity,
    created_at timestamptz not null default now(),
    -- A row that fires both, or neither, could never be released.
    constraint held_fires_one_target check (num_nonnulls(routine_id, loop_id) = 1),
    -- Only the two ways a fire waits; another would never be released.
    constraint held_fires_reason_known check (reason in ('buffered', 'debounced')),
    constraint held_fires_policy_known
        check (policy in ('skip', 'buffer_one', 'buffer_all', 'cancel_other', 'allow_all')),
    -- A count under one would say a fire collapsed into nothing.
    constraint held_fires_collapsed_positive check (collapsed >= 1),
    -- A detail is shown and logged; the context is bounded where it came from.
    constraint held_fires_detail_bounded check (char_length(trigger_detail) <= 200)
);

-- Each target's held fires in release order (fire_held, the views, the
-- buffer_all bound).
create index held_fires_routine_idx on held_fires (routine_id, seq) where routine_id is not null;
create index held_fires_loop_idx on held_fires (loop_id, seq) where loop_id is not null;
-- The earliest timed release: the scheduler sleeps until then.
create index held_fires_fire_at_idx on held_fires (fire_at) where fire_at is not null;

comment on table held_fires is
    'Fires of routines and loops that wait: buffered (refused by cooldown, max_concurrent or a '
    'live iteration under a buffer policy) or debounced (collapsing into one). fire_held starts '
    'them through the one firing path; they survive restarts.';
comment on column held_fires.reason is 'buffered or debounced.';
comment on column held_fires.blocked_by is
    'The skip reason that refused it (cooldown, concurrency, live_iteration); NULL before any.';
comment on column held_fires.fire_at is
    'The earliest moment fire_held tries it (a debounce window''s end, a cooldown''s end); NULL: '
    'when a run of its target ends.';
comment on column held_fires.slot_at is
    'The cron slot a held cron or backfill fire stands for (its run''s slot_at); NULL otherwise.';
comment on column held_fires.collapsed is 'How many fires this row stands for (debounce).';
comment on column held_fires.seq is 'Release order within a routine or loop.';

alter table held_fires enable row level security;
create policy all_rows on held_fires to ceaseless_listener, ceaseless_operator
    using (true) with check (true);
-- A user sees its own held fires, and writes none (the engine does).
create policy own_rows on held_fires to ceaseless_user using (user_id = current_user);

-- The held fire fire_held is releasing in this transaction: a fire refused
-- again then stays that row, instead of becoming another.
alter table transaction_state add column held_fire uuid;
comment on column transaction_state.held_fire is
    'The held fire fire_held is releasing in this transaction (its refusal keeps the row).';

insert into settings (key, value, description) values
    ('overlap_buffer_max', '100',
     'How many fires a buffer_all routine or loop keeps waiting; past it a refused fire is '
     'skipped and recorded. Bounds the rows a stuck target accumulates.')
on conflict (key) do nothing;
