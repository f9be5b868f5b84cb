"""The whole forge lane through one real listener: a labelled issue on the fake forge is polled
into a plan job, the plan's agent reports two children, the listener creates them as issues and
runs each as an implement job on the opencode lane in a real git checkout, each agent pushes to
the bare repository and opens a pull request, the forge's pull requests deliver the jobs, and the
labels on every issue follow the jobs, written by the label identity only."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import psycopg
import pytest

from tests.e2e.support import FAKES, ListenerProcess, wait_until
from tests.factories import make_agent
from tests.fakes.forge import FakeForge
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
    workdir = tmp_path / "workspace"
    workdir.mkdir()
    start_listener("--workdir", str(workdir), "--poll-interval", "1")

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
