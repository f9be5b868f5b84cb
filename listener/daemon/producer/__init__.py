"""The producer: claim jobs, run their agents, record their results, keep their leases.

Four parts share one ledger (ledger.py) of what this listener holds:
- claimer.py claims in batches when woken or when the poll interval passes,
  and starts each job's agent (runner.py);
- recorder.py records sessions as agents report them and results as agents
  end, in batches, retrying until the database has them;
- leases.py renews the leases of what is held, stops agents whose jobs are no
  longer held, and fences: an agent whose lease could not be renewed is
  stopped before that lease can end, so no job ever runs on two listeners.
"""
