"""ceaseless: a Postgres-native runner of AI-agent work.

The package is the thin part: it LISTENs, claims jobs through the SQL functions in
`functions/`, spawns agent processes and records what they did. Every rule about
*whether* something may run lives in the database.
"""

__version__ = "0.1.0"
