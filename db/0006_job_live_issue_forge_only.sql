-- One live job per issue, indexed for issue jobs only.
--
-- job_live_issue_idx (0001) is partial on the live states alone, so every
-- routine, loop and ad-hoc job (no issue: all four columns NULL) got an entry
-- when inserted and another when claimed, though NULLs never conflict in a
-- unique index: a fifth of the index writes of a short job, guarding nothing.
-- With `forge is not null` in the predicate the rule is unchanged (an issue
-- reference is all four parts or none, issue_ref_complete) and only issue
-- jobs pay for it.

set local search_path = ceaseless, pg_catalog, public;

drop index job_live_issue_idx;

create unique index job_live_issue_idx
    on job (forge, owner, repo, number)
    where state in ('pending', 'claimed', 'running') and forge is not null;
