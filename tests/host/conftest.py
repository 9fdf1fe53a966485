"""Fixtures of the host layer's tests: the compiled size walker, built once for the session."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def size_walker(native_dir: Path) -> Path:
    """The compiled size walker (``janitor.host.nativewalk``), built; skips without a compiler."""
    from janitor.host.cbuild import BuildFailed, why_not
    from janitor.host.nativewalk import build_walker

    try:
        return build_walker(native_dir)
    except BuildFailed as exc:
        pytest.skip(f"the size walker cannot be built here: {why_not() or exc.reason}")
