"""The shared fixtures and the helpers beside them, one module per job (tests/conftest.py
loads the fixtures; a test imports a helper from its module, e.g. ``tests._fixtures.space``)."""
