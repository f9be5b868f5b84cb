-- Functions and a trigger that newer ones replaced, dropped once here rather
-- than on every re-apply of functions/ (where a drop of a signature that
-- exists would drop and re-create it each time).
--
-- Three functions kept their signatures but changed their result type, which
-- CREATE OR REPLACE cannot do: they are dropped only on a database that still
-- has the old result, and functions/ (applied right after the migrations)
-- creates them again.

set local search_path = ceaseless, pg_catalog, public;

drop function if exists claim_jobs(text, integer, text[], text[], timestamptz, integer);
drop function if exists start_runs(text, uuid[], timestamptz);
drop function if exists _cron_weekdays(integer, integer, integer, boolean);
drop function if exists _cron_field_error(text, integer);
drop function if exists _take_fire_lock();
drop function if exists _fire_routine(uuid, text, timestamptz, text, text, integer, boolean);
drop function if exists _lock_routines_of_jobs(uuid[]);
drop function if exists _finish_routine_run(uuid, timestamptz);
-- A database migrated before the rename would otherwise run both triggers,
-- auditing and counting every run twice.
drop trigger if exists routine_runs_changed on routine_runs;
drop function if exists _tg_routine_runs_changed();
drop function if exists _receive_loop_webhook(loops, bytea, text, timestamptz);
drop function if exists _webhook_signature_ok(text, timestamptz, bytea, text);
drop function if exists _record_refused_webhook(text, text, bytea, timestamptz);
drop function if exists _invalid_graph(text, text, jsonb);

do $$
declare
    v_function record;
begin
    for v_function in
        select * from (values
            ('ceaseless.extend_leases(text, uuid[], timestamptz, integer)',
             'TABLE(job_id uuid, held boolean, renewed boolean)'),
            ('ceaseless.finish_runs(text, jsonb, timestamptz)',
             'TABLE(run_id uuid, job_id uuid, job_state text, recorded boolean, refusal text)'),
            ('ceaseless._lock_routines_for_fire(uuid[], bigint, boolean)', 'boolean')
        ) as f (signature, result)
    loop
        if to_regprocedure(v_function.signature) is not null
           and pg_get_function_result(to_regprocedure(v_function.signature))
               <> v_function.result then
            execute format('drop function %s', v_function.signature);
        end if;
    end loop;
end;
$$;
