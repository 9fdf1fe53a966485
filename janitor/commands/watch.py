"""One watch of a running writer: its growth, its reservations' risk, the signals it is sent,
and the exit code it leaves; for ``janitor exec`` and the Python guard.

A :class:`Watch` starts the writer supervised (:mod:`janitor.commands.supervise`: it never outlives
us, and the signals we get reach it), keeps its reservations live for it (``cover``), and every
:data:`POLL_S` looks at each output it holds to a reservation (:class:`Watched`):

* **growth**: an output whose allocated bytes pass its reservation by more than ``margin`` and
  ``slack`` (estimates are within 1 %, and allocation rounds up to blocks) has ``outgrown``
  it: the writer is stopped, unless the caller grows the reservation instead;
* **risk**: while the output's volume is below its floor (one ``statvfs``; none is asked above
  it), whether its reservation was put at risk, asked at most once a poll (``at_risk``; an
  output with no known floor asks every poll, and the check reads the volume itself);
* a writer that fails while an output's volume is below its floor was stopped too: writers
  outside every reservation took the space it was promised (a disk filled to its last byte
  beats any watch).

Stopped, it gets SIGTERM, then SIGKILL after :data:`STOP_GRACE_S`. :class:`Ended` says how it
ended and the exit code to give: 75 (EX_TEMPFAIL) when stopped, else the writer's own, as a
shell says it or by dying of the same signal. The compiled front end (``native/guard.c``) does
the same in C with the same constants; ``tests/native/test_guard_native.py`` reads them against
these.

The guarded ffmpeg loads this on every call it runs: no ``typing`` or ``dataclasses`` here.
"""

from __future__ import annotations

import os
import time

TYPE_CHECKING = False  # typing costs the guarded ffmpeg several ms at every start
if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from typing import Any

    from janitor.commands.supervise import Supervised

__all__ = ["EXIT_STOPPED", "MARGIN", "POLL_S", "SLACK", "STOP_GRACE_S", "Ended", "Watch", "Watched"]

#: How far an output may pass its reservation before the writer is stopped (the guard's:
#: estimates are within 1 %, and allocation rounds up to blocks); ``janitor exec`` takes its own.
MARGIN = 0.05
SLACK = 256 * 1024
#: How often the running writer's outputs and volumes are looked at.
POLL_S = 0.2
#: How long a stopped writer has between SIGTERM and SIGKILL.
STOP_GRACE_S = 5.0
#: The exit code of a writer stopped for lack of space (EX_TEMPFAIL), as every janitor command.
EXIT_STOPPED = 75


class Watched:
    """One output held to a reservation: its file (None: none to measure), the bytes it may
    hold, the reservation (what a risk check asks about), and the floor of its volume (None:
    not known here; the risk check reads the volume itself)."""

    __slots__ = ("path", "allowed", "reservation", "floor")  # noqa: RUF023 (in order)

    def __init__(
        self, path: str | None, allowed: int, reservation: str, floor: int | None = None
    ) -> None:
        self.path = path
        self.allowed = allowed
        self.reservation = reservation
        self.floor = floor


class Ended:
    """How a watched writer ended: its ``returncode`` (negative: killed by that signal) and
    why it was ``stopped`` (None: it ended on its own)."""

    __slots__ = ("returncode", "stopped")

    def __init__(self, returncode: int, stopped: str | None) -> None:
        self.returncode = returncode
        self.stopped = stopped

    def exit_code(self) -> int:
        """75 when stopped, else the writer's code as a shell gives it (128 + N for a writer
        killed by signal N): what ``janitor exec`` exits with."""
        if self.stopped is not None:
            return EXIT_STOPPED
        code = self.returncode
        return 128 - code if code < 0 else code

    def end_as_writer(self) -> int:
        """75 when stopped, else end as the writer did: by the same signal if one killed it
        (the guarded ffmpeg is ffmpeg to its caller), else with its code."""
        if self.stopped is not None:
            return EXIT_STOPPED
        if self.returncode >= 0:
            return self.returncode
        import signal

        sig = -self.returncode
        try:
            signal.signal(sig, signal.SIG_DFL)  # SIGKILL has no handler to reset: OSError
        except (OSError, ValueError):
            pass
        try:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {sig})
            os.kill(os.getpid(), sig)
        except (OSError, ValueError):
            pass
        return 128 + sig


def allocated(path: str) -> int:
    """The bytes a file holds on disk (its blocks; 0 when it is not there)."""
    try:
        return os.stat(path).st_blocks * 512
    except OSError:
        return 0


def _free(path: str) -> int | None:
    """Bytes free to us on the volume of ``path``'s folder, or None when it cannot be read."""
    try:
        st = os.statvfs(os.path.dirname(path) or ".")
    except OSError:
        return None
    return st.f_bavail * st.f_frsize


class Watch:
    """Run one writer and watch it until it ends (the module's docstring says how). A caller
    says what its reservations are and how they are asked about, in the hooks below."""

    def __init__(
        self,
        outputs: Sequence[Watched],
        *,
        margin: float = MARGIN,
        slack: int = SLACK,
        poll: float = POLL_S,
        grace: float = STOP_GRACE_S,
    ) -> None:
        self.outputs = list(outputs)
        self.margin = margin
        self.slack = slack
        self.poll = poll
        self.grace = grace
        self._child: Supervised
        self._previous: dict[int, Any] = {}

    # -- the hooks ---------------------------------------------------------------------------

    def cover(self, pid: int) -> None:
        """Keep the reservations live while the writer (``pid``) runs, should we die first."""

    def size(self, path: str) -> int:
        """The bytes output ``path`` holds now."""
        return allocated(path)

    def outgrown(self, index: int, written: int) -> str | None:
        """Output ``index`` holds ``written`` bytes, past its reservation: why the writer must
        stop, or None when it may go on (its reservation grew: ``outputs[index]`` replaced)."""
        raise NotImplementedError

    def at_risk(self, output: Watched) -> str | None:
        """Why the writer must stop because ``output``'s reservation is at risk, or None."""
        raise NotImplementedError

    def fell_below(self, output: Watched) -> str:
        """Why a writer that failed while ``output``'s volume was below its floor was stopped."""
        raise NotImplementedError

    def tick(self) -> None:
        """Once a poll, after the checks (a reservation renewed ...)."""

    # -- the watch ---------------------------------------------------------------------------

    def run(self, argv: Sequence[str], *, env: Mapping[str, str] | None = None) -> Ended:
        """Start ``argv`` and watch it to its end. OSError when it cannot start."""
        self.start(argv, env=env)
        return self.wait()

    def start(self, argv: Sequence[str], *, env: Mapping[str, str] | None = None) -> None:
        """Start ``argv``, the signals we get passed on to it from now. OSError (nothing
        started) when it cannot start."""
        from janitor.commands.supervise import Supervised, forward_signals

        self._child, self._previous = forward_signals(lambda: Supervised(argv, env=env))

    def wait(self) -> Ended:
        """Watch the writer :meth:`start` started until it ends, stopping it if it must; our
        signal handlers are put back, and it never outlives the watch, whatever is raised."""
        from janitor.commands.supervise import restore_signals

        child = self._child
        stopped = None
        try:
            self.cover(child.pid)
            stopped = self._until_it_ends(child)
            if stopped is not None:
                child.stop(self.grace)
        finally:
            restore_signals(self._previous)
            if child.returncode is None:
                child.stop(self.grace)
        code = child.wait()
        assert code is not None
        if stopped is None and code > 0:
            stopped = self._failed_below_floor()
        return Ended(code, stopped)

    def _until_it_ends(self, child: Supervised) -> str | None:
        """Until the writer exits: why it must stop, else None."""
        asked = 0.0  # when a reservation's risk was last asked about
        while child.wait(self.poll) is None:
            for index, out in enumerate(self.outputs):
                if out.path is not None:
                    written = self.size(out.path)
                    if written > out.allowed * (1 + self.margin) + self.slack:
                        reason = self.outgrown(index, written)
                        if reason is not None:
                            return reason
                        continue
                if out.floor is not None:
                    free = _free(out.path or ".")
                    if free is None or free >= out.floor:
                        continue  # above the floor nobody is at risk: no question asked
                    now = time.monotonic()
                    if now - asked < self.poll:
                        continue
                    asked = now
                reason = self.at_risk(out)
                if reason:
                    return reason
            self.tick()
        return None

    def _failed_below_floor(self) -> str | None:
        """Why a failed writer counts as stopped: an output's volume is below its floor."""
        for out in self.outputs:
            if out.floor is None or out.path is None:
                continue
            free = _free(out.path)
            if free is not None and free < out.floor:
                return self.fell_below(out)
        return None
