"""Linux's start times as clock ticks that carry the boot time they were read with, so that a
start names its process across a step of the wall clock.

Linux keeps a process's start as clock ticks since boot; epoch seconds are that plus ``btime``,
which ``/proc/stat`` works out afresh at each read as the wall clock minus the time since boot
(psutil adds the same). So when the wall clock is stepped (NTP, a virtual machine resumed from
a snapshot, someone running ``date``), a process reads another's start a whole number of
seconds away from what was recorded before the step, and an owner still running would be
taken for dead: its reservation freed, its job's folder an orphan. (A virtual machine's clock
has been seen to move 12.7 hours after its boot, and a test run to read a live reservation's
owner as gone.)

So a start read from ``/proc`` carries ``btime % 10_000`` in its microseconds, below the tick
that no reading uses (:func:`encode_start`): 1796525134.25 s read with ``btime``
1796525134 becomes 1796525134.255134. Two readings of one process then differ by exactly the
move of ``btime`` that their codes tell (:func:`same_ticks`). Which of two began first is told
only for two read with one ``btime`` (:func:`started_before`). psutil's starts get the code
too (:func:`coded`), so the portable backend on Linux reads as this one does.

>>> same_ticks(encode_start(1796525134, 2500), encode_start(1796525135, 2500))
True
>>> same_ticks(encode_start(1796525134, 2500), encode_start(1796525134, 2600))
False
"""

from __future__ import annotations

import math
import os

__all__ = [
    "CLOCK_TICKS", "coded", "encode_start", "read_btime", "same_ticks", "started_before"
]  # fmt: skip

#: Clock ticks per second in ``/proc/PID/stat`` (USER_HZ: 100 on every Linux port but Alpha).
CLOCK_TICKS: int = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
_US = 1_000_000
#: A tick in microseconds (10,000 at Linux's USER_HZ of 100), which is also the modulus of the
#: ``btime`` a start carries below its tick; 0 where a tick is no whole number of microseconds
#: (no Linux port today), and then a start carries nothing.
_TICK_US = _US // CLOCK_TICKS if _US % CLOCK_TICKS == 0 and CLOCK_TICKS < 1000 else 0


def encode_start(btime: int, ticks: int) -> float:
    """The start of a process that started ``ticks`` clock ticks after boot, read while
    ``/proc/stat`` said ``btime``: epoch seconds (``btime + ticks / CLK_TCK``), with
    ``btime % 10_000`` added in microseconds, below the tick. Worked out in whole microseconds
    so that the float rounds once and :func:`same_ticks` reads the same integers back."""
    if not _TICK_US:
        return btime + ticks / CLOCK_TICKS
    return ((btime * CLOCK_TICKS + ticks) * _TICK_US + btime % _TICK_US) / _US


def same_ticks(recorded: float, seen: float) -> bool:
    """True when two starts read on Linux can name one process, whatever ``btime`` each was
    read with.

    In whole microseconds, each start is ``T * tick + code``: ``T`` its ticks since the epoch
    (``btime * CLK_TCK + ticks since boot``) and ``code`` its ``btime % 10_000``. For one
    process (the same ticks since boot) read with two ``btime``, ``T`` differs by exactly
    ``CLK_TCK`` times the move of ``btime``, and that move is what the codes differ by,
    modulo 10,000. Two processes given one pid pass only when their starts lie a multiple of
    10,000 seconds apart to the tick (a whole number of seconds would pass one reuse in a
    hundred). Equal ``T`` passes too, as before: a start read by psutil, or recorded by an
    earlier version, carries no code.
    """
    if not _TICK_US or not math.isfinite(recorded) or not math.isfinite(seen):
        return recorded == seen
    a, b = round(recorded * _US), round(seen * _US)
    (ta, ca), (tb, cb) = divmod(a, _TICK_US), divmod(b, _TICK_US)
    if ta == tb:
        return True
    moved, apart = divmod(ta - tb, CLOCK_TICKS)
    return apart == 0 and (moved - (ca - cb)) % _TICK_US == 0


def started_before(seen: float, recorded: float) -> bool:
    """True when a start read now began strictly before a start recorded, maybe by another
    process: lineage's elder rule. Only when both were read with one ``btime`` (the same
    code) can the two be set against each other; after a step of the clock (the codes
    differ), its size is known only modulo 10,000 s, so nothing counts as earlier: the answer
    that keeps a job's process wins the doubt. (A step of exactly a multiple of 10,000 s goes
    unseen, as every step did before.)"""
    if not _TICK_US or not math.isfinite(seen) or not math.isfinite(recorded):
        return seen < recorded  # a bound of -inf: one gone before it was read, as old as any
    (ta, ca), (tb, cb) = (
        divmod(round(seen * _US), _TICK_US),
        divmod(round(recorded * _US), _TICK_US),
    )
    return ca == cb and ta < tb


def coded(start: float, btime: int) -> float:
    """A start in epoch seconds that carries no code (psutil's ``create_time``: ``btime`` plus
    ticks), read while ``/proc/stat`` said ``btime``: the same start, carrying it."""
    return encode_start(btime, round((start - btime) * CLOCK_TICKS))


def read_btime() -> int:
    """Boot time as psutil reads it on Linux (``btime`` in /proc/stat, whole seconds), without
    importing psutil (a tenth of a CLI command's start-up)."""
    try:
        with open("/proc/stat", "rb") as f:
            for line in f:
                if line.startswith(b"btime "):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    import psutil

    return int(psutil.boot_time())
