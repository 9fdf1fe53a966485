"""The estimator's old address (:mod:`janitor.commands.estimate`), kept for workers that import
``estimate_media`` and ``pcm_bytes`` from here: the same functions and values."""

from __future__ import annotations

from janitor.commands.estimate import (
    WAV_HEADER_BYTES,
    Estimate,
    conversion_args,
    estimate_bytes,
    estimate_media,
    pcm_bytes,
    probe_duration,
)

__all__ = [
    "WAV_HEADER_BYTES",
    "Estimate",
    "conversion_args",
    "estimate_bytes",
    "estimate_media",
    "pcm_bytes",
    "probe_duration",
]
