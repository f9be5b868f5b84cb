-- A loop node whose job is blocked (its agent asked for a person, spent its
-- ceiling, or could not log in) waits for the person instead of failing its
-- run: reply_job or raise_job_budget sends the job back to pending and the
-- node runs on in the same session, as a job of its own would.

set local search_path = ceaseless, pg_catalog, public;

alter table topology_nodes drop constraint topology_nodes_state_check;
alter table topology_nodes add constraint topology_nodes_state_check
    -- blocked: its job is blocked, waiting for a reply (reply_job) or a
    -- raised ceiling (raise_job_budget); the run stays live meanwhile.
    check (state in ('waiting', 'awaiting_approval', 'queued', 'running', 'blocked',
                     'succeeded', 'skipped', 'failed', 'cancelled'));

comment on column topology_nodes.state is
    'waiting, awaiting_approval, queued, running, blocked (its job waits for a person: '
    'reply_job or raise_job_budget), then succeeded, skipped (its approval expired under '
    'on_expiry skip: done, without an output), failed or cancelled.';
