-- What a run's end means: an agent's word is not trusted, so a run is judged
-- by the one block it may print and, for a forge run, by what it left on the
-- forge.
--
-- Called by: finish_runs (20_agent_runs.sql), for each result reported as
-- succeeded of a discover, plan or implement run, and of a run of any other
-- kind whose final message holds a ```ceaseless block.
-- Guarantees:
-- - an implement run is delivered only with a pull request, which the
--   listener looked up on the forge by the job's head branch after the run
--   (the six pr_* fields of the result); without one it failed, with the
--   reason, and is retried per max_attempts;
-- - a run of any kind whose reply asks for a human ends `needs_human`: its
--   job is blocked with the reason and a notification (finish_runs), and a
--   reply (reply_job) resumes its session;
-- - a plan run is delivered only with a valid children block; its children
--   are then queued (73_forge_children.sql);
-- - the agent's text is only ever read through the one documented block,
--   checked and bounded here: nothing else it prints decides anything.
--
-- The block is the last fenced block tagged `ceaseless` in the final message:
--
--   ```ceaseless
--   {"children": [{"key": "parser", "title": "Parse the config", "body": "…"}]}
--   ```
--
-- or, from a run of any kind, {"needs_human": "why"}.

-- The block of a final message: NULL block and NULL problem when there is
-- none; a problem (a sentence naming the rule) when it is not a JSON object.
-- Every quantifier is non-greedy: PostgreSQL gives a whole regular expression
-- the greediness of its first quantifier, and a greedy one would run from the
-- first fence to the last.
create or replace function _forge_block(p_message text, out block jsonb, out problem text)
language plpgsql immutable
as $$
declare
    v_text text;
begin
    select m[1] into v_text
    from regexp_matches(coalesce(p_message, ''),
                        '```ceaseless[ \t]*?\r?\n(.*?)\r?\n[ \t]*?```', 'g')
         with ordinality as x(m, n)
    order by x.n desc
    limit 1;
    if v_text is null then
        return;
    end if;
    begin
        block := v_text::jsonb;
    exception when others then
        problem := format('the ceaseless block is not JSON (%s): %s', sqlerrm, left(v_text, 200));
        return;
    end;
    if jsonb_typeof(block) <> 'object' then
        problem := format('the ceaseless block must be a JSON object; got %s', left(v_text, 200));
        block := null;
    elsif exists (select from jsonb_object_keys(block) k where k not in ('children', 'needs_human')) then
        problem := format('the ceaseless block may hold "children" or "needs_human" only; got %s',
                          (select string_agg(k, ', ' order by k) from jsonb_object_keys(block) k));
        block := null;
    end if;
end;
$$;

comment on function _forge_block(text) is
    'The last ```ceaseless fenced JSON object of an agent''s final message (block), or why it is '
    'not one (problem); both NULL when there is none.';

-- What is wrong with a children block, naming the child and the rule; NULL
-- when it is fine. Children: an array of at most forge_plan_max_children
-- objects {title (1-256 characters), body (at most 60,000, optional), key
-- (optional: letters, digits, . _ -, at most 64; unique)}.
create or replace function _plan_children_problem(p_children jsonb)
returns text
language plpgsql stable
as $$
declare
    v_max constant integer := _setting_int('forge_plan_max_children');
    v_child jsonb;
    v_n bigint;
    v_keys text[] := '{}';
    v_key text;
begin
    if jsonb_typeof(p_children) is distinct from 'array' then
        return 'children must be a JSON array';
    end if;
    if jsonb_array_length(p_children) > v_max then
        return format('children may list at most %s issues (forge_plan_max_children); got %s',
                      v_max, jsonb_array_length(p_children));
    end if;
    for v_child, v_n in select c, n from jsonb_array_elements(p_children) with ordinality x(c, n) loop
        if jsonb_typeof(v_child) <> 'object' then
            return format('children[%s] must be an object', v_n);
        end if;
        if exists (select from jsonb_object_keys(v_child) k where k not in ('key', 'title', 'body')) then
            return format('children[%s] may hold key, title and body only', v_n);
        end if;
        if jsonb_typeof(v_child -> 'title') is distinct from 'string'
           or char_length(btrim(v_child ->> 'title')) not between 1 and 256 then
            return format('children[%s].title must be 1 to 256 characters', v_n);
        end if;
        if v_child ? 'body' and (jsonb_typeof(v_child -> 'body') <> 'string'
                                 or char_length(v_child ->> 'body') > 60000) then
            return format('children[%s].body must be a string of at most 60,000 characters', v_n);
        end if;
        v_key := _plan_child_key(v_child);
        if v_key !~ '^[A-Za-z0-9._-]{1,64}$' then
            return format('children[%s].key must be 1 to 64 letters, digits, ".", "_" or "-"; got %s',
                          v_n, left(v_key, 100));
        end if;
        if v_key = any (v_keys) then
            return format('children[%s].key %s is used twice', v_n, v_key);
        end if;
        v_keys := v_keys || v_key;
    end loop;
    return null;
end;
$$;

comment on function _plan_children_problem(jsonb) is
    'Why a plan''s children array is invalid (child and rule named), or NULL when it is valid.';

-- A child's key: the one it gave, else one derived from its title, so a plan
-- that reports the same children again (a retry) names the same issues.
create or replace function _plan_child_key(p_child jsonb)
returns text
language sql immutable
as $$
    select coalesce(p_child ->> 'key',
                    't-' || left(md5(lower(btrim(coalesce(p_child ->> 'title', '')))), 16));
$$;

comment on function _plan_child_key(jsonb) is
    'A child issue''s key: its "key", else t-<16 hex digits of md5(lower(title))>.';

-- The verdict on one succeeded run: the outcome and error finish_runs
-- records. Only the forge kinds are judged on more than the block. p_pr_number: the pull request the listener found by head branch
-- (NULL: none, or not an implement run).
create or replace function _forge_verdict(
    p_job_id uuid,
    p_kind text,
    p_final_message text,
    p_pr_number bigint,
    out outcome text,
    out error text
)
language plpgsql stable
as $$
declare
    v_block jsonb;
    v_problem text;
    v_job record;
begin
    outcome := 'succeeded';
    select b.block, b.problem into v_block, v_problem from _forge_block(p_final_message) b;
    if v_problem is not null then
        outcome := 'failed';
        error := v_problem;
        return;
    end if;
    if v_block ? 'needs_human' then
        if jsonb_typeof(v_block -> 'needs_human') <> 'string'
           or char_length(btrim(v_block ->> 'needs_human')) not between 1 and 2000 then
            outcome := 'failed';
            error := 'needs_human must be a reason of 1 to 2,000 characters';
        else
            outcome := 'needs_human';
            error := 'needs a human: ' || btrim(v_block ->> 'needs_human');
        end if;
        return;
    end if;
    if p_kind = 'implement' and p_pr_number is null then
        select j.owner, j.repo, j.payload #>> '{forge,branch}' as branch into v_job
        from job j where j.id = p_job_id;
        outcome := 'failed';
        error := format('no pull request with head branch %s was found on %s/%s after the run '
                        '(looked up on the forge; the agent''s own report is not trusted)',
                        v_job.branch, v_job.owner, v_job.repo);
    elsif p_kind = 'plan' then
        if v_block is null or not v_block ? 'children' then
            outcome := 'failed';
            error := 'the plan printed no children block: end the reply with a ```ceaseless '
                     'fenced block holding {"children": [{"key": …, "title": …, "body": …}]}';
        else
            error := _plan_children_problem(v_block -> 'children');
            if error is not null then
                outcome := 'failed';
            end if;
        end if;
    end if;
end;
$$;

comment on function _forge_verdict(uuid, text, text, bigint) is
    'The outcome of a succeeded run: needs_human (its block, any kind), failed (a bad block; '
    'an implement run without a pull request, a plan without valid children) or succeeded, '
    'with the reason.';
