"""Named calls into the SQL API: the listener's whole vocabulary with the database.

Every statement the listener runs is here, one module per area (jobs, the
registry, cron, the notification outbox, webhooks); everything else in the
listener calls these. Each function is one round trip and, unless it says
otherwise, one transaction (the connections are autocommit). No decisions are
made here: the SQL functions decide, this package only moves arguments and
rows across.
"""
