"""The guarded ffmpeg's old address (:mod:`janitor.commands.guard`): a guard an earlier ``janitor
shim install`` wrote imports ``main`` from here. It keeps working after an upgrade; ``janitor
shim status`` calls it not current, and ``janitor shim install`` rewrites it."""

from __future__ import annotations

from janitor.commands.guard import main

__all__ = ["main"]
