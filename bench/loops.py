"""Loops and topology runs: how fast a loop's graph finishes once fired. (How fast a loop
chains its iterations is `loop_chain` in bench/ours.py.)

The scenario uses noop agents (the listener's in-process adapter: no process
is spawned), so what is measured is the engine: the triggers that fan out and
fan in, the job queue, and the listener's claims and finishes. Times are read from
the database's own timestamps of each run (created_at when run_loop inserted
it, finished_at in the transaction that ended it), so the client's polling
does not count.
"""

from __future__ import annotations

import json

import psycopg

from bench.observe import Listener, percentile, wait_until
from bench.ours import Measurement
from bench.server import Server


def _graph(nodes: int) -> dict:
    """A fan-out / fan-in graph of `nodes` nodes: a source, nodes - 2 in parallel, a sink."""
    middle = [f"n{i}" for i in range(1, nodes - 1)]
    return {
        "nodes": [
            {"id": n, "agent": "noop", "prompt": f"do {n}"} for n in ["source", *middle, "sink"]
        ],
        "edges": [{"from": "source", "to": n} for n in middle]
        + [{"from": n, "to": "sink"} for n in middle],
    }


def _setup(conn: psycopg.Connection) -> None:
    conn.execute(
        "insert into ceaseless.agents (name, adapter, max_concurrent) "
        "values ('noop', 'noop', 100000)"
    )


def _add_loop(conn: psycopg.Connection, graph: dict, triggers: dict, policy: dict) -> str:
    row = conn.execute(
        "insert into ceaseless.loops (title, description, graph, task_template, triggers, "
        "repeat_policy) values ('bench', '', %s, 'the task', %s, %s) returning id",
        (json.dumps(graph), json.dumps(triggers), json.dumps(policy)),
    ).fetchone()
    assert row is not None
    return str(row[0])


def _runs_per_node(conn: psycopg.Connection, loop: str) -> tuple[int, int]:
    """Nodes of the loop's runs that never ran, and agent runs beyond one per node."""
    row = conn.execute(
        "select count(*) filter (where coalesce(r.runs, 0) = 0), "
        "       coalesce(sum(greatest(r.runs - 1, 0)), 0) "
        "from ceaseless.topology_nodes n "
        "join ceaseless.topology_runs t on t.id = n.topology_run_id "
        "left join (select job_id, count(*) as runs from ceaseless.agent_run group by job_id) r "
        "  on r.job_id = n.job_id "
        "where t.loop_id = %s",
        (loop,),
    ).fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


def fire_to_finish(server: Server, nodes: int, fires: int) -> Measurement:
    """run_loop → the iteration's `nodes`-node graph succeeded, `fires` times one after another."""
    with server.database(migrated=True) as url, psycopg.connect(url, autocommit=True) as conn:
        _setup(conn)
        loop = _add_loop(conn, _graph(nodes), {}, {"kind": "infinite"})
        proc = Listener(url, "--poll-interval", "60", worker_id="bench-loop").wait_ready()
        try:
            for _ in range(fires):
                row = conn.execute("select ceaseless.run_loop(%s)", (loop,)).fetchone()
                assert row is not None
                run = row[0]
                wait_until(
                    lambda r=run: (
                        conn.execute(
                            "select finished_at is not null from ceaseless.topology_runs "
                            "where id = %s",
                            (r,),
                        ).fetchone()
                        == (True,)
                    ),
                    timeout=120,
                    interval=0.005,
                )
        finally:
            proc.stop()
        rows = conn.execute(
            "select status, extract(epoch from finished_at - created_at) * 1000 "
            "from ceaseless.topology_runs where loop_id = %s and iteration is not null",
            (loop,),
        ).fetchall()
        samples = [float(ms) for status, ms in rows if status == "succeeded"]
        never_ran, doubled = _runs_per_node(conn, loop)
        return Measurement(
            {
                "done_p50_ms": percentile(samples, 50),
                "done_max_ms": max(samples) if samples else float("nan"),
            },
            lost=fires - len(samples) + never_ran,
            duplicated=doubled,
        )
