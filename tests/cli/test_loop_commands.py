"""`ceaseless loop …`, `ceaseless run show|cancel` and `ceaseless approve|reject` against a real
database (no listener: runs stay where the engine puts them)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import psycopg
import pytest

from tests.e2e.support import run_cli
from tests.factories import make_agent
from tests.sql.topology import graph, node, run_node, start_run

GRAPH = {"nodes": [{"id": "A", "agent": "noop", "prompt": "draft"}], "edges": []}


def _ok(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, result.stderr
    return result.stdout


def _one_line_error(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 1, result.stdout
    assert "Traceback" not in result.stderr
    return result.stderr


@pytest.fixture(autouse=True)
def agent(conn: psycopg.Connection) -> None:
    make_agent(conn)


@pytest.fixture
def graph_file(tmp_path: Path) -> str:
    path = tmp_path / "graph.json"
    path.write_text(json.dumps(GRAPH))
    return str(path)


def test_loop_lifecycle_from_the_command_line(
    db_url: str, conn: psycopg.Connection, graph_file: str
) -> None:
    loop = _ok(
        run_cli(
            db_url,
            "loop",
            "add",
            "--title",
            "refine",
            "--task",
            "improve it",
            "--graph",
            graph_file,
            "--on-completion",
            "--iters",
            "3",
        )
    ).strip()
    row = conn.execute(
        "select triggers, repeat_policy, enabled from ceaseless.loops where id = %s", (loop,)
    ).fetchone()
    assert row == ({"on_completion": True}, {"kind": "iters", "spec": {"n": 3}}, True)

    listed = _ok(run_cli(db_url, "loop", "list"))
    assert "refine" in listed and "on_completion" in listed and "iters" in listed

    fired = _ok(run_cli(db_url, "loop", "run", "refine"))
    run_id = fired.split()[0]
    assert "iteration 1" in fired
    # One live iteration at most: the second fire is recorded as skipped, and refused (exit 1).
    again = run_cli(db_url, "loop", "run", loop)
    assert again.returncode == 1 and "skipped: live_iteration" in again.stdout

    shown = _ok(run_cli(db_url, "loop", "show", "refine"))
    assert run_id in shown and "live_iteration" in shown and '"n": 3' in shown

    run = _ok(run_cli(db_url, "run", "show", run_id))
    assert "running" in run and "improve it" in run
    assert "queued" in run and "noop" in run

    assert "paused" in _ok(run_cli(db_url, "loop", "pause", "refine"))
    assert conn.execute(
        "select enabled from ceaseless.loops where id = %s", (loop,)
    ).fetchone() == (False,)
    refused = _one_line_error(run_cli(db_url, "loop", "delete", "refine"))
    assert "live" in refused
    assert "cancelled" in _ok(run_cli(db_url, "run", "cancel", run_id))
    assert "resumed" in _ok(run_cli(db_url, "loop", "resume", loop))
    # A cancelled iteration stopped the loop; resuming an on_completion loop
    # starts its next iteration at once.
    assert conn.execute(
        "select count(*) from ceaseless.topology_runs where loop_id = %s and iteration = 2",
        (loop,),
    ).fetchone() == (1,)
    live = conn.execute(
        "select id from ceaseless.topology_runs where loop_id = %s and iteration = 2", (loop,)
    ).fetchone()
    assert live is not None
    _ok(run_cli(db_url, "run", "cancel", str(live[0])))
    assert "deleted" in _ok(run_cli(db_url, "loop", "delete", loop))
    assert conn.execute("select count(*) from ceaseless.loops").fetchone() == (0,)


def test_a_webhook_loop_from_stdin_never_shows_its_credential(
    db_url: str, conn: psycopg.Connection
) -> None:
    added = run_cli(
        db_url,
        "loop",
        "add",
        "--title",
        "hooked",
        "--task",
        "t",
        "--graph",
        "-",
        "--webhook",
        "--cron",
        "0 9 * * *",
        "--tz",
        "Europe/Berlin",
        "--until-match",
        "DONE",
        "--within",
        "5",
        stdin=json.dumps(GRAPH),
    )
    loop = _ok(added).strip()
    token, key, triggers, policy = conn.execute(
        "select webhook_token, webhook_signing_key, triggers, repeat_policy "
        "from ceaseless.loops where id = %s",
        (loop,),
    ).fetchone()
    assert token and key
    assert triggers["timezone"] == "Europe/Berlin" and triggers["webhook_enabled"] is True
    assert policy == {"kind": "until", "spec": {"match": "DONE", "within_iters": 5}}
    shown = run_cli(db_url, "loop", "show", loop)
    for output in (added.stdout + added.stderr, shown.stdout + shown.stderr):
        assert token not in output and key not in output
        assert "select webhook_token, webhook_signing_key from ceaseless.loops" in output


def test_bad_loops_are_refused_in_one_line_naming_the_culprit(
    db_url: str, graph_file: str, tmp_path: Path
) -> None:
    cyclic = tmp_path / "cyclic.json"
    cyclic.write_text(json.dumps(graph([node("A"), node("B")], [("A", "B"), ("B", "A")])))
    base = ("loop", "add", "--title", "x", "--task", "t", "--graph")
    assert "cycle" in _one_line_error(run_cli(db_url, *base, str(cyclic))).lower()
    unknown = tmp_path / "unknown.json"
    unknown.write_text(json.dumps(graph([node("A", agent="ghost")])))
    assert "ghost" in _one_line_error(run_cli(db_url, *base, str(unknown)))
    assert "not JSON" in _one_line_error(run_cli(db_url, *base, "-", stdin="{nope"))
    assert "missing.json" in _one_line_error(run_cli(db_url, *base, "missing.json"))
    both = run_cli(db_url, *base, graph_file, "--iters", "2", "--until-match", "DONE")
    assert "choose one repeat policy" in _one_line_error(both)
    assert "--within" in _one_line_error(run_cli(db_url, *base, graph_file, "--within", "3"))
    assert "no loop" in _one_line_error(run_cli(db_url, "loop", "show", "nothing-here"))
    assert "no topology run" in _one_line_error(run_cli(db_url, "run", "show", "nothing"))


def test_approve_and_reject_decide_once(db_url: str, conn: psycopg.Connection) -> None:
    gated = graph([node("A", gate="approval")])
    first, second = start_run(conn, gated), start_run(conn, gated)

    def approval(run: object) -> str:
        row = conn.execute(
            "select id from ceaseless.approvals where topology_run_id = %s", (run,)
        ).fetchone()
        assert row is not None
        return str(row[0])

    shown = _ok(run_cli(db_url, "run", "show", str(first)))
    assert approval(first) in shown and "awaiting_approval" in shown
    assert "approved" in _ok(
        run_cli(db_url, "approve", approval(first), "--note", "looks fine", "--by", "alice")
    )
    assert conn.execute(
        "select decision, decided_by, note from ceaseless.approvals where id = %s",
        (approval(first),),
    ).fetchone() == ("approved", "alice", "looks fine")
    assert "rejected" in _ok(run_cli(db_url, "reject", approval(second), "--note", "no"))
    assert conn.execute(
        "select status from ceaseless.topology_runs where id = %s", (second,)
    ).fetchone() == ("failed",)
    twice = _one_line_error(run_cli(db_url, "approve", approval(second)))
    assert "decided" in twice or "already" in twice


def test_loop_show_keeps_a_multi_line_final_message_on_its_row(
    db_url: str, conn: psycopg.Connection, graph_file: str
) -> None:
    added = _ok(run_cli(db_url, "loop", "add", "--title", "notes", "--task", "t",
                        "--graph", graph_file))  # fmt: skip
    run_id = _ok(run_cli(db_url, "loop", "run", "notes")).split()[0]
    message = "Summary:\n- fixed the intro\n- tightened the ending"
    assert run_node(conn, run_id, "A", message=message) == "delivered"

    shown = _ok(run_cli(db_url, "loop", "show", added.strip()))

    (row,) = [line for line in shown.splitlines() if line.startswith("1 ")]
    assert "Summary: ⏎ - fixed the intro ⏎ - tightened the ending" in row
    document = json.loads(_ok(run_cli(db_url, "loop", "show", "notes", "-o", "json")))
    assert document["iterations"][0]["message"] == message


def test_run_retry_resumes_a_failed_run_and_refuses_a_live_one(
    db_url: str, conn: psycopg.Connection
) -> None:
    conn.execute("update ceaseless.agents set max_attempts = 1 where name = 'noop'")
    run_id = start_run(conn, graph([node("A")]))
    assert run_node(conn, run_id, "A", "failed", error="exit status 1") == "failed"
    assert conn.execute(
        "select status from ceaseless.topology_runs where id = %s", (run_id,)
    ).fetchone() == ("failed",)

    retried = run_cli(db_url, "run", "retry", str(run_id))

    assert retried.returncode == 0, retried.stderr
    assert retried.stdout.strip() == f"run {run_id} running"
    again = _one_line_error(run_cli(db_url, "run", "retry", str(run_id)))
    assert "retry_topology_run" in again


def test_loop_add_event_stores_the_event_trigger(
    db_url: str, conn: psycopg.Connection, graph_file: str
) -> None:
    added = _ok(run_cli(db_url, "loop", "add", "--title", "doctor", "--task", "t",
                        "--graph", graph_file, "--event", "^deploy (failed|broken)",
                        "--channel", "ci"))  # fmt: skip
    stored = conn.execute(
        "select triggers from ceaseless.loops where id = %s", (added.strip(),)
    ).fetchone()
    assert stored == ({"event": {"pattern": "^deploy (failed|broken)", "channel": "ci"}},)
    alone = _one_line_error(run_cli(db_url, "loop", "add", "--title", "x", "--task", "t",
                                    "--graph", graph_file, "--channel", "ci"))  # fmt: skip
    assert "--channel goes with --event" in alone


def test_loop_add_takes_the_overlap_policy_and_debounce(
    db_url: str, conn: psycopg.Connection, graph_file: str
) -> None:
    added = _ok(run_cli(db_url, "loop", "add", "--title", "triage", "--task", "t",
                        "--graph", graph_file, "--webhook", "--overlap", "buffer_all",
                        "--debounce", "5"))  # fmt: skip
    stored = conn.execute(
        "select overlap_policy, debounce_secs, debounce_max_secs from ceaseless.loops "
        "where id = %s",
        (added.strip().splitlines()[0],),
    ).fetchone()
    assert stored == ("buffer_all", 5, None)
    refused = run_cli(db_url, "loop", "add", "--title", "x", "--task", "t",
                      "--graph", graph_file, "--overlap", "allow_all")  # fmt: skip
    assert refused.returncode != 0 and "allow_all" in refused.stderr


def test_loop_add_takes_the_min_interval(
    db_url: str, conn: psycopg.Connection, graph_file: str
) -> None:
    base = ("loop", "add", "--task", "t", "--graph", graph_file, "--on-completion")
    paced = _ok(run_cli(db_url, *base, "--title", "paced", "--min-interval", "30")).strip()
    unpaced = _ok(run_cli(db_url, *base, "--title", "unpaced", "--min-interval", "0")).strip()
    default = _ok(run_cli(db_url, *base, "--title", "default")).strip()
    stored = dict(
        conn.execute("select id::text, min_interval_secs from ceaseless.loops").fetchall()
    )
    assert (stored[paced], stored[unpaced], stored[default]) == (30, 0, 1)
    refused = _one_line_error(run_cli(db_url, *base, "--title", "x", "--min-interval", "-1"))
    assert "loops.min_interval_secs" in refused and "got -1" in refused


def test_a_run_the_overlap_policy_keeps_is_printed_as_held_with_what_it_waits_for(
    db_url: str, conn: psycopg.Connection, graph_file: str
) -> None:
    _ok(run_cli(db_url, "loop", "add", "--title", "refine", "--task", "improve it",
                "--graph", graph_file, "--overlap", "buffer_one"))  # fmt: skip
    assert "iteration 1" in _ok(run_cli(db_url, "loop", "run", "refine"))

    held = run_cli(db_url, "loop", "run", "refine")

    assert held.returncode == 0, held.stderr
    held_id = held.stdout.split()[0]
    assert held.stdout.strip() == f"{held_id} held (buffered: waits for live_iteration)"
    assert conn.execute("select count(*) from ceaseless.held_fires").fetchone() == (1,)


def test_routines_and_loops_take_the_trigger_options_by_the_same_names(
    db_url: str, conn: psycopg.Connection
) -> None:
    # One trigger layer, one set of options: --timezone and --tz both read the cron's zone,
    # and the jobs' priority and fairness key are set the same way, for either kind.
    assert run_cli(db_url, "agent", "add", "noop", "--adapter", "noop").returncode == 0
    shared = ["--cron", "0 9 * * *", "--job-priority", "5", "--job-fairness-key", "team-a"]
    routine = run_cli(
        db_url,
        "routine",
        "add",
        "r",
        "--agent",
        "noop",
        "--prompt",
        "p",
        "--tz",
        "Asia/Tokyo",
        *shared,
    )
    loop = run_cli(
        db_url, "loop", "add", "--title", "l", "--task", "t", "--graph", "-",
        "--timezone", "Asia/Tokyo", *shared,
        stdin=json.dumps(GRAPH),
    )  # fmt: skip
    rows = conn.execute(
        "select trigger_config ->> 'timezone', job_priority, job_fairness_key "
        "from ceaseless.routines where id = %s "
        "union all "
        "select triggers ->> 'timezone', job_priority, job_fairness_key "
        "from ceaseless.loops where id = %s",
        (_ok(routine).strip(), _ok(loop).strip()),
    ).fetchall()
    assert rows == [("Asia/Tokyo", 5, "team-a")] * 2
