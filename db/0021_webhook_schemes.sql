-- Webhook signature schemes (spec section 11): ceaseless, github, standard
-- (Standard Webhooks) and stripe, chosen by a routine's trigger_config.scheme
-- or a loop's triggers.webhook_scheme (absent: ceaseless).
--
-- No new table or column: the scheme lives in the JSON the validators
-- already check (functions/40_routine_validation.sql,
-- 55_loop_validation.sql), and a scheme's replay keys go where signatures
-- went, under the same unique constraint. What changes is what the rows mean,
-- so the comments say it.
--
-- Function bodies: functions/46_webhook_schemes.sql (verification per
-- scheme, replay keys, validation helpers) and 45_webhooks.sql
-- (receive_webhook with a headers argument).

set local search_path = ceaseless, pg_catalog, public;

comment on table webhook_deliveries is
    'Replay keys of accepted webhook requests (per scheme: the signature, a Standard Webhooks '
    'webhook-id, or a GitHub delivery id and signature), kept for the timestamp window to refuse '
    'replays.';

comment on column webhook_deliveries.signature is
    'The replay key: the ceaseless signature as received (sha256=<hex>), stripe:<v1 hex>, '
    'webhook-id:<id> (standard), or github-delivery:<id> and the sha256=<hex> signature (github).';

comment on column webhook_deliveries.sent_at is
    'The signed timestamp of the request; for github, which signs none, the time it was received.';
