-- Functions that functions/ now writes once, as one function its callers
-- share, dropped once here rather than on every re-apply of functions/ (where
-- a drop of a signature that exists would drop and re-create it each time).

set local search_path = ceaseless, pg_catalog, public;

-- The resumable session rule is _resumable's alone.
drop function if exists _resume_session_id_ok(text);
-- cancel_job and retry_job find and lock their job through _job_for.
drop function if exists _acts_for_job_refs(job);
-- Validation checks a positive integer through _check_positive_int.
drop function if exists _is_positive_int_or_null(jsonb);
-- Validation names each field in full through _invalid_value (00_helpers.sql).
drop function if exists _invalid_repo(text, text, jsonb);
-- One function remembers both halves of a transaction's fires.
drop function if exists _remember_fire(text, bigint);
drop function if exists _remember_loop_fire(uuid);
-- A loop's token and signing key come from one generator, _webhook_new_key.
drop function if exists _loop_secret_hex();
