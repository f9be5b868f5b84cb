-- Webhooks: HMAC-SHA256 verification in SQL, replay protection, and firing.
--
-- Called by: the listener's HTTP ingress (POST /hooks/{path}), or anyone with
-- the raw request in hand.
-- Guarantees: the signature is checked in constant time over the exact bytes
-- received, under the target's scheme (46_webhook_schemes.sql); a signed
-- timestamp more than webhook_window_secs from now is refused; a request is
-- accepted once per window (its replay keys, under the unique constraint
-- signature_seen_once, so concurrent replays cannot both pass);
-- refusals raise the documented SQLSTATEs (docs/errors.md), which the ingress
-- maps to HTTP status codes. No pgcrypto: HMAC is built on sha256().

set local search_path = ceaseless, pg_catalog, pg_temp;

-- HMAC-SHA256 (RFC 2104) over the built-in sha256().
create or replace function _hmac_sha256(p_key bytea, p_message bytea)
returns bytea
language plpgsql immutable strict
set search_path = pg_catalog, ceaseless, pg_temp
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
set search_path = pg_catalog, ceaseless, pg_temp
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

-- The grammar of a webhook token in a URL path: routine paths are validated
-- against it (40_routine_validation.sql), and the HTTP ingress reads it once
-- at start, so a request for a path that cannot exist is answered without a
-- round trip. One rule, one place.
create or replace function _webhook_token_pattern()
returns text
language sql immutable parallel safe
set search_path = pg_catalog, pg_temp
as $$ select '^[A-Za-z0-9._~-]{1,200}$' $$;

comment on function _webhook_token_pattern() is
    'The regular expression every webhook token (a routine''s trigger_config.path) matches; the '
    'ingress refuses other paths without asking the database.';

-- The webhook body as text for an agent's task: bodies are usually text
-- (JSON); anything else reaches the agent as hex.
create or replace function _webhook_body_text(p_body bytea)
returns text
language plpgsql immutable
set search_path = pg_catalog, ceaseless, pg_temp
as $$
begin
    return convert_from(p_body, 'UTF8');
exception when character_not_in_repertoire or untranslatable_character then
    return '\x' || encode(p_body, 'hex');
end;
$$;

comment on function _webhook_body_text(bytea) is
    'A webhook body as text: UTF-8 as it is, anything else as \x and hex.';

-- The loop half of _receive_webhook: verification under the loop's scheme
-- (triggers.webhook_scheme) and signing key, the replay record under target
-- 'loop', and a fire through _fire_loop (56_loop_firing.sql) with the body in
-- the iteration's task. Returns the topology_runs id, and for a refused fire
-- (a skipped run) the SQLSTATE and message: CE410 the loop or an agent of its
-- graph disabled, CE412 an iteration still live.
--
-- Raises: CE403 stale timestamp; CE401 bad signature; CE413 replay.
create or replace function _receive_loop_webhook(
    p_loop loops,
    p_body bytea,
    p_headers jsonb
)
returns table (run_id uuid, refused_sqlstate text, refused_message text)
language plpgsql
set search_path = pg_catalog, ceaseless, pg_temp
as $$
declare
    v_now constant timestamptz := now();
    v_window interval := make_interval(secs => _setting_int('webhook_window_secs'));
    v_verified record;
    v_skip text;
begin
    select * into v_verified
    from _webhook_verify(p_loop.triggers ->> 'webhook_scheme', p_loop.webhook_signing_key, p_body,
                         p_headers, v_now, v_window);
    perform _webhook_remember('loop', p_loop.id, v_verified.replay_keys, v_verified.sent_at,
                              v_now, v_window);

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

comment on function _receive_loop_webhook(loops, bytea, jsonb) is
    'Verify a webhook request for a loop under its scheme and fire it with the body in its task; a '
    'refused fire is returned (skipped run id, CE410 or CE412, message). Raises CE403/CE401/CE413.';

-- Verify a webhook request and fire what it targets, recording a refused fire
-- instead of raising.
--
-- p_token is a loop's webhook_token or a routine's trigger_config.path (loops
-- are looked up first); p_body the raw request body; p_headers the request's
-- headers as a jsonb object of name → value (any case; the ingress passes
-- those named by _webhook_header_names()). The target's scheme says which
-- headers sign it (46_webhook_schemes.sql).
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
-- timestamp; CE401 bad signature; CE413 replayed request.
--
-- The time is the server's, never the caller's: with a clock of its own, a
-- caller could replay a captured request after its window, and clear the
-- replay memory by naming a time far ahead.
create or replace function _receive_webhook(
    p_token text,
    p_body bytea,
    p_headers jsonb
)
returns table (run_id uuid, refused_sqlstate text, refused_message text)
language plpgsql
set search_path = pg_catalog, ceaseless, pg_temp
as $$
declare
    v_now constant timestamptz := now();
    v_routine routines;
    v_loop loops;
    v_window interval := make_interval(secs => _setting_int('webhook_window_secs'));
    v_verified record;
    v_run record;
    v_body text;
begin
    -- Loops first: a loop's token is generated ('loop_' + 64 hex), a
    -- routine's path chosen by its owner, so a routine named like a loop's
    -- token must not capture the loop's requests.
    select * into v_loop from loops where webhook_token = p_token;
    if found then
        return query select * from _receive_loop_webhook(v_loop, p_body, p_headers);
        return;
    end if;
    select * into v_routine
    from routines
    where trigger_type = 'webhook' and trigger_config ->> 'path' = p_token;
    if not found then
        raise exception 'no webhook at %', left(p_token, 200) using errcode = 'CE404';
    end if;

    -- Authenticate before saying anything else about the routine.
    select * into v_verified
    from _webhook_verify(v_routine.trigger_config ->> 'scheme', v_routine.trigger_config ->> 'secret',
                         p_body, p_headers, v_now, v_window);
    perform _webhook_remember('routine', v_routine.id, v_verified.replay_keys, v_verified.sent_at,
                              v_now, v_window);

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

comment on function _receive_webhook(text, bytea, jsonb) is
    'Verify a webhook request (raw body and headers) under its target''s scheme and fire its loop '
    'or routine; a fire refused by a guardrail is returned (skipped run id, SQLSTATE, message) '
    'instead of raised, so the caller commits its record and the replay memory. Raises '
    'CE404/CE403/CE401/CE413.';

-- The spec section 7 form of _receive_webhook: the ceaseless scheme's
-- signature and time given apart.
create or replace function _receive_webhook(
    p_token text,
    p_body bytea,
    p_signature text,
    p_sent_at timestamptz
)
returns table (run_id uuid, refused_sqlstate text, refused_message text)
language plpgsql  -- not sql: its helper is created later, in 46_webhook_schemes.sql
set search_path = pg_catalog, ceaseless, pg_temp
as $$
begin
    return query
    select * from _receive_webhook(p_token, p_body, _webhook_ceaseless_headers(p_signature, p_sent_at));
end;
$$;

comment on function _receive_webhook(text, bytea, text, timestamptz) is
    '_receive_webhook with the X-Ceaseless-Signature value and the X-Ceaseless-Timestamp time given '
    'apart (spec section 7); a target of another scheme refuses it (CE401).';

-- Verify a webhook request and fire what it targets (spec sections 7 and
-- 11): the public form, which raises for every refusal.
--
-- p_headers: the request's headers, name → value (see _receive_webhook).
-- Returns the routine_runs id, or for a loop's token the topology_runs id.
-- Raises (docs/errors.md): CE404 unknown token; CE401 bad signature; CE403
-- stale timestamp; CE413 replayed request; CE410 the routine or loop or its
-- agent is disabled; CE411 cooldown; CE412 the routine's max_concurrent or
-- the loop's live iteration; CE415 the global cap; CE414 duplicate content.
-- A guardrail's raise rolls back the refused fire's skipped row and the
-- request's replay record with it. Callers that must keep both (anything
-- facing the network, like the HTTP ingress) call _receive_webhook and commit.
create or replace function receive_webhook(
    p_token text,
    p_body bytea,
    p_headers jsonb
)
returns uuid
language plpgsql
set search_path = pg_catalog, ceaseless, pg_temp
as $$
declare
    v_received record;
begin
    select * into v_received from _receive_webhook(p_token, p_body, p_headers);
    if v_received.refused_sqlstate is not null then
        raise exception '%', v_received.refused_message using errcode = v_received.refused_sqlstate;
    end if;
    return v_received.run_id;
end;
$$;

comment on function receive_webhook(text, bytea, jsonb) is
    'Verify a webhook request (raw body and headers, under the target''s scheme: ceaseless, github, '
    'standard or stripe) and fire its loop or routine; returns the topology_runs or routine_runs id. '
    'Raises CE404/CE401/CE403/CE413/CE410/CE411/CE412/CE414/CE415.';

-- The spec section 7 form: the ceaseless scheme's signature header value and
-- timestamp given apart.
create or replace function receive_webhook(
    p_token text,
    p_body bytea,
    p_signature text,
    p_sent_at timestamptz
)
returns uuid
language plpgsql  -- not sql: its helper is created later, in 46_webhook_schemes.sql
set search_path = pg_catalog, ceaseless, pg_temp
as $$
begin
    return receive_webhook(p_token, p_body, _webhook_ceaseless_headers(p_signature, p_sent_at));
end;
$$;

comment on function receive_webhook(text, bytea, text, timestamptz) is
    'Verify a ceaseless-signed webhook request (HMAC-SHA256, 300 s window, replay refusal) and fire '
    'its loop or routine; returns the topology_runs or routine_runs id. Raises CE404/CE401/CE403/'
    'CE413/CE410/CE411/CE412/CE414/CE415 (a guardrail''s raise rolls back the refused fire''s '
    'record: see _receive_webhook).';
