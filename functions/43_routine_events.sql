-- Events: INSERT INTO events fires the user's matching event routines and
-- event loops in the inserting transaction.
--
-- Called by: PostgreSQL (BEFORE INSERT trigger on events).
-- Guarantees: a routine fires when its user equals the event's, its channel
-- (when set) equals the event's ignoring case, and its pattern matches
-- anywhere in the content; all of an event's routines fire in one call of the
-- one firing path (42_routine_firing.sql), so an event that fires several
-- routines takes no lock per routine and cannot deadlock with anything that
-- ends their runs; a refused fire (cooldown, dedup, ...) is recorded and
-- dropped; a matching loop fires through the loops' one firing path
-- (_fire_loop, 56_loop_firing.sql), one loop at a time in id order, so two
-- events that fire the same loops take its lock in one order; a refused loop
-- fire (a live iteration, the loop disabled) is recorded as a skipped run;
-- events.fired_count says how many runs and iterations started.

-- The event routines of p_user_id whose literal occurs in p_content: the
-- candidates whose channel and pattern the event's trigger then checks.
--
-- Two ways to find them, the cheaper one chosen per event. Reading a
-- routine's entry and literal costs about a quarter of an index probe, so a
-- user with no more event routines than a quarter of the content's
-- four-character windows (a handful of routines, or a long event) is read
-- whole. Otherwise each distinct window of the content is probed in
-- routines_event_key_idx (db/0005_event_key.sql), and the routines whose
-- literal is too short to have a key are added: a thousand routines then
-- cost what ten do.
create or replace function _event_candidates(p_user_id text, p_content text)
returns setof uuid
language plpgsql stable
-- The probe's generic plan guesses a thousand windows and looks dearer than
-- the plan for this event's actual few, so PL/pgSQL would plan it afresh on
-- every event; its shape is fixed by the LATERAL fence anyway, so the one
-- generic plan is the right one. Measured on PostgreSQL 15 and 18: one
-- planning per event without it, none with; 0.14-0.16 ms a call with it,
-- 0.30-0.40 without; bin/bench event fan-in matches 20-26 % fewer events a
-- second without (docs/performance.md, "Planner settings on functions").
set plan_cache_mode = force_generic_plan
as $$
declare
    v_windows integer := greatest(char_length(p_content) - 3, 0);
    v_few integer := v_windows / 4;
    v_ids uuid[];
    v_literals text[];
begin
    -- One more than "few" from each index tells whether there are more.
    select array_agg(u.id), array_agg(u.event_literal) into v_ids, v_literals
    from ((select r.id, r.event_literal
           from routines r
           where r.user_id = p_user_id and r.enabled and r.trigger_type = 'event'
             and char_length(r.event_literal) >= 4
           limit v_few + 1)
          union all
          (select r.id, r.event_literal
           from routines r
           where r.user_id = p_user_id and r.enabled and r.trigger_type = 'event'
             and char_length(r.event_literal) < 4
           limit v_few + 1)) u;
    if coalesce(cardinality(v_ids), 0) <= v_few then
        return query
        select u.id from unnest(v_ids, v_literals) as u(id, literal)
        where strpos(p_content, u.literal) > 0;
        return;
    end if;

    return query
    select r.id
    from (select distinct substr(p_content, i, 4) as key
          from generate_series(1, v_windows) i) w
    -- One probe per window, both columns of the key index equal: with
    -- `key = any (windows)` instead, a planner without statistics prefers
    -- reading all of the user's routines through another index.
    cross join lateral (
        select r.id, r.event_literal
        from routines r
        where r.user_id = p_user_id and right(r.event_literal, 4) = w.key
          and r.enabled and r.trigger_type = 'event' and char_length(r.event_literal) >= 4
        offset 0
    ) r
    where strpos(p_content, r.event_literal) > 0
    union all
    select r.id
    from routines r
    where r.user_id = p_user_id and r.enabled and r.trigger_type = 'event'
      and char_length(r.event_literal) < 4
      and strpos(p_content, r.event_literal) > 0;
end;
$$;

comment on function _event_candidates(text, text) is
    'The enabled event routines of a user whose literal occurs in the content, found by reading '
    'them all or by probing routines_event_key_idx, whichever is cheaper for this event.';

-- Fire every matching event routine of the event's user, in the inserting
-- transaction, through the one firing path.
create or replace function _tg_events_fire()
returns trigger
language plpgsql
as $$
declare
    v_ids uuid[];
    v_count integer;
    v_loop_id uuid;
    v_run_id uuid;
begin
    -- Every candidate's pattern runs over the whole content, and the content
    -- is copied into each run's prompt: a cap bounds both (_input_cap).
    perform _refuse_long('events.content', new.content, 'event_content');
    -- The payload is stored with the event, so it is bounded too; an empty
    -- one (the default) costs no cast.
    if new.payload <> '{}'::jsonb then
        perform _refuse_long('events.payload', new.payload::text, 'event_payload');
    end if;
    select array_agg(r.id order by r.id) into v_ids
    -- The candidates passed the literal test, which rules most routines out
    -- without compiling their pattern (db/0004_event_literal.sql); each is
    -- read by primary key (OFFSET 0 keeps it that way).
    from _event_candidates(new.user_id, new.content) as c(id)
    cross join lateral (
        select r.id, r.trigger_config from routines r where r.id = c.id offset 0
    ) r
    where (r.trigger_config ->> 'channel' is null
           or lower(r.trigger_config ->> 'channel') = lower(new.channel))
      and new.content ~ (r.trigger_config ->> 'pattern');

    v_count := coalesce(cardinality(v_ids), 0);
    new.fired_count := 0;
    if v_count > 0 then
        select count(*) filter (where f.status = 'running') into new.fired_count
        from _fire_routines(v_ids, 'event', new.created_at,
                            array_fill(left(new.content, 200), array[v_count]),
                            array_fill(new.content, array[v_count])) f;
    end if;

    -- The user's enabled event loops (loops_event_idx), each matched as a
    -- routine is and fired through _fire_loop, in id order.
    for v_loop_id in
        select l.id
        from loops l
        where l.user_id = new.user_id and l.enabled and l.triggers ? 'event'
          and (l.triggers #>> '{event,channel}' is null
               or lower(l.triggers #>> '{event,channel}') = lower(new.channel))
          and new.content ~ (l.triggers #>> '{event,pattern}')
        order by l.id
    loop
        v_run_id := _fire_loop(v_loop_id, 'event', left(new.content, 200), new.content,
                               new.created_at);
        new.fired_count := new.fired_count
            + (select count(*) from topology_runs r where r.id = v_run_id and r.status <> 'skipped');
    end loop;
    return new;
end;
$$;

comment on function _tg_events_fire() is
    'Before INSERT on events: fire the user''s matching event routines (all in one call of '
    '_fire_routines) and event loops (each through _fire_loop) in the same transaction.';

create or replace trigger events_fire
    before insert on events
    for each row execute function _tg_events_fire();
