"""Fixtures of the SQL tests: login_role lives in tests/conftest.py, shared by every area."""
