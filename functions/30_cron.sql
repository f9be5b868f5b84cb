-- Cron schedules and time zones: the one gate every stored schedule passes.
--
-- Called by: the validation triggers of routines and loops (_cron_error,
-- _timezone_error, which name the column themselves), by anyone who wants
-- a schedule checked without storing it (check_schedule: `ceaseless cron
-- preview`, psql), and by backfill (_backfill, 32_schedules.sql), which
-- fires the slots between two times that _cron_slots enumerates from this
-- file's own reading of the schedule (_cron_reading), not a second parser.
-- Guarantees: the language accepted here is a plain subset of croniter's, the
-- library the listener computes slots with (listener/cron.py), and croniter
-- reads every accepted schedule the way this file reads it (docs/cron.md): the
-- same values in every field, the same days. Forms croniter reads in a way
-- nobody would guess are refused with the reason and the plain way to write
-- them: a reversed range (croniter wraps it), an equal range (croniter reads
-- the whole field), a * inside a list, a day field written to name every day
-- next to a restricted other day field, and day fields croniter would read
-- against the "either day-of-month or day-of-week" meaning or never fire on.
-- Refused too though croniter reads them: seven fields (a year: routines and
-- loops recur, and a schedule bound to a year would stop firing without a
-- word once it passed), R (random values), and schedules past the caps on
-- length and list items. So a stored schedule always has a next slot in UTC, and a
-- bad one is refused at INSERT, naming the field and the rule, rather than
-- found at 3 a.m. by the listener. Every function but check_schedule returns
-- a message instead of raising, for any input including NULL, so the caller
-- decides the SQLSTATE and names the column; nothing is locked or written.
--
-- pyproject.toml pins croniter to one version: upgrading it means running
-- tests/sql/test_cron_differential.py, which checks on thousands of generated
-- schedules that croniter accepts everything this gate accepts and computes
-- the slots the gate's reading gives, and that _cron_slots gives the slots
-- the listener walks through between two times, DST changes included.

-- A run of ASCII digits as an integer, capped at 1,000,000,000: every bound in
-- cron is below 60, so the cap keeps each comparison right (too big, not zero)
-- without an integer cast that could overflow on "99999999999".
create or replace function _cron_number(p_digits text)
returns integer
language sql immutable strict
as $$
    select case
        when ltrim(p_digits, '0') = '' then 0
        when length(ltrim(p_digits, '0')) > 9 then 1000000000
        else ltrim(p_digits, '0')::integer
    end;
$$;

comment on function _cron_number(text) is
    'A run of ASCII digits as an integer, capped at 1e9 so huge cron numbers compare as too big.';

-- The number a cron token stands for in field p_position (0 minute, 1 hour,
-- 2 day-of-month, 3 month, 4 day-of-week, 5 second): digits, or a lower-case
-- month name in the month field or day name in the day-of-week field, as
-- croniter reads them; NULL when it is neither. Day-of-week 7 stays 7 here.
create or replace function _cron_value(p_token text, p_position integer)
returns integer
language sql immutable
as $$
    select case
        when p_token ~ '^[0-9]+$' then _cron_number(p_token)
        when p_position = 3 then array_position(
            array['jan', 'feb', 'mar', 'apr', 'may', 'jun',
                  'jul', 'aug', 'sep', 'oct', 'nov', 'dec'], p_token)
        when p_position = 4 then array_position(
            array['sun', 'mon', 'tue', 'wed', 'thu', 'fri', 'sat'], p_token) - 1
    end;
$$;

comment on function _cron_value(text, integer) is
    'The number a cron token means in field p_position (digits, JAN-DEC, SUN-SAT), else NULL.';

-- p_value written the way p_like is: digits when p_like is a number, else the
-- month or day name in p_like's case (JAN, Jan or jan). Used to suggest a
-- rewrite in the user's own notation ("fri-sat,sun-mon" for "fri-mon").
-- translate, not upper(): a Turkish collation upper-cases i to a dotted I.
create or replace function _cron_token(p_value integer, p_position integer, p_like text)
returns text
language sql immutable
as $$
    select case
        when p_like ~ '^[a-z]+$' then n.name
        when p_like ~ '^[A-Z]+$' then translate(n.name, 'abcdefghijklmnopqrstuvwxyz',
                                                'ABCDEFGHIJKLMNOPQRSTUVWXYZ')
        when p_like ~ '^[A-Z][a-z]+$' then translate(left(n.name, 1), 'abcdefghijklmnopqrstuvwxyz',
                                                     'ABCDEFGHIJKLMNOPQRSTUVWXYZ')
                                           || substr(n.name, 2)
        else p_value::text
    end
    from (select case p_position
                     when 3 then (array['jan', 'feb', 'mar', 'apr', 'may', 'jun', 'jul', 'aug',
                                        'sep', 'oct', 'nov', 'dec'])[p_value]
                     when 4 then (array['sun', 'mon', 'tue', 'wed', 'thu', 'fri',
                                        'sat'])[p_value + 1]
                 end) as n(name);
$$;

comment on function _cron_token(integer, integer, text) is
    'A cron value written the way p_like is (a number, or a month or day name in its case).';

-- One field of a 5/6-field schedule: `error` says why it is refused (NULL when
-- it is accepted), and `field_values` lists the values it names (day-of-week
-- 0-6, Sunday 0), or is NULL when it names every value (* or ?, or a list
-- with * in it, which _cron_error refuses). Day-of-month L (the last day) and
-- W (the nearest weekday) name no fixed day, so they add no value; an nth
-- weekday (5#2, L5) adds its day of the week. p_field is the field as written
-- (its case is kept for the message); p_position is 0 minute, 1 hour,
-- 2 day-of-month, 3 month, 4 day-of-week, 5 second.
--
-- Every form accepted here means what it says, and croniter reads it so:
-- a value, a range a-b with a < b, a step */n, a-b/n or a/n (a, a+n, … up to
-- the field's end), a list of those; 7 is Sunday in day-of-week, so 5-7 is
-- Friday to Sunday. Refused though croniter reads them: a reversed range
-- (croniter wraps it past the field's end, its step carried across the wrap
-- in its own way) and an equal range (croniter reads "5-5" as every value).
create or replace function _cron_field(
    p_field text, p_position integer, out error text, out field_values integer[]
)
language plpgsql immutable
as $$
declare
    v_name constant text := (array['minute', 'hour', 'day-of-month', 'month', 'day-of-week',
                                   'second'])[p_position + 1];
    v_min constant integer := (array[0, 0, 1, 1, 0, 0])[p_position + 1];
    v_max constant integer := (array[59, 23, 31, 12, 6, 59])[p_position + 1];
    -- The largest number that may be written: 7 is Sunday too, as 0 is.
    v_top constant integer := case when p_position = 4 then 7 else v_max end;
    v_bounds constant text := format('%s-%s', v_min, v_top);
    v_words constant text := case p_position
                                 when 2 then 'a number 1-31 or L'
                                 when 3 then 'a number or a month name (JAN-DEC)'
                                 when 4 then 'a number or a day name (SUN-SAT)'
                                 else 'a number' end;
    v_field constant text := translate(p_field, 'ABCDEFGHIJKLMNOPQRSTUVWXYZ',
                                       'abcdefghijklmnopqrstuvwxyz');
    v_items constant text[] := string_to_array(p_field, ',');
    v_where text;
    v_item text;
    v_item_shown text;
    -- The item as written, without an nth weekday's L or #n.
    v_text text;
    v_match text[];
    v_nth boolean;
    v_a text;
    v_b text;
    v_a_lower text;
    v_b_lower text;
    v_low integer;
    v_high integer;
    v_step integer;
    v_values integer[];
    v_every boolean := false;
    v_has_nth boolean := false;
    v_has_plain boolean := false;
begin
    field_values := '{}';

    -- croniter replaces a whole field written R, R(a-b), R/n or R(a-b)/n by a
    -- random value, drawn again every time it reads the schedule: the listener
    -- reads it after every fire, so "R 9 * * *" would fire at a new minute each
    -- time, several times an hour. Refused on purpose (croniter accepts it).
    -- H is the hashed twin; croniter itself refuses it without a hash id.
    if v_field ~ '^[hr](\([0-9]+-[0-9]+\))?(/[0-9]+)?$' then
        if left(v_field, 1) = 'h' then
            error := format('%s field "%s": H (hashed values) is not supported', v_name, p_field);
            return;
        end if;
        error := format('%s field "%s": R (random values) is not supported: croniter draws a '
                        'new value each time it reads the schedule, so the slot would move after '
                        'every fire', v_name, p_field);
        return;
    end if;

    if strpos(v_field, '?') > 0 then
        if v_field <> '?' then
            error := format('%s field "%s": ? must stand alone', v_name, p_field);
        elsif p_position not in (2, 4) then
            error := format('%s field "?": ? is allowed only in day-of-month and day-of-week',
                            v_name);
        end if;
        field_values := null;  -- every value
        return;
    end if;

    -- foreach, not v_items[i]: subscripting an array of text walks it from the
    -- start, which made a field of 20,000 items cost seconds.
    foreach v_item_shown in array v_items loop
        v_item := translate(v_item_shown, 'ABCDEFGHIJKLMNOPQRSTUVWXYZ',
                            'abcdefghijklmnopqrstuvwxyz');
        v_where := case when cardinality(v_items) = 1 then format('%s field "%s"', v_name, p_field)
                        else format('%s field "%s": "%s"', v_name, p_field, v_item_shown) end;
        v_nth := false;
        v_text := v_item_shown;

        if v_item = '' then
            error := format('%s field "%s" has an empty list item', v_name, p_field);
            return;
        end if;

        -- Nearest weekday: 15W or W15, alone in its field.
        if p_position = 2 then
            v_match := regexp_match(v_item, '^([0-9]+)w$|^w([0-9]+)$');
            if v_match is not null then
                if _cron_number(coalesce(v_match[1], v_match[2])) not between 1 and 31 then
                    error := format('%s: the day next to W must be 1-31', v_where);
                elsif cardinality(v_items) > 1 then
                    error := format('%s field "%s": W takes a single day, not a list',
                                    v_name, p_field);
                end if;
                if error is not null then
                    return;
                end if;
                continue;
            end if;
        end if;

        -- Day of week: L5 (the last Friday) and 5#2 (the second Friday). croniter
        -- takes the part before # as one word or a range of day names (so
        -- mon-fri#2 is valid but 1-5#2 is not), and checks the ordinal first.
        if p_position = 4 then
            if v_item ~ '^l[0-9]+$' then
                v_nth := true;
                v_item := substr(v_item, 2);
                v_text := substr(v_text, 2);
            elsif strpos(v_item, '#') > 0 then
                v_match := regexp_match(v_item, '^([a-z0-9_]+|[a-z]+-[a-z]+)#([0-9]+)$');
                if v_match is null then
                    error := format('%s: # must come between a day (a number or SUN-SAT, or a '
                                    'range of day names) and an ordinal 1-5', v_where);
                    return;
                elsif _cron_number(v_match[2]) not between 1 and 5 then
                    error := format('%s: the ordinal after # must be 1-5', v_where);
                    return;
                end if;
                v_nth := true;
                v_item := v_match[1];
                v_text := split_part(v_text, '#', 1);
            end if;
        end if;

        if v_item = '*' then
            -- Every value; alone it is the whole field, and in a list
            -- _cron_error refuses it (after the rules below, whose messages
            -- say more).
            v_every := true;
            v_has_plain := true;
            continue;
        end if;

        -- */n, a/n, a-b/n and a-b, split as written (in the user's case, for
        -- the messages).
        v_match := regexp_match(v_text,
                                '^([^-/]+)(-([^-/]+))?/([0-9]+)$|^([^-/]+)-([^-/]+)$');
        if v_match is null and strpos(v_item, '/') > 0 then
            error := format('%s is not a valid step (write */n, a-b/n or a/n)', v_where);
            return;
        end if;

        if v_match is not null then
            v_a := coalesce(v_match[1], v_match[5]);
            v_b := coalesce(v_match[3], v_match[6]);
            v_a_lower := translate(v_a, 'ABCDEFGHIJKLMNOPQRSTUVWXYZ', 'abcdefghijklmnopqrstuvwxyz');
            v_b_lower := translate(v_b, 'ABCDEFGHIJKLMNOPQRSTUVWXYZ', 'abcdefghijklmnopqrstuvwxyz');
            v_step := _cron_number(coalesce(v_match[4], '1'));
            if v_a = '*' and v_b is null then
                -- */n: from the field's first value, every n-th.
                v_low := v_min;
                v_high := v_max;
            else
                if v_a_lower = 'l' and p_position = 2 then
                    error := format('%s: L can end a range, not start one', v_where);
                    return;
                end if;
                v_low := _cron_value(v_a_lower, p_position);
                -- a/n runs to the field's end; L ends a day-of-month range at
                -- the 31st (days a month lacks are never reached), as croniter
                -- reads both.
                v_high := case when v_b is null then v_max
                               when p_position = 2 and v_b_lower = 'l' then 31
                               else _cron_value(v_b_lower, p_position) end;
                if v_low is null or v_high is null then
                    error := format('%s: "%s" is not %s', v_where,
                                    case when v_low is null then v_a else v_b end, v_words);
                    return;
                end if;
            end if;
            if v_step = 0 then
                error := format('%s: a step must be 1 or more', v_where);
                return;
            elsif v_low not between v_min and v_top or v_high not between v_min and v_top then
                error := format('%s is out of range %s', v_where, v_bounds);
                return;
            end if;
            if v_b is not null then
                -- Prevents "7-1" read as Sunday to Monday: 7 is Sunday, but
                -- only at the end of a range does it come after Saturday.
                if p_position = 4 and v_low = 7 then
                    error := format('%s: a range cannot start at 7: write 0 (or SUN) for Sunday',
                                    v_where);
                    return;
                end if;
                -- Prevents "5-5" read as every minute: croniter widens an
                -- equal range to the whole field.
                if v_low = v_high then
                    error := format('%s: a range needs two different ends%s: write %s (croniter '
                                    'reads an equal range as the whole field)', v_where,
                                    case when v_b_lower = 'l' then ' (L ends a range at 31)'
                                         else '' end,
                                    case when v_nth then format('%s#%s for that day alone', v_a,
                                                                split_part(v_item_shown, '#', 2))
                                         else format('%s for that value alone, or * for every '
                                                     'value', v_a) end);
                    return;
                end if;
                -- Prevents "22-2" read in a way the text does not say:
                -- croniter wraps a reversed range past the field's end, and
                -- carries a step across the wrap by a rule of its own
                -- ("4-1/3" in the month field is April, July, October and
                -- January).
                if v_low > v_high then
                    error := format(
                        '%s: a range must run upwards, and %s comes after %s: to wrap past the '
                        'end of the field, write two ranges%s', v_where, v_a, v_b,
                        -- No example where it would not do: with a step (its phase
                        -- restarts) or an nth weekday (# takes a single range).
                        case when v_match[4] is not null or v_nth then ''
                             else format(' (%s,%s)',
                                         case when v_low = v_max then v_a
                                              else v_a || '-' || _cron_token(v_max, p_position, v_a)
                                         end,
                                         case when v_high = v_min then v_b
                                              else _cron_token(v_min, p_position, v_b) || '-' || v_b
                                         end)
                        end);
                    return;
                end if;
            elsif p_position = 4 and v_low = 7 then
                v_low := 0;  -- 7/n: from Sunday
            end if;
            -- Day-of-week 7 is Sunday, 0: "5-7" is Friday, Saturday, Sunday.
            v_values := array(select case when v = 7 and p_position = 4 then 0 else v end
                              from generate_series(v_low, v_high, v_step) v);
        else
            if left(v_item, 1) = '-' then
                error := format('%s: negative numbers are not allowed', v_where);
                return;
            elsif p_position = 2 and v_item = 'l' then
                continue;
            end if;
            v_low := _cron_value(v_item, p_position);
            if v_low is null then
                error := format('%s is not %s', v_where, v_words);
                return;
            end if;
            if v_low not between v_min and v_top then
                error := format('%s is out of range %s', v_where, v_bounds);
                return;
            end if;
            v_values := array[case when v_low = 7 and p_position = 4 then 0 else v_low end];
        end if;

        -- Grown only by values not seen yet, so a list of thousands of items
        -- stays a short array.
        if not v_values <@ field_values then
            field_values := field_values || v_values;
        end if;

        v_has_nth := v_has_nth or v_nth;
        v_has_plain := v_has_plain or not v_nth;
    end loop;

    -- Prevents a list whose plain days (or *) are silently dropped: croniter
    -- refuses most mixes of nth weekdays and plain days (1#2,3), and the few it
    -- accepts (1#2,1; *,1#2; 1#2,0-6) fire on the nth weekdays alone, though
    -- the list reads as "or any Monday" or "or any day".
    if v_has_nth and v_has_plain then
        error := format('%s field "%s" mixes nth weekdays (# or L) with plain days',
                        v_name, p_field);
    end if;
    if v_every then
        field_values := null;
    end if;
end;
$$;

comment on function _cron_field(text, integer) is
    'One cron field (0 minute .. 4 day-of-week, 5 second): why it is refused (error), else the '
    'values it names (field_values; NULL for every value).';

-- Why the day fields of a schedule whose fields are each valid cannot be used
-- together, or NULL. When both day fields are restricted a day matches if
-- either matches (docs/cron.md); croniter reads them so only for plain values
-- written plainly. Next to W or an nth weekday it silently drops one of them,
-- or finds no slot at all, and a day field that names every day reads as *
-- or as a restriction depending on how the other is written; those pairs are
-- refused here instead of firing on the wrong days. p_days, p_months and
-- p_weekdays are the field_values of _cron_field (NULL: every value).
create or replace function _cron_days_error(
    p_day_of_month text, p_month text, p_day_of_week text,
    p_days integer[], p_months integer[], p_weekdays integer[]
)
returns text
language plpgsql immutable
as $$
declare
    v_day_of_month constant text := translate(p_day_of_month, 'LW', 'lw');
    v_day_of_week constant text := translate(p_day_of_week, 'L', 'l');
    -- The longest each month can be: February counts 29 (leap years come
    -- within 8 years, well inside croniter's 50-year search).
    v_month_days constant integer[] := array[31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31];
    v_first_day integer;
    v_longest_month integer := 0;
    v_value integer;
begin
    -- Prevents an nth weekday (5#2, L5) that ignores its day-of-month: croniter
    -- fires on the nth weekday alone ("0 0 13 * 5#2" fires on every second
    -- Friday, not on the 13th or a second Friday), and when the two can never
    -- fall on one day ("0 0 1 * 1#5", "0 0 L * 1#2") it finds no slot and the
    -- listener disables the routine.
    if v_day_of_week ~ '#|(^|,)l[0-9]' and v_day_of_month not in ('*', '?') then
        return format('day-of-week field "%s" is an nth weekday (# or L), so day-of-month must '
                      'be * or ?, not "%s": croniter would fire on the nth weekday alone, or never',
                      p_day_of_week, p_day_of_month);
    end if;

    -- Prevents a nearest weekday (15W) that ignores its day-of-week: croniter
    -- fires on the W day alone ("0 0 15W * 1" fires on the weekday nearest the
    -- 15th, Monday or not), and never when the W day cannot fall on that day of
    -- the week ("0 0 15W * 0": W never lands on a Sunday).
    if strpos(v_day_of_month, 'w') > 0 and v_day_of_week not in ('*', '?') then
        return format('day-of-month field "%s" is a nearest weekday (W), so day-of-week must '
                      'be * or ?, not "%s": croniter would fire on the W day alone, or never',
                      p_day_of_month, p_day_of_week);
    end if;

    -- Prevents a day field that names every day, written otherwise than *,
    -- next to a restricted other day field: croniter reads it as * when the
    -- other field's text holds a * ("0 0 1-31 * */2" fires on Sundays,
    -- Tuesdays, Thursdays and Saturdays only) and as "any day" otherwise
    -- ("0 0 1-31 * 0,2,4,6" fires every day). Written as *, it means one thing.
    if p_days is not null and p_weekdays is not null then
        if (select count(distinct v) from unnest(p_days) v) = 31 then
            return format('day-of-month field "%s" names every day: write * (next to a '
                          'restricted day-of-week, here "%s", croniter reads such a field as * '
                          'or as every day depending on how day-of-week is written)',
                          p_day_of_month, p_day_of_week);
        elsif (select count(distinct v) from unnest(p_weekdays) v) = 7 then
            return format('day-of-week field "%s" names every day: write * (next to a '
                          'restricted day-of-month, here "%s", croniter reads such a field as * '
                          'or as every day depending on how day-of-month is written)',
                          p_day_of_week, p_day_of_month);
        end if;
    end if;

    -- Prevents a day-of-month that never comes in its months ("0 0 30 2 *",
    -- "0 0 31 4,6 *"): croniter finds no slot and the listener disables the
    -- routine; next to a restricted day-of-week croniter would fire on that day
    -- alone, the day-of-month dead. Every day (*), L and W always find a day;
    -- every month (*) has a 31st.
    if p_days is null or p_months is null or v_day_of_month ~ '(^|,)l(,|$)|w' then
        return null;
    end if;
    foreach v_value in array p_days loop
        v_first_day := least(v_first_day, v_value);
    end loop;
    foreach v_value in array p_months loop
        v_longest_month := greatest(v_longest_month, v_month_days[v_value]);
    end loop;
    if v_first_day > v_longest_month then
        return format('day-of-month field "%s" never comes in month field "%s": no month it '
                      'names has more than %s days', p_day_of_month, p_month, v_longest_month);
    end if;
    return null;
end;
$$;

comment on function _cron_days_error(text, text, text, integer[], integer[], integer[]) is
    'Why valid day-of-month, month and day-of-week fields cannot be used together (nth weekday '
    'or W next to a restricted other day field, a day field naming every day next to a '
    'restricted other, a day its months never have), or NULL.';

-- Why p_expression is not a schedule of the accepted language (5 fields, 6
-- with seconds sixth, or a macro; the plain subset of croniter's that the
-- file header describes), or NULL when it is: each field on its own
-- (_cron_field), then the day fields together (_cron_days_error), then a *
-- inside a list.
create or replace function _cron_error(p_expression text)
returns text
language plpgsql immutable
as $$
declare
    v_fields text[];
    v_count integer;
    v_parsed record;
    v_days integer[];
    v_months integer[];
    v_weekdays integer[];
    v_error text;
begin
    if p_expression is null then
        return 'schedule is missing';
    end if;
    -- Prevents a schedule whose expansion blocks the listener: croniter
    -- expands every item on each call, and a minute list of 50,000 items cost
    -- 0.6 s a call. The cap also keeps every number far below the 4,300
    -- digits Python refuses to read.
    if char_length(p_expression) > _input_cap('schedule') then
        return format('schedule is %s characters long; at most %s are allowed',
                      char_length(p_expression), _input_cap('schedule'));
    end if;
    -- croniter splits on ASCII whitespace only and knows only ASCII words, so
    -- a no-break space or a full-width digit can never be right: say so
    -- plainly instead of reporting a strange field.
    if p_expression ~ '[^\x01-\x7f]' then
        return 'schedule contains a character that is not ASCII (a no-break space, say)';
    end if;
    -- Macros match the whole text, case-insensitively, nothing around them.
    if translate(p_expression, 'ABCDEFGHIJKLMNOPQRSTUVWXYZ', 'abcdefghijklmnopqrstuvwxyz')
       in ('@yearly', '@annually', '@monthly', '@weekly', '@daily', '@midnight', '@hourly') then
        return null;
    end if;

    select array_agg(m[1] order by n) into v_fields
    from regexp_matches(p_expression, '[^ \t\n\r\f\v]+', 'g') with ordinality as f(m, n);
    v_count := coalesce(cardinality(v_fields), 0);

    if v_count = 1 and left(v_fields[1], 1) = '@' then
        if translate(v_fields[1], 'ABCDEFGHIJKLMNOPQRSTUVWXYZ', 'abcdefghijklmnopqrstuvwxyz')
           in ('@yearly', '@annually', '@monthly', '@weekly', '@daily', '@midnight', '@hourly') then
            return format('macro "%s" must stand alone, without spaces around it', v_fields[1]);
        end if;
        return format('unknown macro "%s" (use @yearly, @annually, @monthly, @weekly, @daily, '
                      '@midnight or @hourly)', v_fields[1]);
    elsif v_count = 7 then
        -- croniter would read a year as the seventh field: a schedule that
        -- stops firing once its year has passed.
        return 'expected 5 fields (or 6 with seconds as the sixth) or a macro, got 7: '
               'a year field is not supported';
    elsif v_count not in (5, 6) then
        return format('expected 5 fields (or 6 with seconds as the sixth) or a macro, got %s',
                      v_count);
    end if;

    -- Prevents a list that only repeats values (no field has more than 60)
    -- from costing croniter time on every slot it computes.
    for i in 1 .. v_count loop
        if cardinality(string_to_array(v_fields[i], ',')) > _input_cap('schedule_items') then
            return format('%s field has %s list items; at most %s are allowed (no field has '
                          'more values than that)',
                          (array['minute', 'hour', 'day-of-month', 'month', 'day-of-week',
                                 'second'])[i],
                          cardinality(string_to_array(v_fields[i], ',')),
                          _input_cap('schedule_items'));
        end if;
    end loop;

    for i in 1 .. v_count loop
        v_parsed := _cron_field(v_fields[i], i - 1);
        if v_parsed.error is not null then
            return v_parsed.error;
        end if;
        if i = 3 then
            v_days := v_parsed.field_values;
        elsif i = 4 then
            v_months := v_parsed.field_values;
        elsif i = 5 then
            v_weekdays := v_parsed.field_values;
        end if;
    end loop;
    v_error := _cron_days_error(v_fields[3], v_fields[4], v_fields[5], v_days, v_months,
                                v_weekdays);
    if v_error is not null then
        return v_error;
    end if;

    -- Prevents "1,*,15" read as *: croniter lets a * in a list stand for the
    -- whole field, and a day field holding one is then no restriction at all
    -- ("0 0 1,*,15 * mon" fires on Mondays only). Checked last: the rules
    -- above say more about the lists they refuse ("*,1#2").
    for i in 1 .. v_count loop
        if v_fields[i] ~ '(^|,)\*(,|$)' and v_fields[i] <> '*' then
            return format('%s field "%s": * must stand alone (a list with * in it names every '
                          'value: write *)',
                          (array['minute', 'hour', 'day-of-month', 'month', 'day-of-week',
                                 'second'])[i], v_fields[i]);
        end if;
    end loop;
    return null;
exception when others then
    -- A validator that raised would replace the field-naming error the caller
    -- builds with an opaque one; refuse the schedule with the reason instead.
    return format('schedule could not be read (%s)', sqlerrm);
end;
$$;

comment on function _cron_error(text) is
    'NULL when p_expression is a schedule of the accepted language (5 fields, 6 with seconds '
    'sixth, or a macro; a plain subset of croniter''s), else why not, naming the field, the value '
    'and the rule; never raises.';

-- Why p_timezone is not a time zone the listener can compute slots in, or NULL.
-- The name must be listed by the server exactly (zoneinfo, which the listener
-- uses, is case-sensitive where PostgreSQL is not). Servers built on the
-- system's tz database also list its posix/ and right/ copies and posixrules:
-- those are files, not IANA names, and another machine may lack them.
-- The names are looked up in the indexed table timezone_names (filled once by
-- db/0007_seed_data.sql): pg_timezone_names reads every zone file on each
-- scan. Only a name the table lacks, which is rare (bad input, or a zone a
-- tzdata upgrade added since), pays for that scan, so a valid new zone is
-- still accepted.
create or replace function _timezone_error(p_timezone text)
returns text
language sql stable
as $$
    select case
        when p_timezone is null then 'time zone is missing'
        when p_timezone ~ '^[A-Za-z][A-Za-z0-9_+-]*(/[A-Za-z][A-Za-z0-9_+-]*)*$'
             and p_timezone !~ '^(posix/|right/|posixrules$)'
             -- CASE, not OR: it fixes the order, so a hit never scans the view.
             and case when exists (select from timezone_names t where t.name = p_timezone)
                      then true
                      else exists (select from pg_timezone_names z where z.name = p_timezone)
                 end then null
        else format('unknown time zone "%s": use an IANA name such as Europe/Berlin, '
                    'America/New_York or UTC', p_timezone)
    end;
$$;

comment on function _timezone_error(text) is
    'NULL when p_timezone is an IANA time zone name the server knows (exact case), else why not; '
    'never raises.';

-- Is p_schedule a schedule a routine or a loop may store, read in p_timezone
-- (NULL: UTC, as they default to)? Returns nothing when it is; raises CE422
-- naming the field (schedule or timezone), the rule and the value when it is
-- not, the same rule the validation triggers apply. For whoever wants the
-- answer before storing anything: `ceaseless cron preview`, psql.
--
-- Raises: CE422 an invalid schedule or time zone.
create or replace function check_schedule(p_schedule text, p_timezone text default 'UTC')
returns void
language plpgsql stable
as $$
declare
    v_error text := _cron_error(p_schedule);
begin
    if v_error is not null then
        perform _invalid_value('schedule', v_error, to_jsonb(p_schedule));
    end if;
    v_error := _timezone_error(coalesce(p_timezone, 'UTC'));
    if v_error is not null then
        perform _invalid_value('timezone', v_error, to_jsonb(p_timezone));
    end if;
end;
$$;

comment on function check_schedule(text, text) is
    'Check a cron schedule and time zone as routines and loops are checked (NULL time zone: '
    'UTC); raises CE422 naming the field, the rule and the value, returns nothing when valid.';

-- How the gate reads an accepted schedule, as the sets a slot must fall in:
-- the values _cron_field names in each field (sorted; NULL: every value),
-- day-of-month's L and W, and day-of-week's nth (weekday * 10 + ordinal, 5#2
-- is 52) and last (L5) weekdays. A macro is read as the five fields
-- docs/cron.md gives it; five fields fire at second 0. The one reading
-- _cron_slots enumerates, and the one tests/sql/test_cron_differential.py
-- checks against croniter. NULL for a schedule _cron_error refuses.
create or replace function _cron_reading(
    p_schedule text,
    out seconds integer[], out minutes integer[], out hours integer[], out days integer[],
    out last_day boolean, out nearest_weekday integer, out months integer[],
    out weekdays integer[], out nth_weekdays integer[], out last_weekdays integer[]
)
language plpgsql immutable
as $$
declare
    v_fields text[];
    v_day_of_month text;
    v_day_of_week text;
    v_item text;
    v_named integer[];
begin
    if _cron_error(p_schedule) is not null then
        return;
    end if;
    v_fields := regexp_split_to_array(
        case translate(p_schedule, 'ABCDEFGHIJKLMNOPQRSTUVWXYZ', 'abcdefghijklmnopqrstuvwxyz')
            when '@yearly' then '0 0 1 1 *'
            when '@annually' then '0 0 1 1 *'
            when '@monthly' then '0 0 1 * *'
            when '@weekly' then '0 0 * * 0'
            when '@daily' then '0 0 * * *'
            when '@midnight' then '0 0 * * *'
            when '@hourly' then '0 * * * *'
            else btrim(p_schedule, E' \t\n\r\f\x0b') end,
        -- The regex engine reads \v, as the gate's split does (_cron_error); an
        -- E'' string does not on PostgreSQL 15 (there E'\v' is a plain v,
        -- and "nov" would split).
        '[ \t\n\r\f\v]+');
    v_day_of_month := translate(v_fields[3], 'LW', 'lw');
    v_day_of_week := translate(v_fields[5], 'ABCDEFGHIJKLMNOPQRSTUVWXYZ',
                               'abcdefghijklmnopqrstuvwxyz');

    seconds := case when cardinality(v_fields) = 6
                    then _cron_sorted((_cron_field(v_fields[6], 5)).field_values)
                    else array[0] end;
    minutes := _cron_sorted((_cron_field(v_fields[1], 0)).field_values);
    hours := _cron_sorted((_cron_field(v_fields[2], 1)).field_values);
    months := _cron_sorted((_cron_field(v_fields[4], 3)).field_values);

    -- Day of month: W stands alone (15W, W15); L may sit in a list.
    nearest_weekday := _cron_number(
        coalesce((regexp_match(v_day_of_month, '^([0-9]+)w$|^w([0-9]+)$'))[1],
                 (regexp_match(v_day_of_month, '^([0-9]+)w$|^w([0-9]+)$'))[2]));
    if nearest_weekday is null then
        days := _cron_sorted((_cron_field(v_fields[3], 2)).field_values);
    end if;
    last_day := 'l' = any (string_to_array(v_day_of_month, ','));

    -- Day of week: nth weekdays (5#2, mon-fri#1) and last ones (L5), or
    -- plain days.
    nth_weekdays := '{}';
    last_weekdays := '{}';
    if v_day_of_week ~ '#|(^|,)l[0-9]' then
        foreach v_item in array string_to_array(v_day_of_week, ',') loop
            if left(v_item, 1) = 'l' then
                last_weekdays := last_weekdays
                                 || (_cron_field(substr(v_item, 2), 4)).field_values;
            else
                v_named := (_cron_field(split_part(v_item, '#', 1), 4)).field_values;
                nth_weekdays := nth_weekdays
                                || array(select w * 10 + _cron_number(split_part(v_item, '#', 2))
                                         from unnest(v_named) w);
            end if;
        end loop;
    else
        weekdays := _cron_sorted((_cron_field(v_fields[5], 4)).field_values);
    end if;
end;
$$;

comment on function _cron_reading(text) is
    'An accepted schedule as the gate reads it: the sorted values of each field (NULL: every '
    'value), L, W, nth and last weekdays; NULL fields for a refused schedule. What _cron_slots '
    'enumerates.';

-- An array's distinct values in order; NULL stays NULL (every value).
create or replace function _cron_sorted(p_values integer[])
returns integer[]
language sql immutable
as $$
    select case when p_values is not null
                then array(select distinct v from unnest(p_values) v order by v) end;
$$;

comment on function _cron_sorted(integer[]) is
    'The distinct values of an array in order; NULL stays NULL.';

-- Does local day p_day match the day fields of a reading? docs/cron.md: both
-- day fields restricted, either matches; one restricted, it decides; neither,
-- every day (of the months named).
create or replace function _cron_day_matches(
    p_day date, p_months integer[], p_days integer[], p_last_day boolean,
    p_nearest_weekday integer, p_weekdays integer[], p_nth_weekdays integer[],
    p_last_weekdays integer[]
)
returns boolean
language sql immutable
as $$
    select (p_months is null or extract(month from p_day)::integer = any (p_months))
           and case
               when by_month and by_week then on_month or on_week
               when by_month then on_month
               when by_week then on_week
               else true
           end
    from (select extract(day from p_day)::integer as day_no,
                 extract(dow from p_day)::integer as weekday,
                 extract(day from (date_trunc('month', p_day)
                                   + interval '1 month - 1 day'))::integer as last_no) d
    cross join lateral (
        select p_days is not null or p_last_day or p_nearest_weekday is not null as by_month,
               p_weekdays is not null or cardinality(p_nth_weekdays) > 0
                   or cardinality(p_last_weekdays) > 0 as by_week
    ) k
    cross join lateral (
        -- W: the weekday nearest the day (the month's last when it lacks the
        -- day), never leaving the month: a Saturday 1st moves to Monday 3rd,
        -- a Sunday last day to the Friday before.
        select case
                   when p_nearest_weekday is not null then
                       d.day_no = (select case extract(isodow from w.wday)::integer
                                              when 6 then case when w.n > 1 then w.n - 1
                                                               else w.n + 2 end
                                              when 7 then case when w.n < d.last_no then w.n + 1
                                                               else w.n - 2 end
                                              else w.n end
                                   from (select least(p_nearest_weekday, d.last_no) as n) m
                                   cross join lateral (
                                       select m.n, date_trunc('month', p_day)::date + m.n - 1
                                   ) w(n, wday))
                   else (p_days is not null and d.day_no = any (p_days))
                        or (p_last_day and d.day_no = d.last_no)
               end as on_month,
               case
                   when cardinality(p_nth_weekdays) > 0 or cardinality(p_last_weekdays) > 0 then
                       d.weekday * 10 + (d.day_no - 1) / 7 + 1 = any (p_nth_weekdays)
                       or (d.weekday = any (p_last_weekdays) and d.day_no + 7 > d.last_no)
                   else p_weekdays is not null and d.weekday = any (p_weekdays)
               end as on_week
    ) m;
$$;

comment on function _cron_day_matches(date, integer[], integer[], boolean, integer, integer[],
                                      integer[], integer[]) is
    'Whether a local day matches a reading''s month and day fields (both day fields '
    'restricted: either matches), with L, W, nth and last weekdays.';

-- The slots of an accepted schedule in [p_from, p_to), read on the wall clock
-- of p_timezone, at most p_limit of them (sort them: no order is promised): the slots the
-- listener's next_fire walks through (listener/cron.py), computed from the
-- gate's own reading (_cron_reading), so one authority decides which slots a
-- schedule has. Day, then hour, minute and second: only matching days are
-- expanded, so the cost follows the slots and the days, not the minutes.
-- DST as the listener has it: a wall-clock slot that does not exist (the
-- spring-forward gap) is no slot; one that occurs twice (fall-back) is one
-- slot, at its first occurrence. Nothing for a refused schedule or zone.
create or replace function _cron_slots(
    p_schedule text, p_timezone text, p_from timestamptz, p_to timestamptz,
    p_limit integer default null
)
returns setof timestamptz
language plpgsql stable
as $$
declare
    v_reading record := _cron_reading(p_schedule);
begin
    -- last_day is set for every accepted schedule.
    if v_reading.last_day is null or _timezone_error(p_timezone) is not null or p_from >= p_to then
        return;
    end if;
    return query
    with days as (
        -- Every local day the range touches (a day either side: a slot's
        -- wall-clock day may differ from its UTC day), in order.
        select g::date as day
        from generate_series((p_from at time zone p_timezone)::date - 1,
                             (p_to at time zone p_timezone)::date + 1, interval '1 day') g
    ),
    walls as (
        -- Only matching days are expanded; in the order of the day, then
        -- hour, minute and second, which is time order (see below).
        select d.day + make_interval(hours => h, mins => m, secs => s) as wall
        from days d
        cross join lateral unnest(coalesce(v_reading.hours,
                                           array(select generate_series(0, 23)))) h
        cross join lateral unnest(coalesce(v_reading.minutes,
                                           array(select generate_series(0, 59)))) m
        cross join lateral unnest(coalesce(v_reading.seconds,
                                           array(select generate_series(0, 59)))) s
        where _cron_day_matches(d.day, v_reading.months, v_reading.days, v_reading.last_day,
                                v_reading.nearest_weekday, v_reading.weekdays,
                                v_reading.nth_weekdays, v_reading.last_weekdays)
    ),
    placed as (
        -- PostgreSQL reads a repeated wall-clock time at its second
        -- occurrence (the offset after the change): the first is the one
        -- read with the offset of three hours before, when that gives the
        -- same wall clock. A time in a gap reads back as another time.
        select w.wall, t.at, e.at as early
        from walls w
        cross join lateral (select w.wall at time zone p_timezone) t(at)
        cross join lateral (
            select w.wall - ((t.at - interval '3 hours') at time zone p_timezone
                             - (t.at - interval '3 hours') at time zone 'UTC')
        ) o(wall_utc)
        cross join lateral (select o.wall_utc at time zone 'UTC') e(at)
    )
    select case when p.early < p.at and p.early at time zone p_timezone = p.wall
                then p.early else p.at end
    from placed p
    where p.at at time zone p_timezone = p.wall
      and case when p.early < p.at and p.early at time zone p_timezone = p.wall
               then p.early else p.at end >= p_from
      and case when p.early < p.at and p.early at time zone p_timezone = p.wall
               then p.early else p.at end < p_to
    -- No ORDER BY: the days and the values come in order, so a limit stops
    -- the expansion early instead of sorting every slot of a long range; a
    -- caller that needs the order sorts what it kept.
    limit p_limit;
end;
$$;

comment on function _cron_slots(text, text, timestamptz, timestamptz, integer) is
    'The slots of an accepted schedule in [p_from, p_to) on p_timezone''s wall clock (unordered), '
    'at most p_limit: from the gate''s reading (_cron_reading), DST as the listener has it (a '
    'slot in a gap is none, a repeated one fires at its first occurrence).';
