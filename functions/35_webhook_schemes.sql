-- Webhook signatures: HMAC-SHA256 built on sha256() (no pgcrypto), the four
-- signature schemes (ceaseless, github, standard for Standard Webhooks,
-- stripe), each verified here, in SQL, over the raw body and the request's
-- headers, the replay memory, and the signing keys a loop's webhook gets.
--
-- Called by: _receive_webhook (36_webhooks.sql), which looks up the target
-- and its scheme; routine and loop validation (31_trigger_validation.sql,
-- 40_routine_validation.sql, 55_loop_validation.sql), which refuse an
-- unknown scheme or a secret the scheme cannot use, and generate a loop's
-- token and key; the HTTP ingress, which reads _webhook_header_names() once
-- at start and passes those headers only.
-- Guarantees: every comparison of a digest is constant time
-- (_equal_constant_time); a header that is missing or malformed refuses
-- (CE401, or CE403 for a timestamp), never errors otherwise and never lets a
-- request through; the replay keys a scheme returns are remembered by
-- _webhook_remember under the unique constraint signature_seen_once, so two
-- racing copies of one request cannot both pass.

-- HMAC-SHA256 (RFC 2104) over the built-in sha256().
create or replace function _hmac_sha256(p_key bytea, p_message bytea)
returns bytea
language plpgsql immutable strict
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

-- The schemes a routine's trigger_config.scheme or a loop's
-- triggers.webhook_scheme may name; absent means ceaseless.
create or replace function _webhook_schemes()
returns text[]
language sql immutable parallel safe
set search_path = pg_catalog, pg_temp
as $$ select array['ceaseless', 'github', 'standard', 'stripe'] $$;

comment on function _webhook_schemes() is
    'The webhook signature schemes a routine or loop may name: ceaseless (the default), github, '
    'standard (Standard Webhooks) and stripe.';

-- The request headers any scheme reads, lower case. The ingress passes these
-- and no others: an Authorization or Cookie header has no business in the
-- database, and the list lives here, beside the code that reads it.
create or replace function _webhook_header_names()
returns text[]
language sql immutable parallel safe
set search_path = pg_catalog, pg_temp
as $$
    select array[
        'x-ceaseless-timestamp', 'x-ceaseless-signature',  -- ceaseless
        'x-hub-signature-256', 'x-github-delivery',         -- github
        'webhook-id', 'webhook-timestamp', 'webhook-signature',  -- standard
        'stripe-signature'                                  -- stripe
    ]
$$;

comment on function _webhook_header_names() is
    'The request headers (lower case) the webhook schemes read; the HTTP ingress passes exactly these '
    'to _receive_webhook.';

-- Why a routine's or loop's scheme value is refused, or NULL when it is
-- fine (absent or JSON null means ceaseless).
create or replace function _webhook_scheme_error(p_scheme jsonb)
returns text
language sql immutable
as $$
    select case
        when p_scheme is null or jsonb_typeof(p_scheme) = 'null' then null
        when jsonb_typeof(p_scheme) = 'string' and (p_scheme #>> '{}') = any (_webhook_schemes())
            then null
        else 'must be one of ' || array_to_string(_webhook_schemes(), ', ')
             || ' (absent means ceaseless)'
    end
$$;

comment on function _webhook_scheme_error(jsonb) is
    'Why a webhook scheme value is refused (not one of _webhook_schemes()), or NULL when it is '
    'valid or absent.';

-- Why a secret cannot sign under a scheme, or NULL. Standard Webhooks keys
-- are `whsec_` and base64 of 24 to 64 random bytes (the Standard Webhooks
-- specification's range): anything else would be a key the senders'
-- libraries refuse, or a short one. The other schemes use the secret's UTF-8
-- bytes as the HMAC key; their minimum length is the routine validator's.
create or replace function _webhook_secret_error(p_scheme text, p_secret text)
returns text
language plpgsql immutable
as $$
declare
    v_key bytea;
begin
    if coalesce(p_scheme, 'ceaseless') <> 'standard' then
        return null;
    end if;
    if p_secret is null or p_secret !~ '^whsec_[A-Za-z0-9+/]+={0,2}$' then
        return 'a standard (Standard Webhooks) secret must be whsec_ followed by base64';
    end if;
    begin
        v_key := decode(substr(p_secret, 7), 'base64');
    exception when invalid_parameter_value then
        return 'a standard (Standard Webhooks) secret must be whsec_ followed by valid base64';
    end;
    if length(v_key) not between 24 and 64 then
        return format('a standard (Standard Webhooks) secret must be whsec_ followed by the base64 '
                      'of 24 to 64 bytes, not %s', length(v_key));
    end if;
    return null;
end;
$$;

comment on function _webhook_secret_error(text, text) is
    'Why a secret cannot sign under a webhook scheme (a standard secret must be whsec_ and base64 '
    'of 24 to 64 bytes), or NULL.';


-- A fresh webhook secret for a loop: 32 random bytes (244 random bits, from
-- two v4 UUIDs, so no pgcrypto is needed) in the form p_scheme's signing key
-- takes: 64 hex characters, or for standard whsec_ and their base64. The
-- loop's token is one in the ceaseless form, prefixed.
create or replace function _webhook_new_key(p_scheme text)
returns text
language sql volatile
as $$
    select case coalesce(p_scheme, 'ceaseless')
               when 'standard' then 'whsec_' || encode(r.bytes, 'base64')
               else encode(r.bytes, 'hex')
           end
    from (select decode(replace(gen_random_uuid()::text || gen_random_uuid()::text, '-', ''),
                        'hex') as bytes) r;
$$;

comment on function _webhook_new_key(text) is
    'A fresh random webhook secret in its scheme''s form: 64 hex characters, or whsec_ and '
    'base64 for standard; a loop''s token and signing key.';

-- The headers with lower-case names and text values, whatever the caller
-- passed (a psql user may write "X-Hub-Signature-256"). Values that are not
-- strings are dropped: no scheme reads a number or an object.
create or replace function _webhook_headers(p_headers jsonb)
returns jsonb
language sql immutable
set search_path = pg_catalog, pg_temp
as $$
    select coalesce(jsonb_object_agg(lower(h.key), h.value), '{}'::jsonb)
    from jsonb_each(case when jsonb_typeof(p_headers) = 'object' then p_headers end) h
    where jsonb_typeof(h.value) = 'string'
$$;

comment on function _webhook_headers(jsonb) is
    'Request headers as a jsonb object with lower-case names and string values only.';

-- A unix-seconds header value as a time, or NULL when it is not 1 to 11
-- ASCII digits (11 digits reach the year 5138: a cast never overflows).
create or replace function _webhook_unix_time(p_value text)
returns timestamptz
language sql immutable
set search_path = pg_catalog, pg_temp
as $$
    select case when p_value ~ '^[0-9]{1,11}$' then to_timestamp(p_value::bigint) end
$$;

comment on function _webhook_unix_time(text) is
    'A header''s unix seconds (1 to 11 ASCII digits) as a timestamptz, or NULL for anything else.';

-- Refuse a request whose signed timestamp is missing or further than the
-- window from now: a captured request is good for one window at most.
--
-- Raises: CE403.
create or replace function _webhook_check_time(
    p_header text, p_value text, p_now timestamptz, p_window interval
)
returns timestamptz
language plpgsql stable
as $$
declare
    v_sent_at timestamptz := _webhook_unix_time(p_value);
begin
    if v_sent_at is null then
        raise exception 'the % header must be integer unix seconds', p_header
            using errcode = 'CE403';
    end if;
    if abs(extract(epoch from p_now - v_sent_at)) > extract(epoch from p_window) then
        raise exception 'webhook timestamp % is more than % from now', v_sent_at, p_window
            using errcode = 'CE403';
    end if;
    return v_sent_at;
end;
$$;

comment on function _webhook_check_time(text, text, timestamptz, interval) is
    'The signed timestamp of a webhook header, refused with CE403 when malformed or further than '
    'the window from now.';

-- Which of the offered signatures (at most the first 16, so a header cannot
-- buy unbounded work) equals the expected digest; NULL when none does. Each
-- candidate is compared in constant time; how many were offered is public.
create or replace function _webhook_matching(p_expected bytea, p_candidates bytea[])
returns integer
language plpgsql immutable
as $$
declare
    v_match integer;
begin
    for i in 1 .. least(coalesce(array_length(p_candidates, 1), 0), 16) loop
        if p_candidates[i] is not null
           and coalesce(_equal_constant_time(p_expected, p_candidates[i]), false)
           and v_match is null then
            v_match := i;
        end if;
    end loop;
    return v_match;
end;
$$;

comment on function _webhook_matching(bytea, bytea[]) is
    'The position of the first of up to 16 candidate signatures equal to the expected digest '
    '(each compared in constant time), or NULL.';

-- Verify one request under its target's scheme and say what to remember
-- against replays.
--
-- p_headers are the request's headers (_webhook_headers form); p_key the
-- routine's secret or the loop's signing key. Returns the replay keys (each
-- remembered for the window; any one seen before makes the request a replay)
-- and the signed time (for github, which signs none, the time received).
--
-- Per scheme:
-- - ceaseless: X-Ceaseless-Timestamp, X-Ceaseless-Signature sha256=<hex> of
--   HMAC(key, "<ts>.<body>"); replay key the signature.
-- - github: X-Hub-Signature-256 sha256=<hex> of HMAC(key, body), and
--   X-GitHub-Delivery. GitHub signs no time and not the delivery id, so both
--   the delivery id (a redelivery) and the signature (the same body resent
--   under a new id by someone who captured it) are replay keys.
-- - standard: webhook-id, webhook-timestamp, webhook-signature
--   "v1,<base64> …" of HMAC(base64-decoded key, "<id>.<ts>.<body>"); the
--   replay key is the id, which is signed.
-- - stripe: Stripe-Signature "t=<ts>,v1=<hex>,…" of HMAC(key, "<ts>.<body>");
--   replay key the matching v1 signature.
--
-- Raises: CE403 timestamp missing, malformed or outside the window; CE401
-- signature missing, malformed or wrong, or a required id header missing.
create or replace function _webhook_verify(
    p_scheme text,
    p_key text,
    p_body bytea,
    p_headers jsonb,
    p_now timestamptz,
    p_window interval
)
returns table (replay_keys text[], sent_at timestamptz)
language plpgsql stable
as $$
declare
    v_h constant jsonb := _webhook_headers(p_headers);
    v_ts text;
    v_sig text;
    v_id text;
    v_items text[];
    v_candidates bytea[];
    v_match integer;
begin
    -- A NULL key or body makes every HMAC NULL: refuse rather than compare.
    if p_key is null or p_body is null then
        raise exception 'webhook signature does not match' using errcode = 'CE401';
    end if;

    case coalesce(p_scheme, 'ceaseless')
    when 'ceaseless' then
        v_ts := btrim(v_h ->> 'x-ceaseless-timestamp');
        sent_at := _webhook_check_time('X-Ceaseless-Timestamp', v_ts, p_now, p_window);
        v_sig := v_h ->> 'x-ceaseless-signature';
        -- The signed string is the integer as the sender's clock wrote it,
        -- without leading zeros: what every ceaseless sender signs.
        if v_sig is null or v_sig !~ '^sha256=[0-9a-f]{64}$'
           or _webhook_matching(
                  _hmac_sha256(convert_to(p_key, 'UTF8'),
                               convert_to(v_ts::bigint::text || '.', 'UTF8') || p_body),
                  array[decode(substr(v_sig, 8), 'hex')]) is null then
            raise exception 'webhook signature does not match' using errcode = 'CE401';
        end if;
        replay_keys := array[v_sig];

    when 'github' then
        v_sig := v_h ->> 'x-hub-signature-256';
        if v_sig is null or v_sig !~ '^sha256=[0-9a-f]{64}$'
           or _webhook_matching(_hmac_sha256(convert_to(p_key, 'UTF8'), p_body),
                                array[decode(substr(v_sig, 8), 'hex')]) is null then
            raise exception 'webhook signature (X-Hub-Signature-256) does not match'
                using errcode = 'CE401';
        end if;
        v_id := btrim(v_h ->> 'x-github-delivery');
        if v_id is null or v_id !~ '^[A-Za-z0-9._-]{1,100}$' then
            raise exception 'the X-GitHub-Delivery header must be a delivery id'
                using errcode = 'CE401';
        end if;
        sent_at := p_now;
        replay_keys := array['github-delivery:' || v_id, v_sig];

    when 'standard' then
        v_id := v_h ->> 'webhook-id';
        if v_id is null or v_id !~ '^[\x21-\x7e]{1,255}$' then
            raise exception 'the webhook-id header must be a message id'
                using errcode = 'CE401';
        end if;
        v_ts := btrim(v_h ->> 'webhook-timestamp');
        sent_at := _webhook_check_time('webhook-timestamp', v_ts, p_now, p_window);
        -- Space-separated "v1,<base64 of 32 bytes>"; other versions are
        -- skipped, as the Standard Webhooks specification asks.
        select array_agg(decode(substr(s, 4), 'base64') order by n) into v_candidates
        from unnest((string_to_array(left(coalesce(v_h ->> 'webhook-signature', ''), 4096), ' '))[1:16])
             with ordinality as c (s, n)
        where s ~ '^v1,[A-Za-z0-9+/]{43}=$';
        v_match := _webhook_matching(
            _hmac_sha256(decode(substr(p_key, 7), 'base64'),
                         convert_to(v_id || '.' || v_ts || '.', 'UTF8') || p_body),
            v_candidates);
        if v_match is null then
            raise exception 'webhook signature (webhook-signature) does not match'
                using errcode = 'CE401';
        end if;
        replay_keys := array['webhook-id:' || v_id];

    when 'stripe' then
        v_items := (string_to_array(left(coalesce(v_h ->> 'stripe-signature', ''), 4096), ','))[1:32];
        select substr(btrim(i), 3) into v_ts
        from unnest(v_items) with ordinality as c (i, n)
        where btrim(i) like 't=%' order by n limit 1;
        if v_ts is null then
            raise exception 'the Stripe-Signature header must carry t=<unix seconds>'
                using errcode = 'CE403';
        end if;
        sent_at := _webhook_check_time('Stripe-Signature t=', v_ts, p_now, p_window);
        select array_agg(decode(substr(btrim(i), 4), 'hex') order by n) into v_candidates
        from unnest(v_items) with ordinality as c (i, n)
        where btrim(i) ~ '^v1=[0-9a-f]{64}$';
        v_match := _webhook_matching(
            _hmac_sha256(convert_to(p_key, 'UTF8'), convert_to(v_ts || '.', 'UTF8') || p_body),
            v_candidates);
        if v_match is null then
            raise exception 'webhook signature (Stripe-Signature v1) does not match'
                using errcode = 'CE401';
        end if;
        replay_keys := array['stripe:' || encode(v_candidates[v_match], 'hex')];

    else
        -- Validation refuses unknown schemes at INSERT; a row that predates
        -- a scheme's removal must not verify under a guess.
        raise exception 'unknown webhook scheme %', left(p_scheme, 60) using errcode = 'CE401';
    end case;
    return next;
end;
$$;

comment on function _webhook_verify(text, text, bytea, jsonb, timestamptz, interval) is
    'Verify a webhook request under its scheme (ceaseless, github, standard, stripe) in constant '
    'time; returns the replay keys to remember and the signed time. Raises CE403 (timestamp) or '
    'CE401 (signature, id).';

-- Remember a verified request's replay keys for the window, refusing it if
-- any was seen before; prunes what fell out of the window first, so the table
-- stays the size of one window of accepted requests.
--
-- Raises: CE413 replay (nothing is remembered then: the raise rolls back).
create or replace function _webhook_remember(
    p_target text,
    p_target_id uuid,
    p_keys text[],
    p_sent_at timestamptz,
    p_now timestamptz,
    p_window interval
)
returns void
language plpgsql
as $$
declare
    v_inserted integer;
begin
    delete from webhook_deliveries where received_at < p_now - 2 * p_window;
    insert into webhook_deliveries (target, target_id, signature, sent_at, received_at)
    select p_target, p_target_id, k, p_sent_at, p_now from unnest(p_keys) k
    on conflict on constraint signature_seen_once do nothing;
    get diagnostics v_inserted = row_count;
    if v_inserted < cardinality(p_keys) then
        raise exception 'webhook request already received: a replay' using errcode = 'CE413';
    end if;
end;
$$;

comment on function _webhook_remember(text, uuid, text[], timestamptz, timestamptz, interval) is
    'Record a verified webhook request''s replay keys for the window; CE413 when any was seen '
    'before (signature_seen_once decides, so racing copies cannot both pass).';

-- The headers of a request signed in the ceaseless scheme, for the
-- four-argument receive_webhook, which takes the signature and the time
-- apart. A time that is NULL or not finite gives no timestamp header, which
-- refuses (CE403) like any request without one.
create or replace function _webhook_ceaseless_headers(p_signature text, p_sent_at timestamptz)
returns jsonb
language sql immutable
set search_path = pg_catalog, pg_temp
as $$
    select jsonb_strip_nulls(jsonb_build_object(
        'x-ceaseless-signature', p_signature,
        'x-ceaseless-timestamp',
        case when isfinite(p_sent_at)
              and abs(extract(epoch from p_sent_at)) < 1e11
             then floor(extract(epoch from p_sent_at))::bigint::text end))
$$;

comment on function _webhook_ceaseless_headers(text, timestamptz) is
    'The X-Ceaseless-Signature and X-Ceaseless-Timestamp headers for a signature and time given '
    'apart (the four-argument receive_webhook).';
