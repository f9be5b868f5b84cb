"""The runner: one claimed job's agent, from spawn to a result for the recorder.

Guarantees: a task agent runs in its job's own directory under the workspace
root (workdirs.py), never in the root itself, and a forge agent in its
checkout, handed to its lane's OS user by the forge run (forge/run.py); the
sandbox shows it nothing else of the workspace root or the forge root. The job
leaves the ledger's `running` only once its agent has exited and been reaped
(run_agent's guarantee); the result it hands on says why the listener stopped
the agent, if it did — cancelled, or lease_expired when the lease could not be
renewed; an agent released at shutdown yields no
result (release_jobs ends its run); a bug in an adapter is a failed run, never
a run left open.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from listener import log
from listener.agents import adapter_for, run_agent
from listener.agents.base import AgentConfig, RunResult, Task
from listener.agents.sandbox import Isolation
from listener.daemon.producer.context import compose_prompt
from listener.daemon.producer.ledger import Held, Ledger, StopReason
from listener.daemon.producer.recorder import Recorder
from listener.daemon.producer.workdirs import JobDirectories
from listener.database.pool import Database
from listener.enums import FORGE_KINDS, Outcome
from listener.forge.run import run_forge_job
from listener.queries.jobs import FinishedRun


async def run_held(
    held: Held,
    agent: AgentConfig,
    *,
    directories: JobDirectories,
    forge_root: Path,
    database: Database,
    ledger: Ledger,
    recorder: Recorder,
) -> None:
    job = held.job
    isolation = Isolation.current()

    async def invoke(prompt: str, cwd: str | None) -> RunResult:
        task = Task(
            job_id=str(job.id),
            run_id=str(held.run_id),
            # A reply resumes the session, which holds the task: it is the
            # whole prompt (claim_jobs returns one only with a session).
            prompt=job.reply if job.reply is not None else prompt,
            max_turns=job.max_turns,
            resume_session_id=job.resume_session_id,
            cwd=cwd,
            # Other jobs' directories and other runs' checkouts: hidden.
            private=(str(directories.root), str(forge_root)),
            max_tokens=job.payload.get("max_tokens"),
            budget_usd=None if job.budget_usd is None else float(job.budget_usd),
            budget_tokens=job.budget_tokens,
        )
        return await run_agent(
            adapter_for(agent.adapter),
            agent,
            task,
            cancel=held.stop,
            on_session=lambda session: recorder.note_session(held.run_id, session),
            isolation=isolation,
        )

    try:
        if job.kind in FORGE_KINDS:
            result = await run_forge_job(
                job,
                held.run_id,
                root=forge_root,
                database=database,
                stop=held.stop,
                invoke=invoke,
            )
        else:
            prompt = compose_prompt(job.prompt, job.payload, directories.root)
            try:
                cwd = await directories.prepare(job.id, agent.name, isolation)
            except (OSError, subprocess.SubprocessError) as exc:
                result = RunResult(
                    outcome=Outcome.FAILED,
                    error=f"agent {agent.name!r}: the job's working directory is unusable: {exc}",
                )
            else:
                result = await invoke(prompt, str(cwd))
    except Exception as exc:  # an adapter bug must not strand the run
        result = RunResult(outcome=Outcome.FAILED, error=f"listener error: {exc!r}")
    finally:
        ledger.running.pop(job.id, None)
        ledger.wake.set()
    if held.stop_reason is StopReason.RELEASED:
        return
    if held.stop_reason is StopReason.FENCED:
        result.outcome = Outcome.LEASE_EXPIRED
        result.error = (
            "stopped by its listener before its lease could end: the lease could not be "
            "renewed (the database was unreachable), and another listener may take the job over"
        )
    log.event(
        "job.finished",
        job=str(job.id),
        run=str(held.run_id),
        outcome=str(result.outcome),
        exit_status=result.exit_status,
    )
    recorder.record(FinishedRun(held.run_id, job.id, result))
