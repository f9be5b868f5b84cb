"""`ceaseless repo …`: track forge repositories, list and inspect them, pause, resume and poll them.

A tracked repository is a GitHub or Gitea repository whose labelled issues become
discover, plan and implement jobs (docs/forge.md). A repo is named by its id or by
OWNER/REPO when only one tracked repo has that name.

Guarantees: `repo add` is one INSERT, which the database validates in full (every
rule names the field, the rule and the value) and completes with the column
defaults, which are never copied here. Nothing here reads or prints a token: the
table holds none (URLs with credentials are refused), and tokens come from the
environment or the secrets file the forge_token_source setting names. `repo poll`
is the listener's poll (listener/forge/poller.py) run once, inline: the same
calls, the same decisions (made by the database), recorded on the repo row.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Annotated
from uuid import UUID

import psycopg
import typer

from listener.cli.common import (
    Named,
    Output,
    OutputOpt,
    call,
    collecting,
    database,
    emitting,
    fail,
    list_rows,
    note,
    record,
    table,
)
from listener.enums import Forge
from listener.queries import commands, forge_loops
from listener.queries.commands import repos

if TYPE_CHECKING:
    from listener.forge.poller import PollReport

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


REPOS = Named(
    commands.Named.TRACKED_REPO,
    "repo",
    missing="no tracked repo with the id or name {ref!r} (see: ceaseless repo list)",
    ambiguous="{count} tracked repos are named {ref!r}; use the id (ceaseless repo list)",
)


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

    \b
    ceaseless repo add octo-org/hello --clone-url https://github.com/octo-org/hello.git \\
        --branch main --interval 300 --author alice \\
        --quiet-from 22:00 --quiet-until 06:00 --quiet-tz Europe/Berlin
    """
    owner, repo = _split(name)
    values = {
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
    repo_id, tokens_allowed = call(repos.add, values)
    typer.echo(repo_id)
    if not tokens_allowed:
        typer.echo(
            "The listener's forge tokens are not used for this repo until an operator runs "
            f"`ceaseless repo tokens {name} --allow`: until then it is polled and cloned "
            "anonymously (a public repository only).",
            err=True,
        )
    if not author:
        typer.echo(
            "No --author given: no issue gets work until allowed_authors names someone.", err=True
        )


@app.command("list")
def repo_list(output: OutputOpt = Output.TABLE) -> None:
    """One line per tracked repo (ceaseless.repo_status)."""
    list_rows(output, repos.repos)


@app.command("show")
def repo_show(repo: RepoArg, output: OutputOpt = Output.TABLE) -> None:
    """A tracked repo: where it is, what it listens for, its schedule and its last error."""
    _, shown = REPOS.read(repos.repo, repo)
    with emitting(output):
        record(shown, name="repo", width=20)


@app.command("enable")
def repo_enable(repo: RepoArg) -> None:
    """Resume polling a repo (it is due at its next_poll_at, at once if that has passed)."""
    REPOS.set_enabled(repo, True)


@app.command("disable")
def repo_disable(repo: RepoArg) -> None:
    """Stop polling a repo; its jobs and history stay."""
    REPOS.set_enabled(repo, False)


@app.command("tokens")
def repo_tokens(
    repo: RepoArg,
    allow: Annotated[
        bool,
        typer.Option(
            "--allow/--deny",
            help="--allow: the listener's forge tokens serve this repo; --deny: it is served "
            "anonymously.",
        ),
    ],
) -> None:
    """Allow or deny the listener's forge tokens for a repo (operators only).

    The tokens are the deployment's identity on the forge: with them the listener
    reads, clones and writes to whatever that identity may. A repo a user role
    tracks is served anonymously until an operator allows it, and again after
    its user points it at another repository (docs/forge.md).
    """
    if not call(repos.allow_tokens, REPOS.id(repo), allow):
        raise fail(f"no tracked repo {repo}")
    typer.echo(f"repo {repo}: forge tokens {'allowed' if allow else 'denied'}")


@app.command("poll")
def repo_poll(
    repo: RepoArg,
    timeout: Annotated[
        float, typer.Option(help="Seconds the whole poll may take (every page, every call).")
    ] = 60.0,
    output: OutputOpt = Output.TABLE,
) -> None:
    """Poll a repo now, here, and print what each labelled issue became.

    Does what the listener's poller does when the repo is due: lists the open
    issues (If-None-Match with the last ETag, every page), lets the database
    decide what each labelled issue becomes, and records the poll on the repo
    (last_polled_at, last_etag or last_error; the next poll one interval from
    now). It polls even a disabled repo or one inside its quiet window: you
    asked. Tokens come from the forge_token_source setting, as for the listener.

    Decisions: created (a new job, its id shown), live (a job for it is already
    pending or running), done (that kind of job already ran for it), cooldown
    (discovery ran too recently), not_admitted (neither its author nor whoever
    added the label is in allowed_authors), no_lane (no agent for the job).
    Exits 1 when the forge could not be polled; the error is on the repo too.
    """
    # The poll's log lines are the listener's; here the report below says it all.
    logging.getLogger("ceaseless").addHandler(logging.NullHandler())
    try:
        report = asyncio.run(_poll_now(UUID(REPOS.id(repo)), timeout))
    except psycopg.Error as exc:
        raise fail(f"the database did not take the poll: {exc}") from None
    name = report.repo.name
    if report.error is not None:
        raise fail(f"{name}: {report.error} (next poll: {report.next_poll_at})")
    how = "not modified since the last poll, " if report.not_modified else ""
    with emitting(output):
        if collecting():
            record(
                [
                    ("repo", name),
                    ("id", report.repo.id),
                    ("not_modified", report.not_modified),
                    ("next_poll_at", report.next_poll_at),
                ],
                name="poll",
            )
        note(f"{name}: {how}{len(report.decisions)} labelled issue(s)")
        if report.decisions or collecting():
            table(
                [(d.number, d.kind, d.decision, d.job_id) for d in report.decisions],
                ["issue", "kind", "decision", "job"],
                name="decisions",
            )
        note(f"next poll: {report.next_poll_at}")


async def _poll_now(repo: UUID, timeout: float) -> PollReport:
    # Imported here: the forge client's HTTP library (aiohttp) is only paid for by the
    # command that polls, not by every command's start.
    from listener.forge.poller import poll_repo

    db = database(deadline=15.0)
    await db.open()
    try:
        found = await db.once("tracked_repo", lambda c: forge_loops.tracked_repo(c, repo))
        if found is None:
            raise fail(f"no tracked repo with the id {repo}")
        source = await db.once("forge_token_source", forge_loops.token_source)
        return await poll_repo(db, found, source, timeout=timeout)
    finally:
        await db.close()
