"""Named calls into the SQL API: the listener's whole vocabulary with the database.

Every statement the listener runs is here, but those of listener/database/, which
talks to the server about the schema and its own bookkeeping (migrate, the SQL
reference, the embedded server, the connections' checks). One module per area:
the running listener's (jobs, schedule, outbox, webhooks, the forge lane, the
LISTEN connection, …) are async calls on its pool; the dashboard's are
`dashboard`; the command line's are `commands/`, plain calls, a module per command
group. A statement is written once: where two callers need it (deciding an
approval), both call the one function. Everything else in the listener calls
these; tests/listener/test_statements_live_in_queries.py fails on a module
outside the two packages that runs a statement.

Each function is one round trip and, unless it says otherwise, one transaction
(the connections are autocommit). No decisions are made here: the SQL functions
decide, this package only moves arguments and rows across.
"""
