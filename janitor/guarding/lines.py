"""The lines a guarded call prints and logs, worded once for both front ends.

A verdict (:mod:`janitor.guarding.verdict`) carries them: ``say``, the line the guard prints
on stderr (batchalign3 shows ffmpeg's stderr to its users as it is, so each is one line that
begins ``space-janitor:``), and ``log``, its ``guard.log`` line.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from janitor.errors import NeverFits, ReservationRefused, WaitWontHelp
from janitor.humanize import format_duration, format_size

if TYPE_CHECKING:
    from janitor.guarding.held import WriteSession

__all__ = ["refusal_line", "reserved_line", "stopped_before_line", "unguarded_line"]


def refusal_line(refused: ReservationRefused) -> str:
    """The line a refused call prints: the output, the bytes, the volume and its numbers, and
    what to do."""
    free, floor, reserved = refused.free, refused.floor, refused.reserved
    output, volume = refused.output or "", refused.volume
    head = f"refused to write {output} ({format_size(refused.requested)}) on volume {volume}: "
    if isinstance(refused, NeverFits):
        return (
            head + f"it can never fit there: capacity {format_size(refused.capacity)}, "
            f"floor {format_size(floor)}, {format_size(refused.held)} held by files outside "
            f"every reservation and cache leave at most {format_size(refused.most)} even "
            f"once every job ends. Free space on {volume} or use a bigger disk; ffmpeg did not run"
        )
    if isinstance(refused, WaitWontHelp):
        return (
            head + f"{format_size(free)} free, floor {format_size(floor)}, "
            f"{format_size(reserved)} reserved by others, short by "
            f"{format_size(refused.lacks)}; the work on {volume} gives back "
            f"{format_size(refused.coming)} when it ends, so waiting would not make it fit: "
            f"refused at once. Free space on {volume} (`janitor status` shows who holds it) and "
            "retry; ffmpeg did not run"
        )
    queued, evicted, waited = refused.queued, refused.evicted, refused.waited_s
    ahead = f", {format_size(queued)} held for the job first in line" if queued else ""
    after = f" (after evicting {format_size(evicted)} of cache)" if evicted else ""
    after += f" (after waiting {format_duration(waited)} for room)" if waited else ""
    return (
        head + f"{format_size(free)} free, floor {format_size(floor)}, {format_size(reserved)} "
        f"reserved by others{ahead}, short by {format_size(refused.shortfall)}{after}. Free "
        f"space on {volume} (`janitor status` shows who holds it) and retry; ffmpeg did not run"
    )


def reserved_line(via: str, session: WriteSession) -> str:
    """The ``guard.log`` line of a call that runs under its reservations (``via``: who held
    them, ``daemon`` or ``ledger``)."""
    return (
        f"reserved through the {via}"
        + (f" after waiting {session.waited_s:.1f} s" if session.waited_s else "")
        + ": "
        + ", ".join(
            f"{format_size(h.allowed)} for {h.output} ({h.reservation}"
            + (", the job's working set)" if h.pooled else ")")
            for h in session.writes
        )
    )


def unguarded_line(reason: str, args: Sequence[str]) -> str:
    """The ``guard.log`` line (DEBUG) of a call handed to ffmpeg as it is."""
    return f"unguarded ({reason}): ffmpeg {' '.join(args)}"


def stopped_before_line(reason: str) -> str:
    """The line of a call whose job must stop before ffmpeg ran (its working set at risk)."""
    return f"stopped before ffmpeg ran: {reason}. Free space there and retry"
