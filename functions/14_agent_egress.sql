-- agents.egress: the rules of a value, checked where it is written.
--
-- Called by: PostgreSQL, before each INSERT of agents and each UPDATE that
-- sets egress (agents_validate_egress).
-- Guarantees: nothing a listener's egress proxy would read differently from
-- what the operator meant is stored: the value is '{none}', '{open}' or 1 to
-- 100 entries, each `host[:port]`, `*.domain[:port]`, an IPv4 address or a
-- bracketed IPv6 address, with an optional port from 1 to 65535; the error
-- (CE422) names agents.egress, the rule and the entry. How an entry is matched
-- is the proxy's (listener/agents/egress.py); this file checks only its shape.

-- Why p_entry is not an egress entry, or NULL.
create or replace function _egress_entry_error(p_entry text)
returns text
language plpgsql immutable
as $$
declare
    v_host text;
    v_port text;
    v_match text[];
    v_octet constant text := '(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])';
    v_label constant text := '[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?';
begin
    if p_entry is null then
        return 'must not hold NULL';
    elsif lower(p_entry) in ('none', 'open') then
        return format('%L stands alone: {%s}, with no other entry', lower(p_entry), lower(p_entry));
    elsif p_entry ~ '^\[' then
        v_match := regexp_match(p_entry, '^\[([0-9A-Fa-f:.]+)\](:([0-9]{1,5}))?$');
        if v_match is null then
            return 'an IPv6 address goes in brackets, with an optional port: [2001:db8::1]:443';
        end if;
        begin
            if family(v_match[1]::inet) <> 6 then
                return 'only an IPv6 address goes in brackets';
            end if;
        exception when invalid_text_representation then
            return format('%s is not an IPv6 address', v_match[1]);
        end;
        v_port := v_match[3];
    else
        v_match := regexp_match(p_entry, '^([^:]*)(:([0-9]{1,5}))?$');
        if v_match is null then
            return 'must be host or host:port (an IPv6 address in brackets), with a port from 1 to 65535';
        end if;
        v_host := lower(v_match[1]);
        v_port := v_match[3];
        if v_host ~ '^[0-9.]+$' then
            if v_host !~ format('^(%s\.){3}%s$', v_octet, v_octet) then
                return 'a host of digits and dots must be an IPv4 address (four numbers 0 to 255, '
                       'no leading zeros)';
            end if;
        elsif char_length(v_host) > 253
              or v_host !~ format('^(\*\.)?%s(\.%s)*$', v_label, v_label) then
            return 'the host must be a name (letters, digits and hyphens in dot-separated labels '
                   'of up to 63, 253 in all), *. and a domain for its subdomains, or an IP address';
        elsif v_host ~ '^\*\.' and v_host !~ '\.[^.]+\.' then
            return '*. must come before a domain of two labels or more (*.example.com)';
        end if;
    end if;
    if v_port is not null and v_port::int not between 1 and 65535 then
        return 'the port must be a number from 1 to 65535';
    end if;
    return null;
end;
$$;

comment on function _egress_entry_error(text) is
    'NULL when p_entry is an agents.egress entry (host[:port], *.domain[:port], an IPv4 address '
    'or a bracketed IPv6 address), else why not; never raises.';

create or replace function _tg_agents_validate_egress()
returns trigger
language plpgsql
as $$
declare
    v_entry text;
    v_error text;
begin
    if new.egress is null then
        perform _invalid_value('agents.egress', 'must not be NULL: ''{none}'' gives no network',
                               null);
    elsif cardinality(new.egress) = 0 then
        perform _invalid_value('agents.egress',
                               'must not be empty: ''{none}'' gives no network, ''{open}'' any '
                               'public address', to_jsonb(new.egress));
    elsif cardinality(new.egress) = 1 and lower(new.egress[1]) in ('none', 'open') then
        return new;
    elsif cardinality(new.egress) > 100 then
        perform _invalid_value('agents.egress', 'at most 100 entries',
                               to_jsonb(cardinality(new.egress)));
    end if;
    foreach v_entry in array new.egress loop
        v_error := _egress_entry_error(v_entry);
        if v_error is not null then
            perform _invalid_value('agents.egress', 'each entry: ' || v_error, to_jsonb(v_entry));
        end if;
    end loop;
    return new;
end;
$$;

comment on function _tg_agents_validate_egress() is
    'Before INSERT/UPDATE of egress on agents: {none}, {open} or 1 to 100 host[:port] entries, '
    'else CE422 naming agents.egress, the rule and the entry.';

create or replace trigger agents_validate_egress
    before insert or update of egress on agents
    for each row
    execute function _tg_agents_validate_egress();
