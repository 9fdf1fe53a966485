"""How often the daemon samples its volumes: calm, or closely while some volume is at risk.

A small state machine fed ``now`` by its caller (no clock of its own), as
:class:`janitor.admission.risk.LevelTracker` is: closer at once, calmer only after ``settle_s``
with no reason to watch closely, so a volume that hovers at free_low does not switch the pace
(and log it) at every sample. The reasons to watch closely are the sampler's
(:meth:`janitor.daemon.sampler.Sampler.sample`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["SamplePace"]


@dataclass(slots=True)
class SamplePace:
    """The sampling interval: ``calm_s``, or ``close_s`` while watching closely (and until
    ``settle_s`` after the last reason to)."""

    calm_s: float
    close_s: float
    settle_s: float
    every: float = field(init=False)
    _calm_since: float | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        self.close_s = min(self.close_s, self.calm_s)
        self.every = self.calm_s

    def update(self, watch: str | None, now: float) -> float | None:
        """The new interval when it changes with this sample (``watch``: why some volume is
        watched closely, or None), else None."""
        if watch is not None:
            self._calm_since = None
        elif self._calm_since is None:
            self._calm_since = now
        want = self.close_s if watch is not None else self.calm_s
        if want == self.every:
            return None
        calm_for = 0.0 if self._calm_since is None else now - self._calm_since
        if want > self.every and calm_for < self.settle_s:
            return None
        self.every = want
        return want
