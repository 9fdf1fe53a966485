"""`janitor exec`: run a writer under a reservation and stop it before the disk fills.

The command starts only once its bytes are reserved (making room by evicting caches first), gets
the reservation id in ``JANITOR_RESERVATION``, and is watched while it runs: if the volume falls
below its floor, the daemon puts the reservation at risk, or the output outgrows the reservation
by more than a margin (and ``grow`` cannot extend it), the command is stopped (SIGTERM, then
SIGKILL after a grace period) and the result says why. Signals sent to `janitor exec` reach the
command.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import FrameType
from typing import TYPE_CHECKING, Any

from janitor.errors import ConfigError, ReservationRefused, SpaceRisk
from janitor.sizes import format_size
from janitor.space import allocated_size

if TYPE_CHECKING:
    from janitor.core import Janitor
    from janitor.reserve import Reservation

__all__ = ["FORWARDED_SIGNALS", "ExecResult", "run_guarded"]

#: Signals `janitor exec` passes on to its command.
FORWARDED_SIGNALS = (
    signal.SIGTERM,
    signal.SIGINT,
    signal.SIGHUP,
    signal.SIGQUIT,
    signal.SIGUSR1,
    signal.SIGUSR2,
)


@dataclass(frozen=True, slots=True)
class ExecResult:
    """How a guarded command ended: its exit code, and why we stopped it, if we did."""

    exit_code: int
    reservation: str
    stopped: str | None
    reserved: int
    written: int
    cleaned: bool = False


def _exit_code(returncode: int) -> int:
    return 128 - returncode if returncode < 0 else returncode


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
    tree_policy = jan.policy.tree(tree)
    reservation = jan.reserve(tree, nbytes, path=path, job=job, ttl=ttl, evict=evict)
    try:
        return _run(
            jan,
            reservation,
            list(command),
            tree_policy.path,
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
    root: os.PathLike[str],
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
        child = subprocess.Popen(command, env=env)
    except OSError as exc:  # e.g. ENOEXEC: an executable file that is no program
        raise ConfigError(f"cannot run {command[0]!r}: {exc.strerror}") from None
    forwarded: dict[signal.Signals, Any] = {}

    def forward(signum: int, frame: FrameType | None) -> None:
        try:
            child.send_signal(signum)
        except ProcessLookupError:
            pass

    if threading.current_thread() is threading.main_thread():
        for sig in FORWARDED_SIGNALS:
            forwarded[sig] = signal.signal(sig, forward)
    stopped: str | None = None
    written = 0
    limit = info.bytes
    ttl = info.expires - info.created
    renewed = time.monotonic()
    last_risk_check = 0.0
    try:
        while True:
            try:
                child.wait(timeout=poll)
                break
            except subprocess.TimeoutExpired:
                pass
            now = time.monotonic()
            st = os.statvfs(root)
            free = st.f_bavail * st.f_frsize
            floor, _, _ = jan.policy.volume_policy(info.device).numbers(st.f_blocks * st.f_frsize)
            if free < floor:
                stopped = (
                    f"stopped: volume {info.volume} fell below its floor "
                    f"({format_size(free)} free < {format_size(floor)})"
                )
                break
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
            if now - last_risk_check >= 1.0:
                last_risk_check = now
                try:
                    jan.check_risk(info)
                except SpaceRisk as exc:
                    stopped = f"stopped: {exc}"
                    break
            if now - renewed > ttl / 2:
                reservation.renew(ttl)
                renewed = now
        if stopped is not None:
            _stop(child, grace)
    finally:
        for sig, previous in forwarded.items():
            signal.signal(sig, previous)
        if child.poll() is None:
            _stop(child, grace)
    code = _exit_code(child.returncode)
    if out is not None:
        written = max(written, allocated_size(out))
    cleaned = False
    if cleanup_on_fail and out is not None and (stopped is not None or code != 0):
        cleaned = _remove(out)
    return ExecResult(75 if stopped else code, info.id, stopped, limit, written, cleaned)


def _stop(child: subprocess.Popen[bytes], grace: float) -> None:
    try:
        child.terminate()
        child.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        child.kill()
        child.wait()
    except ProcessLookupError:
        pass


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
