"""`janitor exec`: run a writer under a reservation and stop it before the disk fills.

The command starts only once its bytes are reserved (making room by evicting caches first), gets
the reservation id in ``JANITOR_RESERVATION``, and is watched while it runs: if its reservation
is put at risk (the volume fell below its floor and this job is among the fewest whose stopping
covers the deficit) or the output outgrows the reservation by more than a margin (and ``grow``
cannot extend it), the command is stopped (SIGTERM, then SIGKILL after a grace period) and the
result says why. Signals sent to `janitor exec` reach the command; the command never outlives
it, and the reservation covers the command for as long as it runs: the one watch of a running
writer the Python guard keeps too (janitor.commands.watch).
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from janitor.commands.watch import Watch, Watched
from janitor.errors import ConfigError, ReservationRefused, SpaceRisk, UnknownReservation
from janitor.host.space import allocated_size
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
        watch = _ExecWatch(
            jan, reservation, poll=poll, grow=grow, margin=margin, grace=grace, say=say
        )
        return _run(watch, list(command), cleanup_on_fail=cleanup_on_fail)
    finally:
        reservation.release()


class _ExecWatch(Watch):
    """``janitor exec``'s watch: its one reservation's output grown on request (``--grow``),
    its risk asked of the ledger every poll, its lifetime renewed while the command runs."""

    def __init__(
        self,
        jan: Janitor,
        reservation: Reservation,
        *,
        poll: float,
        grow: bool,
        margin: float,
        grace: float,
        say: Callable[[str], None] | None,
    ) -> None:
        info = reservation.info
        out = Watched(info.path, info.bytes, info.id)
        super().__init__([out], margin=margin, slack=0, poll=poll, grace=grace)
        self.jan, self.reservation, self.info = jan, reservation, info
        self.grow, self.say = grow, say
        self.ttl = info.expires - info.created
        self.renewed = time.monotonic()
        self.written = 0

    def cover(self, pid: int) -> None:
        try:
            # The command's bytes stay reserved for as long as it runs, even the moment it
            # takes to stop should we die first.
            self.jan.cover(self.info.id, pid)
        except (ConfigError, UnknownReservation):
            pass  # it exited already, or the reservation ended: nothing left to cover

    def size(self, path: str) -> int:
        self.written = allocated_size(path)
        return self.written

    def outgrown(self, index: int, written: int) -> str | None:
        out = self.outputs[index]
        limit = out.allowed
        if not self.grow:
            return (
                f"stopped: output reached {format_size(written)}, more than "
                f"{self.margin:.0%} past its reservation of {format_size(limit)} "
                "(use --grow or reserve more)"
            )
        want = max(int(written * 1.25), int(limit * 1.25))
        try:
            grown = self.jan.grow(self.info.id, want).bytes
        except ReservationRefused as exc:
            return (
                f"stopped: output reached {format_size(written)}, past its "
                f"reservation of {format_size(limit)}, and it cannot grow: {exc}"
            )
        self.outputs[index] = Watched(out.path, grown, out.reservation)
        if self.say is not None:
            self.say(f"output outgrew its reservation; grown to {format_size(grown)}")
        return None

    def at_risk(self, output: Watched) -> str | None:
        try:
            # One statvfs while the volume is above its floor; below it, only the fewest
            # jobs whose stopping covers the deficit are told to stop (Janitor.check_risk).
            self.jan.check_risk(self.info)
        except SpaceRisk as exc:
            return f"stopped: {exc}"
        return None

    def tick(self) -> None:
        now = time.monotonic()
        if now - self.renewed > self.ttl / 2:
            self.reservation.renew(self.ttl)
            self.renewed = now


def _run(watch: _ExecWatch, command: list[str], *, cleanup_on_fail: bool) -> ExecResult:
    """Run ``command`` under ``watch`` (its one reservation) to its end; remove what it wrote
    if it failed or was stopped and ``cleanup_on_fail`` asks so."""
    info = watch.info
    out = info.path
    env = {**os.environ, "JANITOR_RESERVATION": info.id}
    try:
        watch.start(command, env=env)
    except OSError as exc:  # e.g. ENOEXEC: an executable file that is no program
        raise ConfigError(f"cannot run {command[0]!r}: {exc.strerror}") from None
    ended = watch.wait()
    code = ended.exit_code()
    written = watch.written
    if out is not None:
        written = max(written, allocated_size(out))
    cleaned = False
    if cleanup_on_fail and out is not None and (ended.stopped is not None or code != 0):
        cleaned = _remove(out)
    limit = watch.outputs[0].allowed
    return ExecResult(code, info.id, ended.stopped, limit, written, cleaned)


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
