-- Webhooks: the one receive path of routines and loops: look the token up,
-- verify the request under its target's scheme, remember it against replays,
-- fire through the trigger layer (_fire_schedules, 32_schedules.sql).
--
-- Called by: the listener's HTTP ingress (POST /hooks/{path}), or anyone with
-- the raw request in hand.
-- Guarantees: the signature is checked in constant time over the exact bytes
-- received, under the target's scheme (35_webhook_schemes.sql); a signed
-- timestamp more than webhook_window_secs from now is refused; a request is
-- accepted once per window (its replay keys, under the unique constraint
-- signature_seen_once, so concurrent replays cannot both pass); refusals
-- raise the documented SQLSTATEs (docs/errors.md), which the ingress maps to
-- HTTP status codes.

-- The grammar of a webhook token in a URL path: routine paths are validated
-- against it (40_routine_validation.sql), loop tokens are generated in it
-- (55_loop_validation.sql), and the HTTP ingress reads it once
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
as $$
begin
    return convert_from(p_body, 'UTF8');
exception when character_not_in_repertoire or untranslatable_character then
    return '\x' || encode(p_body, 'hex');
end;
$$;

comment on function _webhook_body_text(bytea) is
    'A webhook body as text: UTF-8 as it is, anything else as \x and hex.';

-- Verify a webhook request and fire what it targets, recording a refused fire
-- instead of raising.
--
-- p_token is a loop's webhook_token or a routine's trigger_config.path;
-- p_body the raw request body; p_headers the request's headers as a jsonb
-- object of name → value (any case; the ingress passes those named by
-- _webhook_header_names()). The target's scheme says which headers sign it
-- (35_webhook_schemes.sql).
--
-- Returns the run's id (a routine_runs id, or a loop's topology_runs id; a
-- held_fires id when the fire waits: buffered by the overlap policy, or
-- debounced) and, when a guardrail refused the fire, the SQLSTATE and message receive_webhook
-- raises for it (CE410 the routine, loop or agent disabled, CE411 cooldown,
-- CE412 max_concurrent or a loop's live iteration, CE414 duplicate content,
-- CE415 the global cap): the run is then a `skipped` row. Not
-- raising is the point: the caller commits the skipped row and, above all,
-- the replay record, so a captured request refused now cannot be replayed
-- within its window and fire once the guardrail clears. The HTTP ingress
-- calls this. The body reaches the run: a routine's context (and dedup key),
-- a loop iteration's task.
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
as $$
declare
    v_now constant timestamptz := now();
    v_window interval := make_interval(secs => _setting_int('webhook_window_secs'));
    v_target record;
    v_verified record;
    v_run record;
begin
    -- Loops first: a loop's token is generated ('loop_' + 64 hex), a
    -- routine's path chosen by its owner, so a routine named like a loop's
    -- token must not capture the loop's requests. What the run records as
    -- fired it is a routine's path, never a loop's token, its credential.
    select t.* into v_target
    from (select 1 as precedence, 'loop'::text as kind, l.id, left(l.title, 200) as name,
                 null::text as agent, l.triggers ->> 'webhook_scheme' as scheme,
                 l.webhook_signing_key as signing_key, 'webhook'::text as detail
          from loops l
          where l.webhook_token = p_token
          union all
          -- idx_routines_webhook_path: the same expression and predicate.
          select 2, 'routine', r.id, left(r.name, 200), r.agent, r.trigger_config ->> 'scheme',
                 r.trigger_config ->> 'secret', p_token
          from routines r
          where r.trigger_type = 'webhook' and r.trigger_config ->> 'path' = p_token) t
    order by t.precedence
    limit 1;
    if not found then
        raise exception 'no webhook at %', left(p_token, 200) using errcode = 'CE404';
    end if;

    -- Authenticate before saying anything else about the target.
    select * into v_verified
    from _webhook_verify(v_target.scheme, v_target.signing_key, p_body, p_headers, v_now,
                         v_window);
    perform _webhook_remember(v_target.kind, v_target.id, v_verified.replay_keys,
                              v_verified.sent_at, v_now, v_window);

    select f.run_id, f.status, f.skip_reason into v_run
    from _fire_schedules(v_target.kind, array[v_target.id], 'webhook', v_now,
                         array[v_target.detail], array[_webhook_body_text(p_body)]) f;
    run_id := v_run.run_id;
    -- Each message names the kind and the routine or loop (%1$s %2$s), and a
    -- routine's agent (%3$s): a loop's graph has several.
    select refusal.sqlstate, format(refusal.message, v_target.kind, v_target.name, v_target.agent)
    into refused_sqlstate, refused_message
    from (values
        ('disabled', 'CE410', '%1$s %2$s is disabled'),
        ('agent_disabled', 'CE410',
         case when v_target.agent is null then 'an agent of %1$s %2$s is disabled'
              else 'the agent %3$s of %1$s %2$s is disabled' end),
        ('cooldown', 'CE411', '%1$s %2$s is cooling down'),
        ('concurrency', 'CE412', '%1$s %2$s is at its max_concurrent runs'),
        ('live_iteration', 'CE412', '%1$s %2$s has an iteration running; it runs one at a time'),
        ('global_cap', 'CE415',
         '%1$s %2$s cannot start: the global cap of running routine runs (routine_max_running) '
         'is reached'),
        ('dedup', 'CE414', '%1$s %2$s already ran for this content within its dedup window')
    ) refusal (skip_reason, sqlstate, message)
    -- A held fire (buffered: the skip reason names its blocker) is no
    -- refusal: it will start (33_held_fires.sql).
    where refusal.skip_reason = v_run.skip_reason and v_run.status = 'skipped';
    return next;
end;
$$;

comment on function _receive_webhook(text, bytea, jsonb) is
    'Verify a webhook request (raw body and headers) under its target''s scheme and fire its loop '
    'or routine; a fire refused by a guardrail is returned (skipped run id, SQLSTATE, message) '
    'instead of raised, so the caller commits its record and the replay memory. Raises '
    'CE404/CE403/CE401/CE413.';

-- _receive_webhook for a caller holding the ceaseless scheme's signature and
-- time apart rather than as headers (psql, a script).
create or replace function _receive_webhook(
    p_token text,
    p_body bytea,
    p_signature text,
    p_sent_at timestamptz
)
returns table (run_id uuid, refused_sqlstate text, refused_message text)
language sql
as $$
    select * from _receive_webhook(p_token, p_body, _webhook_ceaseless_headers(p_signature, p_sent_at));
$$;

comment on function _receive_webhook(text, bytea, text, timestamptz) is
    '_receive_webhook with the X-Ceaseless-Signature value and the X-Ceaseless-Timestamp time given '
    'apart; a target of another scheme refuses it (CE401).';

-- Verify a webhook request and fire what it targets: the public form, which
-- raises for every refusal.
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

-- receive_webhook for a caller holding the ceaseless scheme's signature
-- header value and timestamp apart.
create or replace function receive_webhook(
    p_token text,
    p_body bytea,
    p_signature text,
    p_sent_at timestamptz
)
returns uuid
language sql
as $$
    select receive_webhook(p_token, p_body, _webhook_ceaseless_headers(p_signature, p_sent_at));
$$;

comment on function receive_webhook(text, bytea, text, timestamptz) is
    'Verify a ceaseless-signed webhook request (HMAC-SHA256, 300 s window, replay refusal) and fire '
    'its loop or routine; returns the topology_runs or routine_runs id. Raises CE404/CE401/CE403/'
    'CE413/CE410/CE411/CE412/CE414/CE415 (a guardrail''s raise rolls back the refused fire''s '
    'record: see _receive_webhook).';
