"""`janitor exec`: run a writer under a reservation and stop it before the disk fills.

The command starts only once its bytes are reserved (making room by evicting caches first), gets
the reservation id in ``JANITOR_RESERVATION``, and is watched while it runs: if its reservation
is put at risk (the volume fell below its floor and this job is among the fewest whose stopping
covers the deficit) or the output outgrows the reservation by more than a margin (and ``grow``
cannot extend it), the command is stopped (SIGTERM, then SIGKILL after a grace period) and the
result says why. Signals sent to `janitor exec` reach the command; the command never outlives
it (janitor.jobs.supervise), and the reservation covers the command for as long as it runs.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from janitor.errors import ConfigError, ReservationRefused, SpaceRisk, UnknownReservation
from janitor.host.space import allocated_size
from janitor.jobs.supervise import Supervised, exit_code, forward_signals, restore_signals
from janitor.sizes import format_size

if TYPE_CHECKING:
    from janitor.core import Janitor
    from janitor.handles import Reservation

__all__ = ["ExecResult", "run_guarded"]


@dataclass(frozen=True, slots=True)
class ExecResult:
    """How a guarded command ended: its exit code, and why we stopped it, if we did."""

    exit_code: int
    reservation: str
    stopped: str | None
    reserved: int
    written: int
    cleaned: bool = False


def run_guarded(
    jan: Janitor,
    tree: str,
    nbytes: int | str,
    command: Sequence[str],
    *,
    path: str | os.PathLike[str] | None,
    job: str | None = None,
    poll: float = 0.2,
    grow: bool = False,
    margin: float = 0.10,
    grace: float = 5.0,
    cleanup_on_fail: bool = False,
    ttl: float | str | None = None,
    evict: bool = True,
    say: Callable[[str], None] | None = None,
) -> ExecResult:
    """Reserve, run ``command``, watch it, release. ReservationRefused before it ever starts."""
    if not command:
        raise ConfigError("no command given; write it after `--`")
    if shutil.which(command[0]) is None:
        raise ConfigError(f"command {command[0]!r} not found on PATH, or not an executable file")
    reservation = jan.reserve(tree, nbytes, path=path, job=job, ttl=ttl, evict=evict)
    try:
        return _run(
            jan,
            reservation,
            list(command),
            poll=poll,
            grow=grow,
            margin=margin,
            grace=grace,
            cleanup_on_fail=cleanup_on_fail,
            say=say,
        )
    finally:
        reservation.release()


def _run(
    jan: Janitor,
    reservation: Reservation,
    command: list[str],
    *,
    poll: float,
    grow: bool,
    margin: float,
    grace: float,
    cleanup_on_fail: bool,
    say: Callable[[str], None] | None,
) -> ExecResult:
    info = reservation.info
    out = info.path
    env = {**os.environ, "JANITOR_RESERVATION": info.id}
    try:
        child, forwarded = forward_signals(lambda: Supervised(command, env=env))
    except OSError as exc:  # e.g. ENOEXEC: an executable file that is no program
        raise ConfigError(f"cannot run {command[0]!r}: {exc.strerror}") from None
    stopped: str | None = None
    written = 0
    limit = info.bytes
    ttl = info.expires - info.created
    renewed = time.monotonic()
    try:
        try:
            # The command's bytes stay reserved for as long as it runs, even the moment it
            # takes to stop should we die first.
            jan.cover(info.id, child.pid)
        except (ConfigError, UnknownReservation):
            pass  # it exited already, or the reservation ended: nothing left to cover
        while child.wait(poll) is None:
            now = time.monotonic()
            if out is not None:
                written = allocated_size(out)
                if written > limit * (1 + margin):
                    if grow:
                        want = max(int(written * 1.25), int(limit * 1.25))
                        try:
                            limit = jan.grow(info.id, want).bytes
                            if say is not None:
                                say(
                                    f"output outgrew its reservation; grown to {format_size(limit)}"
                                )
                            continue
                        except ReservationRefused as exc:
                            stopped = (
                                f"stopped: output reached {format_size(written)}, past its "
                                f"reservation of {format_size(limit)}, and it cannot grow: {exc}"
                            )
                            break
                    stopped = (
                        f"stopped: output reached {format_size(written)}, more than "
                        f"{margin:.0%} past its reservation of {format_size(limit)} "
                        "(use --grow or reserve more)"
                    )
                    break
            try:
                # One statvfs while the volume is above its floor; below it, only the fewest
                # jobs whose stopping covers the deficit are told to stop (Janitor.check_risk).
                jan.check_risk(info)
            except SpaceRisk as exc:
                stopped = f"stopped: {exc}"
                break
            if now - renewed > ttl / 2:
                reservation.renew(ttl)
                renewed = now
        if stopped is not None:
            child.stop(grace)
    finally:
        restore_signals(forwarded)
        if child.returncode is None:
            child.stop(grace)
    returncode = child.wait()
    assert returncode is not None
    code = exit_code(returncode)
    if out is not None:
        written = max(written, allocated_size(out))
    cleaned = False
    if cleanup_on_fail and out is not None and (stopped is not None or code != 0):
        cleaned = _remove(out)
    return ExecResult(75 if stopped else code, info.id, stopped, limit, written, cleaned)


def _remove(path: str) -> bool:
    """Remove partial output: a file (or symlink) by name, a folder with its contents."""
    try:
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path)  # fd-based on Linux: symlinks inside are never followed
        else:
            os.unlink(path)
    except FileNotFoundError:
        return False
    return True
