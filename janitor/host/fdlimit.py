"""The process's open-file limit (``RLIMIT_NOFILE``), and raising its soft limit as servers do.

Service managers start a user's daemon with a small soft limit and a large hard one: systemd's
user services since v240 get 1024 soft, 524288 hard (``DefaultLimitNOFILE=1024:524288``: the
soft limit stays at 1024 for programs that still use ``select()``, which cannot see a
descriptor past 1023); launchd gives 256 soft, unlimited hard (``launchctl limit maxfiles``).
A server that never calls ``select()`` raises its own soft limit at start, as systemd asks of
such programs and as Go's runtime and the JVM do; the daemon's event loops use epoll and kqueue.

It is raised to the hard limit, at most :data:`TARGET` (10,240: macOS's ``OPEN_MAX``, the JVM's
choice there, where ``setrlimit`` refuses an unlimited soft limit and one past
``kern.maxfilesperproc``): far more than the daemon holds (its own files, the API's
connections, the metrics listener's bounded share), and never lowered. Its children (ffprobe,
the compiler, the size walker) inherit it: Go gives its children the old soft limit back, which
``subprocess`` has no hook for, and none of these holds a thousand files (``select()``'s bound).
"""

from __future__ import annotations

import resource
from dataclasses import dataclass

__all__ = ["TARGET", "OpenFiles", "open_files", "raise_open_files"]

#: The soft limit asked for (or the hard limit, when lower).
TARGET = 10240


@dataclass(frozen=True, slots=True)
class OpenFiles:
    """The open-file limit: ``soft`` now, ``hard`` (None: unlimited), ``was`` before raising
    (``soft`` when nothing changed), ``error`` why raising failed (None when it did not)."""

    soft: int
    hard: int | None
    was: int
    error: str | None = None

    @property
    def raised(self) -> bool:
        """True when the soft limit was raised here."""
        return self.soft > self.was


def open_files() -> OpenFiles:
    """The limit as it is now (an unlimited soft limit reads as :data:`TARGET`: all the daemon
    plans for)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    now = _finite(soft) or TARGET
    return OpenFiles(soft=now, hard=_finite(hard), was=now)


def raise_open_files(target: int = TARGET) -> OpenFiles:
    """Raise the soft limit to ``min(hard, target)`` unless it is that high already."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft >= target:
        return open_files()
    want = target if hard == resource.RLIM_INFINITY else min(hard, target)
    if want <= soft:
        return OpenFiles(soft=soft, hard=_finite(hard), was=soft)
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
    except (OSError, ValueError) as exc:  # a hard limit the kernel lowers (macOS), a sandbox
        return OpenFiles(soft=soft, hard=_finite(hard), was=soft, error=str(exc))
    return OpenFiles(soft=want, hard=_finite(hard), was=soft)


def _finite(limit: int) -> int | None:
    return None if limit == resource.RLIM_INFINITY else int(limit)
