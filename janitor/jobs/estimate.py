"""The estimator's old address (:mod:`janitor.commands.estimate`), kept for workers that import
``estimate_media`` and ``pcm_bytes`` from here: the same functions and values, its ``__all__``."""

from __future__ import annotations

from janitor.commands.estimate import *  # noqa: F403  (one list of names: the module's own)
from janitor.commands.estimate import __all__ as __all__
