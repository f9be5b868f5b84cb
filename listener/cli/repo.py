"""`ceaseless repo …`: track forge repositories, list and inspect them, pause and resume them.

A tracked repository is a GitHub or Gitea repository whose labelled issues become
discover, plan and implement jobs (docs/forge.md). A repo is named by its id or by
OWNER/REPO when only one tracked repo has that name.

Guarantees: `repo add` is one INSERT, which the database validates in full (every
rule names the field, the rule and the value) and completes with the column
defaults, which are never copied here. Nothing here reads or prints a token: the
table holds none (URLs with credentials are refused), and tokens come from the
environment or the secrets file the forge_token_source setting names.
"""

from __future__ import annotations

import json
from typing import Annotated

import typer
from psycopg import sql

from listener.cli.common import fail, given, insert, query, table
from listener.enums import Forge

app = typer.Typer(
    help=(
        "Tracked forge repositories (ceaseless.tracked_repo): GitHub or Gitea repositories "
        "whose labelled issues become discover, plan and implement jobs."
    ),
    no_args_is_help=True,
)

RepoArg = Annotated[
    str, typer.Argument(help="The repo's id, or OWNER/REPO if no other tracked repo has it.")
]


def repo_id(ref: str) -> str:
    """The id of the tracked repo `ref` names (an id, or OWNER/REPO); exits otherwise."""
    rows = query(
        "select id from ceaseless.tracked_repo where id::text = %s or owner || '/' || repo = %s",
        (ref.lower(), ref),
    )
    if not rows:
        raise fail(f"no tracked repo with the id or name {ref!r} (see: ceaseless repo list)")
    if len(rows) > 1:
        raise fail(f"{len(rows)} tracked repos are named {ref!r}; use the id (ceaseless repo list)")
    return str(rows[0][0])


def _split(name: str) -> tuple[str, str]:
    owner, slash, repo = name.partition("/")
    if not slash or not owner or not repo or "/" in repo:
        raise fail(f"name the repository as OWNER/REPO, e.g. octo-org/hello; got {name!r}")
    return owner, repo


@app.command("add")
def repo_add(
    name: Annotated[str, typer.Argument(help="OWNER/REPO on the forge, e.g. octo-org/hello.")],
    clone_url: Annotated[
        str,
        typer.Option(
            help="Where `git clone` fetches it: https://…, git@host:owner/repo.git, or a local "
            "path. Never put a token in it."
        ),
    ],
    branch: Annotated[str, typer.Option(help="The branch jobs start from, e.g. main.")],
    interval: Annotated[
        int,
        typer.Option(
            help="Seconds between polls. The forge_min_interval_secs setting (60) is the floor."
        ),
    ],
    forge: Annotated[Forge, typer.Option(help="Which API the forge speaks.")] = Forge.GITHUB,
    api_url: Annotated[
        str | None,
        typer.Option(
            help="The forge's API base URL (default for github: https://api.github.com; "
            "Gitea: https://HOST/api/v1)."
        ),
    ] = None,
    author: Annotated[
        list[str] | None,
        typer.Option(
            help="A forge login whose issues get work; repeat for several. None: no issue "
            "gets work."
        ),
    ] = None,
    discover_label: Annotated[
        str | None, typer.Option(help="Label asking for discovery (default ceaseless:discover).")
    ] = None,
    plan_label: Annotated[
        str | None, typer.Option(help="Label asking for a plan (default ceaseless:plan).")
    ] = None,
    implement_label: Annotated[
        str | None,
        typer.Option(help="Label asking for an implementation (default ceaseless:implement)."),
    ] = None,
    tracking_issue: Annotated[
        int | None, typer.Option(help="The issue number discovery runs against.")
    ] = None,
    quiet_from: Annotated[
        str | None, typer.Option(help="Start of the daily quiet window, HH:MM (no polls).")
    ] = None,
    quiet_until: Annotated[
        str | None,
        typer.Option(help="End of the quiet window, HH:MM; before --quiet-from crosses midnight."),
    ] = None,
    quiet_tz: Annotated[
        str | None, typer.Option(help="IANA time zone of the quiet window (default: UTC).")
    ] = None,
    disabled: Annotated[
        bool, typer.Option("--disabled", help="Add it paused; `repo enable` starts polling.")
    ] = False,
) -> None:
    """Track a repository: its labelled issues from allowed authors become jobs.

    Example (see docs/forge.md):

    ceaseless repo add octo-org/hello --clone-url https://github.com/octo-org/hello.git
    --branch main --interval 300 --author alice --quiet-from 22:00 --quiet-until 06:00
    --quiet-tz Europe/Berlin
    """
    owner, repo = _split(name)
    values = given(
        {
            "forge": forge.value,
            "owner": owner,
            "repo": repo,
            "api_url": api_url,
            "clone_url": clone_url,
            "default_branch": branch,
            "interval_seconds": interval,
            "allowed_authors": author or None,
            "discover_label": discover_label,
            "plan_label": plan_label,
            "implement_label": implement_label,
            "tracking_issue": tracking_issue,
            "quiet_from": quiet_from,
            "quiet_until": quiet_until,
            "quiet_timezone": quiet_tz,
            "enabled": False if disabled else None,
        }
    )
    rows = query(sql.SQL("{} returning id").format(insert("tracked_repo", values)), values)
    typer.echo(str(rows[0][0]))
    if not author:
        typer.echo(
            "No --author given: no issue gets work until allowed_authors names someone.", err=True
        )


@app.command("list")
def repo_list() -> None:
    """One line per tracked repo (ceaseless.repo_status)."""
    rows = query(
        "select id, forge, owner || '/' || repo, enabled, quiet_now, interval_used_secs, "
        "last_polled_at, next_poll_at, live_jobs, left(last_error, 60) "
        "from ceaseless.repo_status order by owner, repo, forge"
    )
    table(
        rows,
        [
            "id",
            "forge",
            "repo",
            "enabled",
            "quiet_now",
            "interval",
            "last_poll",
            "next_poll",
            "live_jobs",
            "last_error",
        ],
    )


@app.command("show")
def repo_show(repo: RepoArg) -> None:
    """A tracked repo: where it is, what it listens for, its schedule and its last error."""
    ref = repo_id(repo)
    headers = [
        "forge",
        "owner",
        "repo",
        "api_url",
        "owner_role",
        "enabled",
        "discover_label",
        "plan_label",
        "implement_label",
        "allowed_authors",
        "tracking_issue",
        "quiet_window",
        "quiet_now",
        "interval_asked_secs",
        "interval_used_secs",
        "last_polled_at",
        "next_poll_at",
        "last_error",
        "last_error_at",
        "live_jobs",
    ]
    rows = query(
        sql.SQL("select {} from ceaseless.repo_status where id = %s").format(
            sql.SQL(", ").join(sql.Identifier(h) for h in headers)
        ),
        (ref,),
    )
    clone = query(
        "select clone_url, default_branch from ceaseless.tracked_repo where id = %s", (ref,)
    )
    shown = [("id", ref), *zip(headers, rows[0], strict=True)]
    shown[5:5] = [("clone_url", clone[0][0]), ("default_branch", clone[0][1])]
    for header, value in shown:
        text = json.dumps(value) if isinstance(value, list) else value
        typer.echo(f"{header:>20}  {'' if text is None else text}")


def _set_enabled(repo: str, enabled: bool) -> None:
    query("update ceaseless.tracked_repo set enabled = %s where id = %s", (enabled, repo_id(repo)))
    typer.echo(f"repo {repo} {'enabled' if enabled else 'disabled'}")


@app.command("enable")
def repo_enable(repo: RepoArg) -> None:
    """Resume polling a repo (it is due at its next_poll_at, at once if that has passed)."""
    _set_enabled(repo, True)


@app.command("disable")
def repo_disable(repo: RepoArg) -> None:
    """Stop polling a repo; its jobs and history stay."""
    _set_enabled(repo, False)
