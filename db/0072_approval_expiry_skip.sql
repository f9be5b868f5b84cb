-- An approval that expires undecided may skip its node: the node counts as
-- done without an output, and its downstream nodes run without it (the
-- graph's gated node: "on_expiry": "skip").

set local search_path = ceaseless, pg_catalog, public;

alter table topology_nodes drop constraint topology_nodes_state_check;
alter table topology_nodes add constraint topology_nodes_state_check
    -- skipped: done without an output (its approval expired under
    -- on_expiry skip); its downstream nodes run as after a success.
    check (state in ('waiting', 'awaiting_approval', 'queued', 'running',
                     'succeeded', 'skipped', 'failed', 'cancelled'));

-- Prevents a skipped node without its finish time, which the run page and
-- the run's history would show as still to come.
alter table topology_nodes drop constraint finished_iff_terminal;
alter table topology_nodes add constraint finished_iff_terminal
    check ((finished_at is not null)
           = (state in ('succeeded', 'skipped', 'failed', 'cancelled')));

-- Prevents an expiry policy the expiry sweep does not know: the approval
-- would stay undecided past its expiry, holding the run for ever.
alter table topology_nodes drop constraint on_expiry_known;
alter table topology_nodes add constraint on_expiry_known
    check (on_expiry in ('fail', 'skip', 'approve'));

comment on column topology_nodes.on_expiry is
    'What an undecided approval of this gated node does at its expiry: fail (the node and run '
    'fail), skip (the node is skipped and its downstream nodes run without its output) or '
    'approve (it is approved by ceaseless and the node runs).';
comment on column topology_nodes.state is
    'waiting, awaiting_approval, queued, running, then succeeded, skipped (its approval expired '
    'under on_expiry skip: done, without an output), failed or cancelled.';
