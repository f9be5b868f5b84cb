-- Webhooks: HMAC-SHA256 verification in SQL, replay protection, and firing.
--
-- Called by: the listener's HTTP ingress (POST /hooks/{path}), or anyone with
-- the raw request in hand.
-- Guarantees: the signature is checked in constant time over the exact bytes
-- received; a timestamp more than webhook_window_secs from now is refused; a
-- signature is accepted once per window (the unique constraint
-- signature_seen_once decides, so concurrent replays cannot both pass);
-- refusals raise the documented SQLSTATEs (docs/errors.md), which the ingress
-- maps to HTTP status codes. No pgcrypto: HMAC is built on sha256().

set local search_path = ceaseless, pg_catalog, public;

-- HMAC-SHA256 (RFC 2104) over the built-in sha256().
create or replace function _hmac_sha256(p_key bytea, p_message bytea)
returns bytea
language plpgsql immutable strict
set search_path = pg_catalog, ceaseless
as $$
declare
    v_block integer := 64;
    v_key bytea := case when length(p_key) > 64 then sha256(p_key) else p_key end;
    v_inner bytea;
    v_outer bytea;
begin
    v_key := v_key || decode(repeat('00', v_block - length(v_key)), 'hex');
    v_inner := v_key;
    v_outer := v_key;
    for i in 0 .. v_block - 1 loop
        v_inner := set_byte(v_inner, i, get_byte(v_key, i) # 54);  -- 0x36
        v_outer := set_byte(v_outer, i, get_byte(v_key, i) # 92);  -- 0x5c
    end loop;
    return sha256(v_outer || sha256(v_inner || p_message));
end;
$$;

comment on function _hmac_sha256(bytea, bytea) is
    'HMAC-SHA256 of p_message under p_key (RFC 2104), built on sha256() so no extension is needed.';

-- Compare two digests without an early exit, so the time taken does not tell
-- an attacker how many leading bytes of a forged signature were right.
create or replace function _equal_constant_time(p_a bytea, p_b bytea)
returns boolean
language plpgsql immutable strict
set search_path = pg_catalog, ceaseless
as $$
declare
    v_diff integer := 0;
begin
    if length(p_a) <> length(p_b) then
        return false;  -- lengths are public: every digest here is 32 bytes
    end if;
    for i in 0 .. length(p_a) - 1 loop
        v_diff := v_diff | (get_byte(p_a, i) # get_byte(p_b, i));
    end loop;
    return v_diff = 0;
end;
$$;

comment on function _equal_constant_time(bytea, bytea) is
    'True when two byte strings are equal, examining every byte whatever the first difference.';

-- Does `sha256=<hex>` sign `<unix seconds>.<body>` under p_key?
create or replace function _webhook_signature_ok(
    p_key text, p_sent_at timestamptz, p_body bytea, p_signature text
)
returns boolean
language plpgsql immutable
set search_path = pg_catalog, ceaseless
as $$
begin
    if p_signature is null or p_signature !~ '^sha256=[0-9a-f]{64}$' then
        return false;
    end if;
    -- Never NULL: the HMAC of a NULL key or body is NULL, and a caller's
    -- `if not ...` would let NULL through.
    return coalesce(_equal_constant_time(
        decode(substr(p_signature, 8), 'hex'),
        _hmac_sha256(convert_to(p_key, 'UTF8'),
                     convert_to(floor(extract(epoch from p_sent_at))::bigint::text || '.', 'UTF8')
                         || p_body)), false);
end;
$$;

comment on function _webhook_signature_ok(text, timestamptz, bytea, text) is
    'Verify X-Ceaseless-Signature (sha256=<lowercase hex>) = HMAC-SHA256(key, "<unix seconds>.<body>"); '
    'false, never NULL, when anything is missing.';

-- The grammar of a webhook token in a URL path: routine paths are validated
-- against it (40_routine_validation.sql), and the HTTP ingress reads it once
-- at start, so a request for a path that cannot exist is answered without a
-- round trip. One rule, one place.
create or replace function _webhook_token_pattern()
returns text
language sql immutable parallel safe
set search_path = pg_catalog
as $$ select '^[A-Za-z0-9._~-]{1,200}$' $$;

comment on function _webhook_token_pattern() is
    'The regular expression every webhook token (a routine''s trigger_config.path) matches; the '
    'ingress refuses other paths without asking the database.';

-- The webhook body as text for an agent's task: bodies are usually text
-- (JSON); anything else reaches the agent as hex.
create or replace function _webhook_body_text(p_body bytea)
returns text
language plpgsql immutable
set search_path = pg_catalog, ceaseless
as $$
begin
    return convert_from(p_body, 'UTF8');
exception when character_not_in_repertoire or untranslatable_character then
    return '\x' || encode(p_body, 'hex');
end;
$$;

comment on function _webhook_body_text(bytea) is
    'A webhook body as text: UTF-8 as it is, anything else as \x and hex.';

-- The loop half of _receive_webhook: the same verification under the loop's
-- signing key, the replay record under target 'loop', and a fire through
-- _fire_loop (56_loop_firing.sql) with the body in the iteration's task.
-- Returns the topology_runs id, and for a refused fire (a skipped run) the
-- SQLSTATE and message: CE410 the loop or an agent of its graph disabled,
-- CE412 an iteration still live.
--
-- Raises: CE403 stale timestamp; CE401 bad signature; CE413 replay.
create or replace function _receive_loop_webhook(
    p_loop loops,
    p_body bytea,
    p_signature text,
    p_sent_at timestamptz
)
returns table (run_id uuid, refused_sqlstate text, refused_message text)
language plpgsql
set search_path = pg_catalog, ceaseless
as $$
declare
    v_now constant timestamptz := now();
    v_window interval := make_interval(secs => _setting_int('webhook_window_secs'));
    v_skip text;
begin
    if p_sent_at is null or abs(extract(epoch from v_now - p_sent_at)) > extract(epoch from v_window) then
        raise exception 'webhook timestamp % is more than % from now', p_sent_at, v_window
            using errcode = 'CE403';
    end if;
    if _webhook_signature_ok(p_loop.webhook_signing_key, p_sent_at, p_body,
                             p_signature) is not true then
        raise exception 'webhook signature does not match' using errcode = 'CE401';
    end if;

    delete from webhook_deliveries where received_at < v_now - 2 * v_window;
    insert into webhook_deliveries (target, target_id, signature, sent_at, received_at)
    values ('loop', p_loop.id, p_signature, p_sent_at, v_now)
    on conflict on constraint signature_seen_once do nothing;
    if not found then
        raise exception 'webhook signature already used: a replay' using errcode = 'CE413';
    end if;

    run_id := _fire_loop(p_loop.id, 'webhook', 'webhook', _webhook_body_text(p_body), v_now);
    select r.skip_reason into v_skip from topology_runs r where r.id = run_id;
    select refusal.sqlstate, refusal.message into refused_sqlstate, refused_message
    from (values
        ('disabled', 'CE410', format('loop %s is disabled', left(p_loop.title, 200))),
        ('agent_disabled', 'CE410',
         format('an agent of loop %s is disabled', left(p_loop.title, 200))),
        ('live_iteration', 'CE412',
         format('loop %s has an iteration running; it runs one at a time',
                left(p_loop.title, 200)))
    ) refusal (skip_reason, sqlstate, message)
    where refusal.skip_reason = v_skip;
    return next;
end;
$$;

comment on function _receive_loop_webhook(loops, bytea, text, timestamptz) is
    'Verify a signed webhook request for a loop and fire it with the body in its task; a refused '
    'fire is returned (skipped run id, CE410 or CE412, message). Raises CE403/CE401/CE413.';

-- Verify a webhook request and fire what it targets, recording a refused fire
-- instead of raising.
--
-- p_token is a loop's webhook_token or a routine's trigger_config.path (loops
-- are looked up first); p_body the raw request body; p_signature the
-- X-Ceaseless-Signature header exactly as received; p_sent_at the
-- X-Ceaseless-Timestamp header as a timestamptz.
--
-- Returns the routine_runs id (for a loop: the topology_runs id) and, when a
-- guardrail refused the fire, the SQLSTATE and message receive_webhook raises
-- for it (CE410 disabled routine, loop or agent, CE411 cooldown, CE412
-- max_concurrent or a loop's live iteration, CE415 global cap, CE414
-- duplicate content): the run is then a `skipped` row. Not raising is the
-- point: the caller commits the skipped row and, above all, the replay record,
-- so a captured request refused now cannot be replayed within its window and
-- fire once the guardrail clears. The HTTP ingress calls this.
--
-- Raises (nothing is worth keeping then): CE404 unknown token; CE403 stale
-- timestamp; CE401 bad signature; CE413 replayed signature.
--
-- The time is the server's, never the caller's: with a clock of its own, a
-- caller could replay a captured request after its window, and clear the
-- replay memory by naming a time far ahead.
create or replace function _receive_webhook(
    p_token text,
    p_body bytea,
    p_signature text,
    p_sent_at timestamptz
)
returns table (run_id uuid, refused_sqlstate text, refused_message text)
language plpgsql
set search_path = pg_catalog, ceaseless
as $$
declare
    v_now constant timestamptz := now();
    v_routine routines;
    v_loop loops;
    v_window interval := make_interval(secs => _setting_int('webhook_window_secs'));
    v_run record;
    v_body text;
begin
    -- Loops first: a loop's token is generated ('loop_' + 64 hex), a
    -- routine's path chosen by its owner, so a routine named like a loop's
    -- token must not capture the loop's requests.
    select * into v_loop from loops where webhook_token = p_token;
    if found then
        return query select * from _receive_loop_webhook(v_loop, p_body, p_signature, p_sent_at);
        return;
    end if;
    select * into v_routine
    from routines
    where trigger_type = 'webhook' and trigger_config ->> 'path' = p_token;
    if not found then
        raise exception 'no webhook at %', left(p_token, 200) using errcode = 'CE404';
    end if;

    -- Authenticate before saying anything else about the routine.
    if p_sent_at is null or abs(extract(epoch from v_now - p_sent_at)) > extract(epoch from v_window) then
        raise exception 'webhook timestamp % is more than % from now', p_sent_at, v_window
            using errcode = 'CE403';
    end if;
    -- `is not true`: a check that cannot decide refuses.
    if _webhook_signature_ok(v_routine.trigger_config ->> 'secret', p_sent_at, p_body,
                             p_signature) is not true then
        raise exception 'webhook signature does not match' using errcode = 'CE401';
    end if;

    delete from webhook_deliveries where received_at < v_now - 2 * v_window;
    insert into webhook_deliveries (target, target_id, signature, sent_at, received_at)
    values ('routine', v_routine.id, p_signature, p_sent_at, v_now)
    on conflict on constraint signature_seen_once do nothing;
    if not found then
        raise exception 'webhook signature already used: a replay' using errcode = 'CE413';
    end if;

    v_body := _webhook_body_text(p_body);

    select f.run_id, f.skip_reason into v_run
    from _fire_routines(array[v_routine.id], 'webhook', v_now, array[p_token], array[v_body]) f;
    run_id := v_run.run_id;
    select refusal.sqlstate, refusal.message into refused_sqlstate, refused_message
    from (values
        ('disabled', 'CE410', format('routine %s is disabled', v_routine.name)),
        ('agent_disabled', 'CE410',
         format('the agent %s of routine %s is disabled', v_routine.agent, v_routine.name)),
        ('cooldown', 'CE411', format('routine %s is cooling down', v_routine.name)),
        ('concurrency', 'CE412', format('routine %s is at its max_concurrent runs', v_routine.name)),
        ('global_cap', 'CE415',
         format('routine %s cannot start: the global cap of running routine runs '
                '(routine_max_running) is reached', v_routine.name)),
        ('dedup', 'CE414',
         format('routine %s already ran for this content within its dedup window', v_routine.name))
    ) refusal (skip_reason, sqlstate, message)
    where refusal.skip_reason = v_run.skip_reason;
    return next;
end;
$$;

comment on function _receive_webhook(text, bytea, text, timestamptz) is
    'Verify a signed webhook request and fire its loop or routine; a fire refused by a guardrail is '
    'returned (skipped run id, SQLSTATE, message) instead of raised, so the caller commits its '
    'record and the replay memory. Raises CE404/CE403/CE401/CE413.';

-- Verify a webhook request and fire what it targets (spec section 7): the
-- public form, which raises for every refusal.
--
-- Returns the routine_runs id, or for a loop's token the topology_runs id.
-- Raises (docs/errors.md): CE404 unknown token; CE401 bad signature; CE403
-- stale timestamp; CE413 replayed signature; CE410 the routine or loop or its
-- agent is disabled; CE411 cooldown; CE412 the routine's max_concurrent or
-- the loop's live iteration; CE415 the global cap; CE414 duplicate content.
-- A guardrail's raise rolls back the refused fire's skipped row and the
-- signature's replay record with it. Callers that must keep both (anything
-- facing the network, like the HTTP ingress) call _receive_webhook and commit.
create or replace function receive_webhook(
    p_token text,
    p_body bytea,
    p_signature text,
    p_sent_at timestamptz
)
returns uuid
language plpgsql
set search_path = pg_catalog, ceaseless
as $$
declare
    v_received record;
begin
    select * into v_received from _receive_webhook(p_token, p_body, p_signature, p_sent_at);
    if v_received.refused_sqlstate is not null then
        raise exception '%', v_received.refused_message using errcode = v_received.refused_sqlstate;
    end if;
    return v_received.run_id;
end;
$$;

comment on function receive_webhook(text, bytea, text, timestamptz) is
    'Verify a signed webhook request (HMAC-SHA256, 300 s window, replay refusal) and fire its '
    'loop or routine; returns the topology_runs or routine_runs id. Raises CE404/CE401/CE403/CE413/CE410/CE411/CE412/CE414/'
    'CE415 (a guardrail''s raise rolls back the refused fire''s record: see _receive_webhook).';

-- Replaced by _receive_webhook, which returns a refused fire instead of
-- raising, so its record needs no second trip.
drop function if exists _record_refused_webhook(text, text, bytea, timestamptz);
