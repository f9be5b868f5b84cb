"""The whole forge lane through one real listener: a labelled issue on the fake forge is polled
into a plan job, the plan's agent reports two children, the listener creates them as issues and
runs each as an implement job on the opencode lane in a real git checkout, each agent pushes to
the bare repository and opens a pull request, the forge's pull requests deliver the jobs, and the
labels on every issue follow the jobs, written by the label identity only.

And the listener's tokens go to no one else: not to URLs a job's payload names, and not to a
tracked repo whose API or clone URL is on a host the token is not bound to."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg
import pytest

from tests.e2e.support import FAKES, ListenerProcess, wait_until
from tests.factories import make_agent
from tests.fakes.capture import CaptureServer
from tests.fakes.forge import FakeForge, check_no_violations
from tests.fakes.github_openapi import Description
from tests.forge.loops_support import bind_tokens
from tests.forge.test_checkout import make_bare_repo, run_git

RUNNER_TOKEN = "tok-runner"  # the fake forge's ceaseless-bot
LABEL_TOKEN = "tok-label"  # its ceaseless-labels
AGENT_TOKEN = "tok-lane-agent"

CHILDREN = [
    {"key": "store", "title": "Add a cache store", "body": "An LRU in cache.py."},
    {"key": "docs", "title": "Document the cache", "body": "A section in README.md."},
]


@pytest.mark.parametrize("forge", ["github", "gitea"])
def test_a_labelled_issue_goes_from_plan_to_two_delivered_pull_requests(
    conn: psycopg.Connection,
    fake_forge: FakeForge,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    start_listener: Callable[..., ListenerProcess],
    forge: str,
) -> None:
    api_url = fake_forge.url if forge == "github" else fake_forge.gitea_url
    repo = fake_forge.add_repo("acme", "widgets")
    fake_forge.tokens[AGENT_TOKEN] = "lane-agent"
    bare = make_bare_repo(tmp_path)
    for name, mode in (("claude_code", "children"), ("opencode", "implement")):
        make_agent(
            conn,
            name,
            name,
            [str(FAKES / "fake_forge_agent")],
            env={
                "FAKE_FORGE_AGENT_MODE": mode,
                "FAKE_FORGE_AGENT_CHILDREN": json.dumps(CHILDREN),
                "FAKE_FORGE_API": api_url,
                "FAKE_FORGE_REPO": "acme/widgets",
                "FAKE_FORGE_TOKEN": AGENT_TOKEN,
            },
            max_attempts=2,
        )
    conn.execute("update ceaseless.settings set value = '1' where key = 'forge_min_interval_secs'")
    conn.execute(
        "insert into ceaseless.tracked_repo (forge, owner, repo, api_url, clone_url, "
        "default_branch, interval_seconds, allowed_authors) "
        "values (%s, 'acme', 'widgets', %s, %s, 'main', 1, '{alice}')",
        (forge, api_url, str(bare)),
    )
    plan_issue = fake_forge.add_issue(
        repo, "Cache support", "Lookups are slow.", labels=["ceaseless:plan"], user="alice"
    )
    stranger = fake_forge.add_issue(
        repo, "Delete everything", "Now.", labels=["ceaseless:implement"], user="mallory"
    )
    for kind in ("GITHUB", "GITEA"):
        monkeypatch.setenv(f"CEASELESS_{kind}_TOKEN", RUNNER_TOKEN)
        monkeypatch.setenv(f"CEASELESS_{kind}_LABEL_TOKEN", LABEL_TOKEN)
    # The fake forge is not GitHub's canonical host: the tokens go to it because this says so.
    bind_tokens(conn, fake_forge.url)
    workdir = tmp_path / "workspace"
    workdir.mkdir()
    forge_root = tmp_path / "forge-root"
    start_listener(
        "--workdir", str(workdir), "--forge-root", str(forge_root), "--poll-interval", "1"
    )

    def states() -> list[tuple[int, str, str, str]]:
        return conn.execute(
            "select number, kind, state, agent from ceaseless.forge_pipeline "
            "order by number, created_at"
        ).fetchall()

    def all_delivered_and_mirrored() -> bool:
        rows = conn.execute(
            "select count(*) filter (where state = 'delivered'), "
            "count(*) filter (where labels_synced_label = 'ceaseless:delivered') "
            "from ceaseless.forge_pipeline"
        ).fetchone()
        return rows == (3, 3)

    wait_until(all_delivered_and_mirrored, 90, "the lane did not deliver and mirror 3 jobs")

    # One plan, two children created on the forge by the runner's identity, two implement jobs.
    children = sorted(
        (i for i in repo.issues.values() if i.number not in (plan_issue.number, stranger.number)),
        key=lambda i: i.number,
    )
    children = [i for i in children if not i.pull]
    assert [c.title for c in children] == ["Add a cache store", "Document the cache"]
    assert all(c.user == "ceaseless-bot" for c in children)
    assert all("<!-- ceaseless: child" in (c.body or "") for c in children)
    plan_number = plan_issue.number
    assert states() == [
        (plan_number, "plan", "delivered", "claude_code"),
        (children[0].number, "implement", "delivered", "opencode"),
        (children[1].number, "implement", "delivered", "opencode"),
    ]
    (plan_job,) = conn.execute("select id from ceaseless.job where kind = 'plan'").fetchone()  # type: ignore[misc]
    parents = conn.execute(
        "select distinct parent_job_id from ceaseless.job where kind = 'implement'"
    ).fetchall()
    assert parents == [(plan_job,)]

    # Each implement run holds the pull request the forge has for its branch, and the branch
    # is in the bare repository.
    runs = conn.execute(
        "select j.id, r.pr_forge, r.pr_owner, r.pr_repo, r.pr_number, r.pr_head_branch, r.pr_url "
        "from ceaseless.job j join ceaseless.agent_run r on r.job_id = j.id "
        "where j.kind = 'implement' and r.outcome = 'succeeded'"
    ).fetchall()
    assert len(runs) == 2
    for job_id, pr_forge, owner, name, number, head, url in runs:
        assert (pr_forge, owner, name, head) == (forge, "acme", "widgets", f"ceaseless/{job_id}")
        pull = repo.issues[number]
        assert pull.pull is not None and pull.pull["head"] == head and url
        assert run_git("ls-remote", str(bare), head, cwd=tmp_path).strip()

    # Labels: every issue shows its job's final state, nothing else of ours, and each label
    # write carried the label identity's token.
    for issue in (plan_issue, *children):
        ours = [name for name in issue.labels if name.startswith("ceaseless:") and ":" in name]
        state_labels = [n for n in ours if n not in ("ceaseless:plan", "ceaseless:implement")]
        assert state_labels == ["ceaseless:delivered"], (issue.number, issue.labels)
    writes = [
        r
        for r in fake_forge.requests
        if r.method in ("POST", "PUT", "DELETE") and "/labels" in r.path
    ]
    assert writes and all((r.authorization or "").endswith(LABEL_TOKEN) for r in writes)
    # The stranger's issue got nothing: no job, no label.
    assert stranger.labels == ["ceaseless:implement"]
    assert conn.execute(
        "select count(*) from ceaseless.job where number = %s", (stranger.number,)
    ).fetchone() == (0,)

    # Polling goes on (interval 1 s) and creates nothing more.
    polled = len(fake_forge.requests_to("GET", "/repos/acme/widgets/issues"))
    wait_until(
        lambda: len(fake_forge.requests_to("GET", "/repos/acme/widgets/issues")) >= polled + 2,
        30,
        "the repo was not polled again",
    )
    assert len(states()) == 3


@pytest.fixture
def capture() -> Iterator[CaptureServer]:
    server = CaptureServer().start()
    try:
        yield server
    finally:
        server.stop()


def finished(conn: psycopg.Connection, where: str, *args: object) -> Callable[[], bool]:
    def done() -> bool:
        row = conn.execute(
            f"select count(*) filter (where finished_at is not null), count(*) "
            f"from ceaseless.job where {where}",
            args,
        ).fetchone()
        return row is not None and row[1] > 0 and row[0] == row[1]

    return done


def errors_of(conn: psycopg.Connection, where: str, *args: object) -> list[str]:
    rows = conn.execute(
        "select r.error from ceaseless.agent_run r join ceaseless.job j on j.id = r.job_id "
        f"where {where} order by r.started_at",
        args,
    ).fetchall()
    return [row[0] for row in rows]


@pytest.mark.slow
@pytest.mark.parametrize("tracked_by_another_owner", [False, True])
def test_a_job_whose_payload_points_at_a_capture_server_sends_it_nothing(
    conn: psycopg.Connection,
    fake_forge: FakeForge,
    capture: CaptureServer,
    login_role: Callable[..., psycopg.Connection],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    start_listener: Callable[..., ListenerProcess],
    tracked_by_another_owner: bool,
) -> None:
    """The review's attack: alice's implement job on victim-org/private-repo, its payload naming a
    capture server as the API and clone URL. The runner takes URLs from the tracked repo the job
    came from; alice has none by that name, so the run fails with the reason, and neither the
    capture server nor the victim's real forge hears from the listener."""
    alice = login_role("alice").info.user
    monkeypatch.setenv("CEASELESS_GITHUB_TOKEN", RUNNER_TOKEN)
    bind_tokens(conn, fake_forge.url)  # a token live on the real forge
    log = tmp_path / "agent.jsonl"
    make_agent(
        conn,
        "a",
        "claude_code",
        [str(FAKES / "fake_forge_agent")],
        env={"FAKE_FORGE_AGENT_MODE": "implement", "FAKE_FORGE_AGENT_LOG": str(log)},
        max_attempts=1,
    )
    if tracked_by_another_owner:
        # The operator tracks the victim's repo on the real forge; alice's job names it too.
        victim = fake_forge.add_repo("victim-org", "private-repo")
        fake_forge.add_issue(victim, "Secret plans", "x", labels=["ceaseless:plan"], user="boss")
        conn.execute(
            "insert into ceaseless.tracked_repo (forge, owner, repo, api_url, clone_url, "
            "default_branch, interval_seconds, allowed_authors, enabled) "
            "values ('github', 'victim-org', 'private-repo', %s, %s, 'main', 300, '{boss}', "
            "false)",
            (fake_forge.url, str(make_bare_repo(tmp_path))),
        )
    payload = {
        "forge": {
            "api_url": capture.url,
            "clone_url": f"{capture.url}/victim-org/private-repo.git",
            "default_branch": "main",
        }
    }
    # As the table owner with alice as the job's owner: the intake is what makes forge jobs (a
    # user's INSERT of one is refused in SQL), and the runner must not trust the row either way.
    conn.execute(
        "insert into ceaseless.job (kind, agent, prompt, forge, owner, repo, number, payload, "
        "user_id) values ('implement', 'a', 'x', 'github', 'victim-org', 'private-repo', 1, "
        "%s, %s)",
        (json.dumps(payload), alice),
    )
    workdir = tmp_path / "workspace"
    workdir.mkdir()
    start_listener("--workdir", str(workdir), "--forge-root", str(tmp_path / "forge-root"))

    wait_until(finished(conn, "agent = 'a'"), 30, "alice's job did not finish")
    assert capture.requests == []
    assert not [r for r in fake_forge.requests if "victim-org" in r.path]
    (error,) = errors_of(conn, "j.agent = 'a'")
    assert (
        f"the job names github victim-org/private-repo, which is not a tracked repo of its "
        f"owner {alice}"
    ) in error
    assert not log.exists()  # the agent never started


@pytest.mark.slow
def test_a_tracked_repo_on_another_host_gets_no_token_from_the_whole_forge_variable(
    conn: psycopg.Connection,
    fake_forge: FakeForge,
    github_description: Description,
    capture: CaptureServer,
    login_role: Callable[..., psycopg.Connection],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    start_listener: Callable[..., ListenerProcess],
) -> None:
    """alice tracks a repo of forge 'github' whose API is another host (a second fake forge,
    which answers anyone's reads) and whose clone URL is a capture server. The listener polls it,
    makes her issue a job and runs it; neither host ever sees the runner's or the label token."""
    alice_conn = login_role("alice")
    alice = alice_conn.info.user
    for kind in ("GITHUB", "GITEA"):
        monkeypatch.setenv(f"CEASELESS_{kind}_TOKEN", RUNNER_TOKEN)
        monkeypatch.setenv(f"CEASELESS_{kind}_LABEL_TOKEN", LABEL_TOKEN)
    bind_tokens(conn, fake_forge.url)
    conn.execute("update ceaseless.settings set value = '1' where key = 'forge_min_interval_secs'")
    log = tmp_path / "agent.jsonl"
    for name in ("claude_code", "opencode"):
        make_agent(
            conn,
            name,
            name,
            [str(FAKES / "fake_forge_agent")],
            env={"FAKE_FORGE_AGENT_MODE": "done", "FAKE_FORGE_AGENT_LOG": str(log)},
            max_attempts=1,
        )
    foreign = FakeForge(github_description).start()
    try:
        repo = foreign.add_repo("acme", "widgets")
        issue = foreign.add_issue(repo, "Do it", "x", labels=["ceaseless:plan"], user="alice")
        alice_conn.execute(
            "insert into ceaseless.tracked_repo (forge, owner, repo, api_url, clone_url, "
            "default_branch, interval_seconds, allowed_authors) "
            "values ('github', 'acme', 'widgets', %s, %s, 'main', 1, '{alice}')",
            (foreign.url, f"{capture.url}/acme/widgets.git"),
        )
        # An operator allows the tokens for it (tests/forge/test_repo_tokens.py covers a repo
        # that is not allowed): what holds them back here is their origins alone.
        conn.execute("update ceaseless.tracked_repo set tokens_allowed = true")
        workdir = tmp_path / "workspace"
        workdir.mkdir()
        start_listener(
            "--workdir",
            str(workdir),
            "--forge-root",
            str(tmp_path / "forge-root"),
            "--poll-interval",
            "1",
        )

        wait_until(
            finished(conn, "user_id = %s and number = %s", alice, issue.number),
            60,
            "alice's job was not made and run",
        )
        # Polled, the issue read by the runner, the clone tried: all without a token.
        assert foreign.requests_to("GET", "/repos/acme/widgets/issues")
        assert foreign.requests_to("GET", f"/repos/acme/widgets/issues/{issue.number}")
        assert [r.authorization for r in foreign.requests] == [None] * len(foreign.requests)
        assert capture.requests and capture.authorizations() == []
        (error,) = errors_of(conn, "j.user_id = %s", alice)
        assert "preparing the forge job failed: clone of main" in error
        assert not log.exists()
    finally:
        foreign.stop()
    check_no_violations(foreign)
