"""What makes a file one of our guards: a mark in its first bytes, or in the sidecar beside it.

The search for a real ``ffmpeg`` or ``ffprobe`` skips such files (never the guard itself), and
so does the estimator's search for an ffprobe to measure a recording with. Stdlib only, and
tiny: the guards import it at every start.
"""

from __future__ import annotations

import os

__all__ = ["GUARD_MARK", "is_guard"]

#: Every guard script carries this line (the Python front ends, and the compiled front end's
#: sidecar ``NAME.guard``).
GUARD_MARK = b"# space-janitor guard"


def _marked(path: str) -> bool:
    try:
        with open(path, "rb") as f:
            head = f.read(512)
    except OSError:
        return False
    return GUARD_MARK in head


def is_guard(path: str) -> bool:
    """A guard of ours: the mark in its first 512 bytes (a Python front end's script), or a
    ``NAME.guard`` with the mark beside the file it resolves to (the compiled front end, whose
    settings and Python fallback that file is)."""
    if _marked(path):
        return True
    try:
        real = os.path.realpath(path)
    except (OSError, ValueError):
        return False
    return _marked(real + ".guard")
