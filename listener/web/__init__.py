"""The listener's HTTP server: one aiohttp application on one address.

- server.py builds the application, binds it and serves the webhook ingress;
- access.py is the one rule of who may use which route (the token, the Host check,
  CSRF for actions), applied before every handler; token.py keeps the token;
- observer.py streams runs and loops over SSE; metrics.py serves GET /metrics;
- dashboard/ renders the operator's pages and actions.
"""
