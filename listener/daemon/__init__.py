"""The running listener: what `ceaseless up` keeps alive.

- supervisor.py starts every part below and the web server, and stops them in order;
- notifier.py holds the one LISTEN connection and turns NOTIFY payloads into typed
  events (listener/events.py); router.py hands each event to the part it concerns;
- producer/ claims jobs, runs their agents, records their runs and keeps their leases;
- scheduler.py computes cron slots with croniter and hands due schedules to SQL;
- maintenance.py runs the periodic sweeps (expired leases, approvals, recounts);
- outbox.py delivers notifications to their sinks; registry.py keeps the agents
  configuration every part reads.

Nothing here imports the web package but the supervisor, which starts it: the job
loop reaches counters through listener/counters.py, never through the server.
"""
