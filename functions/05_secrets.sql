-- Secrets kept secret: what audit rows record of a secret-bearing row, and
-- constraint errors that never print the row.
--
-- The secrets are agents.env values (API keys), the notification sinks'
-- headers (Bearer tokens) and URLs (Slack- and Discord-style hooks carry
-- their credential in the path), and webhook routines' trigger_config.secret.
--
-- Called by: the audit triggers (25_notify_audit.sql), and PostgreSQL before
-- each INSERT/UPDATE of agents, settings and webhook routines.
-- Guarantees: audit_log.detail shows which keys a secret-bearing row has but
-- never their values; a NOT NULL or CHECK violation on those tables is
-- raised by a trigger that names the column or constraint and its reason,
-- without PostgreSQL's "Failing row contains (…)" detail, which would print
-- the secret to the client, the CLI and the server log.

-- scheme://host[:port] of a URL: enough to tell which receiver failed,
-- without the path, query or userinfo where such receivers keep credentials.
create or replace function _url_origin(p_url text)
returns text
language sql immutable parallel safe
set search_path = pg_catalog, pg_temp
as $$
    select coalesce(m[1] || m[2], '(not a URL)')
    from (select regexp_match(p_url, '^([A-Za-z][A-Za-z0-9+.-]*://)(?:[^/?#@]*@)?([^/?#@]*)')) r (m);
$$;

comment on function _url_origin(text) is
    'scheme://host[:port] of a URL, without the userinfo, path and query that may hold credentials.';

-- Every string value of a JSON object replaced, keys kept: an operator can
-- still see that ANTHROPIC_API_KEY was set, not what it was set to.
create or replace function _hidden_values(p_object jsonb)
returns jsonb
language sql immutable parallel safe
set search_path = pg_catalog, pg_temp
as $$
    select case when jsonb_typeof(p_object) = 'object'
                then coalesce((select jsonb_object_agg(key, '(hidden)') from jsonb_each(p_object)),
                              '{}'::jsonb)
                when p_object is null then null
                else '"(hidden)"'::jsonb end;
$$;

comment on function _hidden_values(jsonb) is
    'A JSON object with every value replaced by "(hidden)"; anything else becomes "(hidden)".';

-- The notification_sinks setting with each sink's headers hidden and its URL
-- cut to scheme and host.
create or replace function _sinks_without_secrets(p_sinks jsonb)
returns jsonb
language sql immutable parallel safe
as $$
    select case when jsonb_typeof(p_sinks) <> 'object' then _hidden_values(p_sinks)
           else coalesce((
               select jsonb_object_agg(name, case
                   when jsonb_typeof(sink) <> 'object' then sink
                   else sink
                        || case when sink ? 'url'
                                then jsonb_build_object('url', _url_origin(sink ->> 'url'))
                                else '{}' end
                        || case when sink ? 'headers'
                                then jsonb_build_object('headers', _hidden_values(sink -> 'headers'))
                                else '{}' end
                   end)
               from jsonb_each(p_sinks) s (name, sink)), '{}'::jsonb)
           end;
$$;

comment on function _sinks_without_secrets(jsonb) is
    'The notification_sinks setting with header values hidden and URLs cut to scheme://host.';

-- What an audit row may record of a row of p_table: the row with its secrets
-- hidden. Unknown tables pass through: they hold no secrets.
create or replace function _without_secrets(p_table text, p_row jsonb)
returns jsonb
language sql immutable parallel safe
as $$
    select case
        when p_row is null then null
        when p_table = 'agents' and p_row ? 'env'
            then jsonb_set(p_row, '{env}', _hidden_values(p_row -> 'env'))
        when p_table = 'settings' and p_row ->> 'key' = 'notification_sinks'
            then jsonb_set(p_row, '{value}', _sinks_without_secrets(p_row -> 'value'))
        else p_row
    end;
$$;

comment on function _without_secrets(text, jsonb) is
    'A row (as jsonb) of agents or settings with its secrets hidden, for audit_log.';

-- Build, from the catalog, a BEFORE trigger on p_table that checks the
-- table's NOT NULL columns and CHECK constraints itself, and raises what
-- PostgreSQL would (same SQLSTATE, constraint and column), with the values of
-- the columns the rule reads in place of the whole failing row, except those
-- of p_secret_columns. p_when limits it to rows that can hold a secret.
--
-- Generated rather than written out, so the constraints stay the one source
-- of the rules: a migration that adds a CHECK also causes functions/ to be
-- re-applied (docs/migrations.md), which regenerates the trigger with it.
-- The trigger's name sorts after every other BEFORE trigger of the table
-- (PostgreSQL fires them in name order), so it checks the row as it will be
-- stored, defaults filled.
create or replace function _install_quiet_checks(
    p_table regclass, p_when text, p_secret_columns text[]
)
returns void
language plpgsql
as $install$
declare
    v_name constant text := (select relname from pg_class where oid = p_table);
    v_function constant text := format('_tg_%s_quiet_checks', v_name);
    v_checks text;
begin
    with rules as (
        select 'not_null' as kind, a.attname::text as name,
               format('%I is not null', a.attname) as test, array[a.attname::text] as columns,
               a.attnum as position
        from pg_attribute a
        where a.attrelid = p_table and a.attnum > 0 and not a.attisdropped and a.attnotnull
        union all
        select 'check', c.conname::text, pg_get_expr(c.conbin, c.conrelid),
               array(select a.attname::text from pg_attribute a
                     where a.attrelid = p_table and a.attnum = any (c.conkey)
                     order by a.attnum),
               0
        from pg_constraint c
        where c.conrelid = p_table and c.contype = 'c'
    )
    select string_agg(
               format('(%L, %L, (%s) is not false, concat_ws(%L, %s))',
                      r.kind, r.name, r.test, ', ',
                      coalesce((select string_agg(
                                    format('%L || left(coalesce(t.%I::text, %L), 200)',
                                           col || ' = ', col, 'null'), ', ' order by n)
                                from unnest(r.columns) with ordinality u (col, n)
                                where col <> all (p_secret_columns)), 'null')),
               -- In a fixed order (NOT NULL by column, then CHECKs by name,
               -- each CHECK's columns by position), so the first violation
               -- named, and the generated text, never depend on the plan.
               E',\n                ' order by r.kind = 'check', r.position, r.name)
    into v_checks
    from rules r;

    execute format($f$
        create or replace function ceaseless.%1$I()
        returns trigger
        language plpgsql
        set search_path = pg_catalog, ceaseless, pg_temp
        as $body$
        declare
            v_kind text;
            v_name text;
            v_values text;
        begin
            select r.kind, r.name, r.failing into v_kind, v_name, v_values
            from (select (new).*) t
            cross join lateral (values
                %2$s
            ) r (kind, name, ok, failing)
            where not r.ok
            limit 1;
            if v_kind = 'not_null' then
                raise exception 'null value in column "%%" of relation "%3$s" violates not-null constraint',
                    v_name
                    using errcode = 'not_null_violation', column = v_name, table = %3$L,
                          detail = 'The rest of the row is not shown: it may hold secrets.';
            elsif v_kind = 'check' then
                raise exception 'new row for relation "%3$s" violates check constraint "%%"', v_name
                    using errcode = 'check_violation', constraint = v_name, table = %3$L,
                          detail = format('Failing values: %%s. The rest of the row is not shown: '
                                          'it may hold secrets.', coalesce(v_values, 'not shown'));
            end if;
            return new;
        end;
        $body$
        $f$, v_function, v_checks, v_name);

    execute format('comment on function ceaseless.%I() is %L', v_function,
                   format('Before INSERT/UPDATE on %s: raise NOT NULL and CHECK violations without '
                          'printing the row, which may hold secrets (generated by '
                          '_install_quiet_checks).', v_name));
    execute format('create or replace trigger %I before insert or update on %s '
                   'for each row when (%s) execute function ceaseless.%I()',
                   format('%s_zz_quiet_checks', v_name), p_table, p_when, v_function);
end;
$install$;

comment on function _install_quiet_checks(regclass, text, text[]) is
    'Generate a BEFORE trigger on a table that raises its NOT NULL and CHECK violations with the '
    'values the rule read, but never the whole row or p_secret_columns; p_when selects the rows.';

-- Agents and settings are written rarely; every row is checked. Only webhook
-- routines hold a secret, and routines are updated on every fire, so the
-- rest are left to the plain constraints.
select _install_quiet_checks('agents', 'true', '{env}');
select _install_quiet_checks('settings', 'true', '{value}');
select _install_quiet_checks('routines', $w$new.trigger_config ? 'secret'$w$, '{trigger_config}');
