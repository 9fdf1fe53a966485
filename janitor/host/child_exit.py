"""How a supervisor learns that its command ended, and reaps it: a pidfd on Linux, else a thread.

A supervisor (:mod:`janitor.commands.supervise`) must tell its sentinel "done" after the command
exited but *before* the pid is reaped, so the sentinel never signals a pid given to another
process; and while it waits, the signals it gets must reach their handlers at once, so they are
passed on to the command (a shell's Ctrl-C, systemd's SIGTERM).

* **Linux**: ``pidfd_open(2)`` (5.3+). The pidfd turns readable when the child exits and stays
  so, unreaped, until ``waitpid``. The waiting thread polls it itself: no helper thread, and no
  ``threading`` import, which was 5 ms of every guarded ffmpeg call; a signal interrupts the
  poll and its handler runs before the poll goes on (PEP 475).
* **Elsewhere** (macOS, the portable mode, a kernel or sandbox without pidfds): a helper thread
  blocks in ``waitid(WNOWAIT)`` where the platform has it, else in ``waitpid`` (then the word
  comes right after the reap, as macOS's Python allows before 3.13). The helper blocks every
  signal, so the kernel delivers them to a thread that runs handlers: macOS hands a
  process-directed signal to any thread that does not block it.

:func:`exit_watch` chooses once, per process. The chosen class is :data:`EXIT_WATCH`.
"""

from __future__ import annotations

import errno
import os

try:  # the C module: ``signal`` builds its enums at import, several ms on every guarded call
    import _signal as signal  # type: ignore[import-not-found,unused-ignore]
except ImportError:  # pragma: no cover - not CPython
    import signal  # type: ignore[no-redef,unused-ignore]

from janitor.host.fastpaths import LINUX, PORTABLE

TYPE_CHECKING = False  # typing costs the guarded ffmpeg several ms at every start
if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["ChildExit", "PidfdExit", "ThreadExit", "exit_watch", "reap"]

#: waitid(WNOWAIT) lets the helper thread see the exit before it reaps; macOS's Python lacks it
#: before 3.13, and the portable mode does without it as macOS does.
_WNOWAIT = hasattr(os, "waitid") and hasattr(os, "WNOWAIT") and not PORTABLE


def reap(pid: int, timeout: float | None = None) -> int | None:
    """Wait for child ``pid`` and return its exit code, negative for a signal (as Popen does);
    None if it still runs after ``timeout`` seconds (left to init once we exit)."""
    import time

    deadline = None if timeout is None else time.monotonic() + timeout
    delay = 0.0005
    while True:
        try:
            done, status = os.waitpid(pid, 0 if deadline is None else os.WNOHANG)
        except ChildProcessError:
            return 0
        if done == 0:
            if deadline is not None and time.monotonic() >= deadline:
                return None
            time.sleep(delay)
            delay = min(delay * 2, 0.05)
            continue
        if os.WIFSTOPPED(status):
            continue
        return os.waitstatus_to_exitcode(status)


class ChildExit:
    """The end of one child of ours (``pid``): ``before_reap`` is called once when it has
    exited, before its pid is reaped where the platform allows (right after, elsewhere).

    ``wait(timeout)`` gives the exit code once it ended and was reaped (negative: killed by that
    signal), else None after ``timeout`` seconds (None: no limit). ``ended`` turns True as the
    child is about to be reaped: from then its pid may not be signalled.
    """

    def __init__(self, pid: int, before_reap: Callable[[], None]) -> None:
        self.pid = pid
        self.ended = False
        self._before_reap = before_reap
        self._code: int | None = None

    def wait(self, timeout: float | None = None) -> int | None:
        raise NotImplementedError

    @property
    def returncode(self) -> int | None:
        """The exit code once the child ended, else None (it does not block)."""
        return self.wait(0)


class PidfdExit(ChildExit):
    """Linux: the child's pidfd, polled by whichever thread waits (no helper thread)."""

    def __init__(self, pid: int, before_reap: Callable[[], None]) -> None:
        import _thread
        import select

        super().__init__(pid, before_reap)
        self._fd = os.pidfd_open(pid)  # OSError where the kernel or a sandbox has none
        self._poll = select.poll()
        self._poll.register(self._fd, select.POLLIN)
        self._lock = _thread.allocate_lock()

    def wait(self, timeout: float | None = None) -> int | None:
        if self._code is not None:
            return self._code
        # poll(2) is retried after a signal's handler ran (PEP 475), with what is left of the
        # timeout; readable (or POLLHUP) means the child exited, still unreaped.
        if not self._poll.poll(None if timeout is None else max(0, int(timeout * 1000 + 0.999))):
            return None
        with self._lock:  # one thread reaps; another that waited too reads its code
            if self._code is None:
                self.ended = True
                try:
                    self._before_reap()
                finally:
                    code = reap(self.pid)
                    assert code is not None
                    self._code = code
                    self._poll.unregister(self._fd)
                    os.close(self._fd)
        return self._code


class ThreadExit(ChildExit):
    """A helper thread blocked in ``waitid(WNOWAIT)`` (``wnowait``) or ``waitpid``, every signal
    blocked in it; the waiting thread waits on an event."""

    def __init__(
        self, pid: int, before_reap: Callable[[], None], *, wnowait: bool = _WNOWAIT
    ) -> None:
        import threading

        super().__init__(pid, before_reap)
        self.wnowait = wnowait
        self._exited = threading.Event()
        threading.Thread(target=self._watch, name="janitor-supervised", daemon=True).start()

    def _watch(self) -> None:
        # Signals are for the threads that run their handlers (macOS picks any thread that
        # does not block one): Python runs handlers in the main thread only.
        signal.pthread_sigmask(signal.SIG_BLOCK, signal.valid_signals())
        code: int | None = None
        try:
            if self.wnowait:
                try:
                    os.waitid(os.P_PID, self.pid, os.WEXITED | os.WNOWAIT)
                except ChildProcessError:
                    pass
                self.ended = True
                try:
                    self._before_reap()
                finally:
                    code = reap(self.pid)
            else:
                code = reap(self.pid)
                self.ended = True
                self._before_reap()
        finally:  # whatever ``before_reap`` raised (the thread's hook prints it), wait returns
            self._code = code or 0
            self._exited.set()

    def wait(self, timeout: float | None = None) -> int | None:
        if not self._exited.wait(timeout):
            return None
        return self._code


#: What :func:`exit_watch` starts with: pidfds on Linux (none in the portable mode).
EXIT_WATCH: type[ChildExit] = PidfdExit if LINUX and hasattr(os, "pidfd_open") else ThreadExit


def exit_watch(pid: int, before_reap: Callable[[], None]) -> ChildExit:
    """Watch for the end of child ``pid`` as this platform best can (the module's docstring);
    where pidfds turn out to be missing (ENOSYS, a seccomp filter's EPERM), with a thread."""
    global EXIT_WATCH
    if EXIT_WATCH is PidfdExit:
        try:
            return PidfdExit(pid, before_reap)
        except OSError as exc:  # the child runs: it is watched all the same, by a thread
            if exc.errno in (errno.ENOSYS, errno.EPERM, errno.EACCES):
                EXIT_WATCH = ThreadExit  # none for this process: not asked again
    return ThreadExit(pid, before_reap)
