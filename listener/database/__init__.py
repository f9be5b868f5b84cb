"""Everything that talks to PostgreSQL as a server rather than through the SQL API.

- connections.py: where the database is (DATABASE_URL or the embedded server),
  connections and pools with deadlines, JSON decoding that never raises;
- pool.py: the listener's pool with its one retry policy (`Database`);
- embedded.py: the embedded PostgreSQL that `ceaseless up` starts when no URL is set;
- migrate.py: applies db/ once and functions/ when they change;
- reference.py: the SQL reference and the schema dump, generated from the catalog.

The statements the listener runs against the SQL API live in listener/queries/.
"""
