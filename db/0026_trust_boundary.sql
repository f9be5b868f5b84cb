-- The trust boundary between user roles and the engine.
--
-- Function bodies: every function of functions/ names its search_path; the
-- privileges are in functions/99_access.sql.

set local search_path = ceaseless, pg_catalog, pg_temp;

-- ---------------------------------------------------------------------------
-- The quiet-check trigger functions (functions/05_secrets.sql) were created
-- in pg_catalog, the first schema of their generator's search_path, when the
-- migrating role could create there (a superuser). Moved into ceaseless,
-- where they belong: the triggers follow them (they refer to the function
-- itself, not its name), and 05_secrets.sql now replaces them there.
-- ---------------------------------------------------------------------------
do $move$
declare
    v_function regprocedure;
begin
    for v_function in
        select p.oid::regprocedure
        from pg_proc p
        where p.pronamespace = 'pg_catalog'::regnamespace
          and p.proname in ('_tg_agents_quiet_checks', '_tg_settings_quiet_checks',
                            '_tg_routines_quiet_checks', '_tg_loops_quiet_checks')
    loop
        execute format('alter function %s set schema ceaseless', v_function);
    end loop;
end;
$move$;
