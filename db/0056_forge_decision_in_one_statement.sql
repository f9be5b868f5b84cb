-- The forge intake decides an issue's kind and admission inside _forge_decide's
-- one statement (functions/71_forge_issues.sql): the helpers it called once
-- per issue are gone.

set local search_path = ceaseless, pg_catalog, public;

drop function if exists _forge_issue_kind(tracked_repo, forge_issue);
drop function if exists _forge_admitted(tracked_repo, forge_issue, text);
