"""Agents of different lanes cannot see each other, and none outlives its run.

Each lane runs as an OS user of its own (the listener is root here) with a HOME
of its own, each job in a directory of its own, and the keeper holds every
process an agent starts in a pid namespace (or a cgroup) that it ends at once.
Every test runs real agents, as real users, with the sandbox and without it;
the ones that need another OS user skip when the tests do not run as root.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import stat
import subprocess
import tempfile
import uuid
from pathlib import Path
from typing import Any

import psycopg
import pytest

from listener.agents import adapter_for, run_agent
from listener.agents.base import AgentConfig, RunResult, Task
from listener.agents.containment import CONTAINMENT_VAR
from listener.agents.sandbox import SANDBOX_VAR, Isolation
from listener.agents.users import lane_user_name
from listener.config import JOB_DIRECTORIES
from listener.daemon.producer.ledger import Ledger
from listener.daemon.producer.workdirs import JobDirectories, give_to
from listener.enums import Adapter, Outcome
from tests.e2e.support import ROOT, ListenerProcess, wait_until
from tests.factories import make_agent, make_job

from . import support
from .isolation import (
    FAKE_ESCAPER,
    MODES,
    escapees_started,
    escaper_env,
    isolate,
    job_directory,
    new_token,
    processes_with,
    workspace,
)
from .support import FAKES, agent, kill_quietly, task

FAKE_NEIGHBOUR = str(FAKES / "fake_neighbour")
API_KEY = "sk-lane-b-must-stay-lane-bs"
HOME_SECRET = "lane-b-login-token"
FILE_SECRET = "lane-b-work-in-progress"
needs_root = pytest.mark.skipif(
    os.geteuid() != 0, reason="lanes run as OS users of their own only when the listener is root"
)


def _run(config: AgentConfig, job: Task, isolation: Isolation) -> RunResult:
    return asyncio.run(
        run_agent(
            adapter_for(config.adapter), config, job, cancel=asyncio.Event(), isolation=isolation
        )
    )


def _assert_none_left(token: str) -> None:
    gone = support.wait_until(lambda: not processes_with(token), 2.0)
    left = processes_with(token)
    kill_quietly(left)
    assert gone, f"processes of the agent outlived its run: pids {left}"


def _python(lane: str, code: str, **fields: Any) -> AgentConfig:
    config = agent(Adapter.COMMAND, ["python3", "-c", code], **fields)
    return dataclasses.replace(config, name=lane)


# The keeper: nothing outlives a run.


@needs_root
@pytest.mark.slow
@pytest.mark.parametrize("mode", MODES)
def test_a_crowd_of_fork_hoppers_is_gone_when_its_timed_out_run_ends(
    monkeypatch: pytest.MonkeyPatch, mode: str
) -> None:
    isolation = isolate(monkeypatch, mode)
    token = new_token()
    with workspace() as ws:
        env = {**escaper_env(ws, token), "FAKE_ESCAPE_HOP_SECS": "60"}
        config = agent(Adapter.COMMAND, [FAKE_ESCAPER], env=env, timeout_secs=4)
        result = _run(dataclasses.replace(config, name="hoppers"), task(cwd=str(ws)), isolation)
        assert escapees_started(ws), "the hoppers never ran; the test proves nothing"
    assert result.outcome == Outcome.TIMED_OUT, result.error
    _assert_none_left(token)


@pytest.mark.slow
@pytest.mark.parametrize("containment", ["pidns", "cgroup", "rounds"])
def test_an_agent_that_stops_its_keeper_still_leaves_nothing_behind(
    monkeypatch: pytest.MonkeyPatch, containment: str
) -> None:
    # The agent runs as the listener's own user (as every lane does when the
    # listener is not root), so it may signal its keeper: it stops it, and the
    # keeper's time limits once let the listener kill it and free the escapees.
    monkeypatch.setenv(SANDBOX_VAR, "off")
    monkeypatch.setenv(CONTAINMENT_VAR, containment)
    isolation = Isolation.current()
    held = isolation.containment.mode
    if {"pidns": "userns"}.get(containment) != held and held != containment:
        pytest.skip(f"this host cannot hold agents by {containment}: {isolation.warning()}")
    token = new_token()
    with workspace() as ws:
        env = {**escaper_env(ws, token), "FAKE_ESCAPE_STOP_KEEPER": "1"}
        config = agent(Adapter.COMMAND, [FAKE_ESCAPER], env=env, timeout_secs=4)
        result = _run(config, task(cwd=str(ws)), isolation)
        assert escapees_started(ws), "the escapees never ran; the test proves nothing"
    assert result.outcome == Outcome.TIMED_OUT, result.error
    _assert_none_left(token)


def test_the_keeper_holds_agents_as_strongly_as_the_host_allows_and_says_when_weaker(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(SANDBOX_VAR, "off")
    monkeypatch.delenv(CONTAINMENT_VAR, raising=False)
    strongest = Isolation.current()
    assert strongest.containment.mode in ("pidns", "userns", "cgroup"), strongest.warning()
    assert "rounds" not in (strongest.warning() or "")
    monkeypatch.setenv(CONTAINMENT_VAR, "rounds")
    weakest = Isolation.current()
    assert weakest.containment.mode == "rounds"
    assert "forks faster than it is found can outlive its run" in (weakest.warning() or "")


# Users and HOMEs: one of each per lane.


@needs_root
@pytest.mark.parametrize("mode", MODES)
def test_each_lane_runs_as_an_os_user_of_its_own_with_a_home_that_lasts(
    monkeypatch: pytest.MonkeyPatch, mode: str
) -> None:
    isolation = isolate(monkeypatch, mode)
    code = (
        "import json, os, pathlib\n"
        "home = pathlib.Path(os.environ['HOME'])\n"
        "seen = home / 'last-run'\n"
        "before = seen.read_text() if seen.exists() else None\n"
        "seen.write_text(os.environ['CEASELESS_RUN_ID'])\n"
        "info = home.stat()\n"
        "print(json.dumps({'uid': os.getuid(), 'user': os.environ['USER'], 'home': str(home),\n"
        "    'mode': info.st_mode & 0o777, 'owner': info.st_uid, 'before': before}))\n"
    )
    for lane in ("lane-x", "lane-y"):
        identity = isolation.identity_for(lane)
        assert identity is not None
        (Path(identity.home) / "last-run").unlink(missing_ok=True)
    seen = []
    with workspace() as ws:
        for lane, run_id in (("lane-x", "run-1"), ("lane-x", "run-2"), ("lane-y", "run-3")):
            result = _run(_python(lane, code), Task("job", run_id, "go", cwd=str(ws)), isolation)
            assert result.outcome == Outcome.SUCCEEDED, result.error
            seen.append(json.loads(result.final_message or "{}"))
    x1, x2, y = seen
    assert x1["uid"] == x2["uid"] != y["uid"] and 0 not in (x1["uid"], y["uid"])
    assert x1["user"] == lane_user_name("lane-x") and len(x1["user"]) <= 32
    assert x1["home"] == x2["home"] != y["home"]
    assert x2["before"] == "run-1", "a lane's HOME must last from one run to the next"
    assert y["before"] is None, "another lane's HOME is another directory"
    for run in seen:
        assert run["mode"] == 0o700 and run["owner"] == run["uid"]


@pytest.mark.parametrize("sandbox", ["auto", "off"])
def test_a_listener_that_is_not_root_gives_each_lane_a_home_of_its_own(sandbox: str) -> None:
    # As `nobody` (a listener that is not root, which cannot switch users): each
    # lane still gets a HOME of its own, in the sandbox it sees only its own, and
    # without the sandbox the keeper still holds the agent in a pid namespace.
    if os.geteuid() != 0:
        pytest.skip("runs a listener as another user (nobody), which needs root")
    state = Path(tempfile.mkdtemp(prefix="ceaseless-state-", dir="/tmp"))
    os.chown(state, 65534, 65534)
    env = {"PATH": "/usr/bin:/bin", "HOME": str(state), "XDG_STATE_HOME": str(state)}
    try:
        done = subprocess.run(
            ["/usr/bin/python3", "-I", "-c", _NOT_ROOT_LISTENER],
            user=65534,
            group=65534,
            extra_groups=[],
            env={**env, SANDBOX_VAR: sandbox},
            cwd=str(state),
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        report = json.loads(done.stdout.strip().splitlines()[-1])
    finally:
        subprocess.run(["rm", "-rf", str(state)], check=False)
    homes = state / "ceaseless" / "agent-homes"
    x, y = report["lane-x"], report["lane-y"]
    assert x["home"] == str(homes / "lane-x") and y["home"] == str(homes / "lane-y"), report
    assert x["mode"] == y["mode"] == 0o700
    if report["sandboxed"]:
        assert y["lanes"] == ["lane-y"], "in the sandbox a lane sees no other lane's HOME"
    elif sandbox == "off":
        assert report["containment"] in ("userns", "cgroup"), report
        assert "lanes can read each other's HOME" in report["warning"]


# Runs two lanes' agents with the isolation a listener that is not root gets,
# and prints what each saw of its HOME.
_NOT_ROOT_LISTENER = f"""
import asyncio, json, os, sys
sys.path.insert(0, {str(ROOT)!r})
from listener.agents import adapter_for, run_agent
from listener.agents.base import AgentConfig, Task
from listener.agents.sandbox import Isolation
from listener.enums import Adapter
code = (
    "import json, os; h = os.environ['HOME']; "
    "print(json.dumps({{'home': h, 'mode': os.stat(h).st_mode & 0o777, "
    "'lanes': sorted(os.listdir(os.path.dirname(h)))}}))"
)
isolation = Isolation.current()
out = {{"containment": isolation.containment.mode, "sandboxed": isolation.sandboxed,
        "warning": isolation.warning() or ""}}
work = os.path.join(os.environ["XDG_STATE_HOME"], "work")
os.makedirs(work, exist_ok=True)
for lane in ("lane-x", "lane-y"):
    config = AgentConfig(lane, Adapter.COMMAND, ["/usr/bin/python3", "-c", code], {{}}, None, 30, 1)
    result = asyncio.run(run_agent(adapter_for(Adapter.COMMAND), config,
        Task("j", "r", "go", cwd=work), cancel=asyncio.Event(), isolation=isolation))
    out[lane] = json.loads(result.final_message or "{{}}") or result.error
print(json.dumps(out))
"""


# Lanes apart, through a real listener.


@needs_root
@pytest.mark.slow
@pytest.mark.parametrize("mode", MODES)
def test_a_lanes_agent_cannot_read_another_lanes_environment_home_or_job_directory(
    monkeypatch: pytest.MonkeyPatch, conn: psycopg.Connection, db_url: str, mode: str
) -> None:
    isolation = isolate(monkeypatch, mode)  # the listener inherits this environment
    token = new_token()
    b_user = isolation.identity_for("lane-b")
    assert b_user is not None
    credentials = Path(b_user.home) / ".credentials"
    credentials.write_text(HOME_SECRET)
    os.chown(credentials, b_user.uid, b_user.gid)
    credentials.chmod(0o600)
    # Lane B holds an API key in its environment and writes its work in progress,
    # in its directory and in /tmp (which lanes share when there is no sandbox).
    scratch = Path("/tmp") / f"{token}.txt"
    sleeper = (
        f"import time; open('work.txt', 'w').write({FILE_SECRET!r}); "
        f"open({str(scratch)!r}, 'w').write({FILE_SECRET!r}); print('ok', flush=True); "
        "time.sleep(60)"
    )
    with workspace() as ws:
        (ws / "operator-notes.txt").write_text("the operator's own file")
        make_agent(
            conn,
            "lane-b",
            "command",
            ["python3", "-c", sleeper, token],
            env={"LANE_B_API_KEY": API_KEY},
            timeout_secs=90,
        )
        listener = ListenerProcess(db_url, "--poll-interval", "60", "--workdir", str(ws)).ready()
        try:
            b_job = make_job(conn, agent="lane-b")
            b_dir = job_directory(ws, b_job)
            wait_until(
                lambda: (b_dir / "work.txt").exists() and bool(processes_with(token)),
                30,
                lambda: f"lane B's agent never started: {listener.lines[-10:]}",
            )
            paths = [credentials, b_dir / "work.txt", b_dir, ws / JOB_DIRECTORIES, ws, scratch]
            make_agent(
                conn,
                "lane-a",
                "command",
                [FAKE_NEIGHBOUR],
                env={
                    "FAKE_NEIGHBOUR_TOKEN": token,
                    "FAKE_NEIGHBOUR_PATHS": os.pathsep.join(map(str, paths)),
                },
            )
            a_job = make_job(conn, agent="lane-a")
            report = _final_report(conn, a_job, listener)
        finally:
            conn.execute("select ceaseless.cancel_job(%s)", (b_job,))
            listener.stop(timeout=20)
            kill_quietly(processes_with(token))
            credentials.unlink(missing_ok=True)
            scratch.unlink(missing_ok=True)

    everything = json.dumps(report)
    for secret in (API_KEY, HOME_SECRET, FILE_SECRET):
        assert secret not in everything, f"lane A read lane B's {secret!r}: {report}"
    assert report["cwd"] == str(job_directory(ws, a_job))
    assert report["home"] != b_user.home and report["uid"] not in (0, b_user.uid)
    seen = report["paths"]
    if isolation.sandboxed:
        assert report["processes"] == [], "the sandbox shows no other agent's process"
        assert seen[str(ws)] == [JOB_DIRECTORIES], "nothing else of the root is there"
        assert seen[str(ws / JOB_DIRECTORIES)] == [str(a_job)], "no other job's directory"
        assert "No such file" in seen[str(credentials)]
    else:
        # Lane B's agent is in plain sight, but the kernel keeps it closed.
        assert report["processes"], f"lane A never saw lane B's agent: {report}"
        assert all("Permission denied" in p["environ"] for p in report["processes"]), report
        assert "Permission denied" in seen[str(credentials)]
        assert "Permission denied" in seen[str(b_dir)]
        assert "Permission denied" in seen[str(ws / JOB_DIRECTORIES)]
        assert "Permission denied" in seen[str(scratch)], "agents write with umask 077"


@pytest.mark.slow
@pytest.mark.parametrize("mode", MODES)
def test_a_job_keeps_its_own_directory_across_attempts_and_loses_it_once_it_ends(
    monkeypatch: pytest.MonkeyPatch, conn: psycopg.Connection, db_url: str, mode: str
) -> None:
    isolation = isolate(monkeypatch, mode)
    conn.execute("update ceaseless.settings set value = '1' where key = 'retry_base_secs'")
    code = (
        "import json, os, sys\n"
        "first = not os.path.exists('attempt')\n"
        "open('attempt', 'a').write('x')\n"
        "root = os.path.dirname(os.path.dirname(os.getcwd()))\n"
        "print(json.dumps({'cwd': os.getcwd(), 'first': first, 'root': sorted(os.listdir(root)),\n"
        "                  'mode': os.stat('.').st_mode & 0o777, 'owner': os.stat('.').st_uid}))\n"
        "sys.exit(1 if first else 0)\n"
    )
    with workspace() as ws:
        (ws / "operator-notes.txt").write_text("the operator's own file")
        make_agent(conn, "retrier", "command", ["python3", "-c", code], max_attempts=2)
        listener = ListenerProcess(db_url, "--poll-interval", "1", "--workdir", str(ws)).ready()
        try:
            job = make_job(conn, agent="retrier")
            own = job_directory(ws, job)
            wait_until(
                lambda: _state(conn, job) == "delivered",
                60,
                lambda: f"the job never got through its retry: {listener.lines[-10:]}",
            )
            rows = conn.execute(
                "select final_message from ceaseless.agent_run where job_id = %s "
                "order by started_at",
                (job,),
            ).fetchall()
            wait_until(lambda: not own.exists(), 15, lambda: f"{own} is still there")
        finally:
            listener.stop(timeout=20)
    first, second = (json.loads(row[0]) for row in rows)
    assert first["cwd"] == second["cwd"] == str(own)
    assert first["first"] and not second["first"], "the retry must find the first attempt's file"
    lane_user = isolation.identity_for("retrier")
    assert second["owner"] == (lane_user.uid if lane_user else os.geteuid())
    assert second["mode"] == 0o700
    if isolation.sandboxed:
        assert second["root"] == [JOB_DIRECTORIES], "nothing else of the root is in the sandbox"


def _state(conn: psycopg.Connection, job: object) -> str | None:
    row = conn.execute("select state from ceaseless.job where id = %s", (job,)).fetchone()
    return row[0] if row else None


def _final_report(conn: psycopg.Connection, job: object, listener: ListenerProcess) -> Any:
    wait_until(
        lambda: _state(conn, job) == "delivered",
        60,
        lambda: f"lane A's job never finished: {listener.lines[-10:]}",
    )
    row = conn.execute(
        "select final_message from ceaseless.agent_run where job_id = %s", (job,)
    ).fetchone()
    assert row is not None and row[0], "lane A's agent reported nothing"
    return json.loads(row[0])


@needs_root
def test_lane_users_need_only_to_pass_through_the_workspace_root(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    isolation = isolate(monkeypatch, "no_sandbox")
    closed = tmp_path / "closed"
    closed.mkdir(mode=0o700)
    assert str(closed) in (isolation.workspace_problem(str(closed)) or "")
    with workspace() as ws:
        ws.chmod(0o711)  # passable, neither listable nor writable: enough
        assert isolation.workspace_problem(str(ws)) is None


@needs_root
def test_a_checkout_is_handed_to_its_lanes_user_whole_without_following_symlinks(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # Forge checkouts are made by the listener; the lane's agent must own them.
    isolation = isolate(monkeypatch, "no_sandbox")
    lane_user = isolation.identity_for("lane-x")
    assert lane_user is not None
    outside = tmp_path / "outside"
    outside.write_text("the listener's own")
    checkout = tmp_path / "checkout"
    (checkout / "src" / "deep").mkdir(parents=True)
    (checkout / "src" / "deep" / "file.py").write_text("x = 1\n")
    (checkout / "link").symlink_to(outside)
    give_to(checkout, lane_user)
    for path in [checkout, *checkout.rglob("*")]:
        assert path.lstat().st_uid == lane_user.uid, path
    assert outside.stat().st_uid == 0, "a symlink in a checkout must not hand over its target"


@needs_root
def test_a_jobs_directory_is_kept_for_its_lane_and_emptied_for_another(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    isolation = isolate(monkeypatch, "no_sandbox")
    directories = JobDirectories(tmp_path, None, Ledger())  # type: ignore[arg-type]
    job = uuid.uuid4()
    path = asyncio.run(directories.prepare(job, "lane-x", isolation))
    (path / "left.txt").write_text("lane x's work")
    assert asyncio.run(directories.prepare(job, "lane-x", isolation)) == path
    assert (path / "left.txt").exists(), "the same lane's next attempt finds its files"
    assert asyncio.run(directories.prepare(job, "lane-y", isolation)) == path
    assert not (path / "left.txt").exists(), "another lane never finds them"
    lane_y = isolation.identity_for("lane-y")
    assert lane_y is not None and path.stat().st_uid == lane_y.uid
    assert stat.S_IMODE(path.stat().st_mode) == 0o700
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o711 and path.parent.stat().st_uid == 0


@needs_root
def test_only_results_of_jobs_given_a_directory_send_the_sweeper_to_the_database(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # A noop or forge job has no directory here: its recorded result must cost the sweeper
    # no lookup (at thousands of jobs a second, one lookup and thread hop each was a third
    # of the listener's time); a job whose directory this listener made is looked up and
    # its directory removed within about a second.
    isolation = isolate(monkeypatch, "no_sandbox")
    asked: list[list[uuid.UUID]] = []

    async def ended_jobs(_conn: object, ids: list[uuid.UUID]) -> list[uuid.UUID]:
        asked.append(list(ids))
        return list(ids)

    class Database:
        async def retry(self, _what: str, attempt: Any) -> Any:
            return await attempt(None)

    monkeypatch.setattr("listener.daemon.producer.workdirs.jobs.ended_jobs", ended_jobs)

    async def scenario() -> Path:
        directories = JobDirectories(tmp_path, Database(), Ledger())  # type: ignore[arg-type]
        # Past the full sweep every sweeper starts with, however late a loaded machine runs
        # it: a listing that came after the directory was made would take the directory out
        # from under prepare() as a leftover of an ended job (the fake says every job ended).
        loop = asyncio.get_running_loop()
        listed = asyncio.Event()
        list_directories = directories._listed

        def listing() -> set[uuid.UUID]:
            found = list_directories()
            loop.call_soon_threadsafe(listed.set)
            return found

        monkeypatch.setattr(directories, "_listed", listing)
        sweeper = asyncio.create_task(directories.sweep())
        await asyncio.wait_for(listed.wait(), 30)
        made, plain = uuid.uuid4(), uuid.uuid4()
        path = await directories.prepare(made, "lane-x", isolation)
        directories.recorded([plain, made])
        # Wait for the removal itself, not for the question: cancelling the sweeper while
        # its removal waits for a free executor thread (a loaded machine) would cancel it.
        deadline = loop.time() + 30
        while path.exists() and loop.time() < deadline:
            await asyncio.sleep(0.05)
        sweeper.cancel()
        assert asked == [[made]], asked
        return path

    assert not asyncio.run(scenario()).exists()
