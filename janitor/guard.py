"""The guard's old address: a guarded ffmpeg written by an earlier ``janitor shim install`` runs
``from janitor.guard import main``. It keeps working after an upgrade; ``janitor shim status``
calls it not current, and ``janitor shim install`` rewrites it to import
:mod:`janitor.commands.guard`.
"""

from __future__ import annotations

from janitor.commands.guard import main

__all__ = ["main"]
