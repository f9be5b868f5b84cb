-- Roles and row owners (spec section 10), as pg_cron does it: rows carry the
-- role that owns them, and row-level security lets a user role see and change
-- only its own.
--
-- Three group roles (NOLOGIN; grant them to login roles):
--   ceaseless_listener  what the daemon needs: every table, through functions
--                       and its own queries; all rows.
--   ceaseless_operator  views, cancel/retry, approvals, agents and settings;
--                       all rows.
--   ceaseless_user      its own routines, jobs, events (and later loops); no
--                       agents, settings or audit_log writes.
-- Roles belong to the cluster, not the database, so a second database on the
-- same server finds them already there. The privileges and policies are
-- granted by functions/99_access.sql, re-applied with the functions, so a
-- table or function added later is covered the next time migrate runs.

set local search_path = ceaseless, pg_catalog, public;

do $roles$
declare
    v_role text;
begin
    foreach v_role in array array['ceaseless_listener', 'ceaseless_operator', 'ceaseless_user'] loop
        if not exists (select from pg_roles where rolname = v_role) then
            execute format('create role %I nologin', v_role);
        end if;
    end loop;
end;
$roles$;

comment on role ceaseless_listener is
    'ceaseless: what a listener needs (claims, runs, leases, firing, delivery); sees every row.';
comment on role ceaseless_operator is
    'ceaseless: views, cancel/retry, approvals, agents and settings; sees every row.';
comment on role ceaseless_user is
    'ceaseless: its own routines, jobs and events; row-level security hides everyone else''s.';

-- Owners default to whoever inserts the row, so a user role cannot forget to
-- say who it is, and a policy's WITH CHECK refuses a row claiming another.
alter table routines alter column user_id set default current_user;
alter table events alter column user_id set default current_user;

-- The job's owner: the role that enqueued it, or the owner of the routine or
-- loop it runs for. Distinct from `owner`, which is the forge repository's
-- owner of seed 002. Existing jobs belong to the role that ran this migration
-- (no user role could reach them before).
alter table job add column user_id text not null default current_user;
comment on column job.user_id is
    'The role that owns this job (enqueued it, or owns its routine or loop); RLS shows a user role only its own.';
-- Policies filter user roles' reads by it.
create index job_user_idx on job (user_id, created_at desc);

-- A notification belongs to the owner of what it reports on, so a user sees
-- the notifications of its own routines.
alter table notifications add column user_id text not null default current_user;
comment on column notifications.user_id is
    'The owner of the routine or loop this notification reports on.';

alter table routines enable row level security;
alter table routine_runs enable row level security;
alter table job enable row level security;
alter table agent_run enable row level security;
alter table events enable row level security;
alter table notifications enable row level security;
alter table loops enable row level security;
alter table topology_runs enable row level security;
alter table approvals enable row level security;

-- The listener and operators see and change every row. Policies apply to
-- members of the role, so a login role granted ceaseless_operator is covered.
-- (The tables' owner, usually the superuser that migrates, bypasses RLS.)
create policy all_rows on routines to ceaseless_listener, ceaseless_operator
    using (true) with check (true);
create policy all_rows on routine_runs to ceaseless_listener, ceaseless_operator
    using (true) with check (true);
create policy all_rows on job to ceaseless_listener, ceaseless_operator
    using (true) with check (true);
create policy all_rows on agent_run to ceaseless_listener, ceaseless_operator
    using (true) with check (true);
create policy all_rows on events to ceaseless_listener, ceaseless_operator
    using (true) with check (true);
create policy all_rows on notifications to ceaseless_listener, ceaseless_operator
    using (true) with check (true);
create policy all_rows on loops to ceaseless_listener, ceaseless_operator
    using (true) with check (true);
create policy all_rows on topology_runs to ceaseless_listener, ceaseless_operator
    using (true) with check (true);
create policy all_rows on approvals to ceaseless_listener, ceaseless_operator
    using (true) with check (true);

-- A user role: its own rows only, like pg_cron's cron.job policy. WITH CHECK
-- refuses a row (or an update) that would name another owner, so a user can
-- neither plant work in someone else's name nor hand its own away.
create policy own_rows on routines to ceaseless_user
    using (user_id = current_user) with check (user_id = current_user);
create policy own_rows on job to ceaseless_user
    using (user_id = current_user) with check (user_id = current_user);
create policy own_rows on events to ceaseless_user
    using (user_id = current_user) with check (user_id = current_user);
create policy own_rows on notifications to ceaseless_user
    using (user_id = current_user);
-- Runs belong to whoever owns what they ran: the subquery is itself under
-- RLS, so it finds only the user's own routines and jobs.
create policy own_rows on routine_runs to ceaseless_user
    using (exists (select from routines r where r.id = routine_id));
create policy own_rows on agent_run to ceaseless_user
    using (exists (select from job j where j.id = job_id));
-- Loops, topology runs and approvals have no user policy yet: a user role
-- sees none of them until loops carry their owner (the loops work).
