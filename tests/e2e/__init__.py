"""End-to-end tests: a package, so a module may share its basename with one in tests/sql."""
