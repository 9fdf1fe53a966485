"""Supervised commands: a command that a janitor process runs never outlives it.

``janitor exec`` and the guarded ffmpeg reserve bytes, run a command and stop it when the volume
is at risk. If the supervisor itself is killed (SIGKILL, the OOM killer), nothing watches the
command any more, while its reservation ends with the supervisor: the very disk-filling write
the product exists to stop. So the command dies with its supervisor:

* a *sentinel*, a small ``/bin/sh`` in a session of its own, blocks reading a pipe whose write
  end only the supervisor holds. However the supervisor dies, the kernel closes that end, the
  read returns at EOF and the sentinel kills the command's process group with SIGKILL. This is
  what macOS gets (it has no pdeathsig);
* on Linux the command also gets ``PR_SET_PDEATHSIG``: the kernel sends it SIGKILL the moment
  the supervisor dies, even if the sentinel was killed too.

The command leads a process group of its own, so a shell wrapper's children go with it; only a
command started from an interactive terminal's foreground stays in the supervisor's group (it
may read the terminal and take Ctrl-C, as ``timeout --foreground`` allows), and then the
sentinel kills the command alone. A supervisor that ends normally tells the sentinel so before
it reaps the command (``waitid`` with ``WNOWAIT``), so the sentinel never signals a pid that may
have been given to another process.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading

from janitor.fastpaths import LINUX, PORTABLE

# The guarded ffmpeg imports this module on every call: no typing at run time.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence
    from types import FrameType
    from typing import IO, Any

__all__ = [
    "FORWARDED_SIGNALS",
    "Supervised",
    "exit_code",
    "forward_signals",
    "in_foreground",
    "restore_signals",
]

#: Signals a supervisor passes on to its command.
FORWARDED_SIGNALS = (
    signal.SIGTERM,
    signal.SIGINT,
    signal.SIGHUP,
    signal.SIGQUIT,
    signal.SIGUSR1,
    signal.SIGUSR2,
)

#: The sentinel: wait for the supervisor's word; at EOF without it, kill the target ($1: a pid,
#: or -PGID for a process group). It ignores the signals a terminal or a group kill would send.
_SENTINEL = (
    'trap "" INT QUIT HUP TERM TSTP; '
    'IFS= read -r word; [ "$word" = done ] || kill -s KILL -- "$1" 2>/dev/null; exit 0'
)
_PR_SET_PDEATHSIG = 1
#: waitid(WNOWAIT) lets the supervisor see the exit before it reaps; macOS's Python lacks it
#: before 3.13, and the portable mode does without it as macOS does.
_WNOWAIT = hasattr(os, "waitid") and hasattr(os, "WNOWAIT") and not PORTABLE


def in_foreground() -> bool:
    """True when stdin is a terminal whose foreground process group is ours (an interactive
    shell ran us directly): the command then stays in our group, to read the terminal."""
    try:
        return os.isatty(0) and os.tcgetpgrp(0) == os.getpgrp()
    except OSError:
        return False


def _pdeathsig(parent: int) -> Callable[[], None] | None:
    """A preexec function that makes the kernel SIGKILL the child when ``parent`` dies (Linux)."""
    if not LINUX:
        return None
    try:
        import ctypes

        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (ImportError, OSError, AttributeError):
        return None

    def arm() -> None:
        prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
        if os.getppid() != parent:  # the supervisor died before the request took effect
            os.kill(os.getpid(), signal.SIGKILL)

    return arm


class Supervised:
    """A running command tied to this process's life (see the module docstring).

    ``wait(timeout)`` returns the exit code once the command ended (None before);
    ``signal(sig)`` reaches the command's process group; ``stop(grace)`` sends SIGTERM, then
    SIGKILL after ``grace`` seconds.
    """

    def __init__(
        self,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        foreground: bool | None = None,
        stdin: int | IO[Any] | None = None,
        stdout: int | IO[Any] | None = None,
        stderr: int | IO[Any] | None = None,
    ) -> None:
        self.foreground = in_foreground() if foreground is None else foreground
        # The pipe's write end is ours alone: os.pipe() is not inherited, and Popen closes
        # every other descriptor in its children, so no command keeps it open.
        read_end, self._word = os.pipe()
        try:
            self.process = subprocess.Popen(
                list(argv),
                env=None if env is None else dict(env),
                stdin=stdin,
                stdout=stdout,
                stderr=stderr,
                preexec_fn=_pdeathsig(os.getpid()),
                process_group=None if self.foreground else 0,
            )
        except BaseException:
            os.close(read_end)
            os.close(self._word)
            raise
        self.pid = self.process.pid
        target = str(self.pid) if self.foreground else f"-{self.pid}"
        try:
            self._sentinel: subprocess.Popen[bytes] | None = subprocess.Popen(
                ["/bin/sh", "-c", _SENTINEL, "janitor-sentinel", target],
                stdin=read_end,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,  # out of reach of the terminal and of group kills
            )
        except OSError:
            # No sentinel (no /bin/sh?): Linux still has pdeathsig; say nothing more here.
            self._sentinel = None
        finally:
            os.close(read_end)
        self._exited = threading.Event()
        self._returncode: int | None = None
        threading.Thread(target=self._watch, name="janitor-supervised", daemon=True).start()

    @property
    def sentinel_pid(self) -> int | None:
        """The sentinel's pid (for tests and diagnostics)."""
        return None if self._sentinel is None else self._sentinel.pid

    def _watch(self) -> None:
        """Block until the command exits; release the sentinel before the pid is reaped."""
        if _WNOWAIT:
            try:
                os.waitid(os.P_PID, self.pid, os.WEXITED | os.WNOWAIT)
            except ChildProcessError:
                pass
            except InterruptedError:  # pragma: no cover - PEP 475 retries for us
                pass
            self._dismiss()
            self._returncode = self.process.wait()
        else:
            self._returncode = self.process.wait()
            self._dismiss()
        self._exited.set()

    def _dismiss(self) -> None:
        """Tell the sentinel the command ended normally, and let it go."""
        word, self._word = self._word, -1
        if word < 0:
            return
        try:
            os.write(word, b"done\n")
        except OSError:
            pass
        os.close(word)
        if self._sentinel is not None:
            try:
                self._sentinel.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass

    def wait(self, timeout: float | None = None) -> int | None:
        """The command's exit code once it ended (negative: killed by that signal), else None
        after ``timeout`` seconds. Signal handlers of the main thread run while it waits."""
        if not self._exited.wait(timeout):
            return None
        return self._returncode

    @property
    def returncode(self) -> int | None:
        """The exit code, or None while the command runs."""
        return self._returncode if self._exited.is_set() else None

    def signal(self, sig: int) -> None:
        """Send ``sig`` to the command (its whole process group, unless in the foreground)."""
        if self._exited.is_set():
            return
        try:
            if self.foreground:
                os.kill(self.pid, sig)
            else:
                os.killpg(self.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    def stop(self, grace: float) -> int:
        """SIGTERM, then SIGKILL if it still runs after ``grace`` seconds; the exit code."""
        self.signal(signal.SIGTERM)
        code = self.wait(grace)
        if code is None:
            self.signal(signal.SIGKILL)
            code = self.wait()
        assert code is not None
        return code


def exit_code(returncode: int) -> int:
    """A shell's exit code for a returncode: 128 + N for a command killed by signal N."""
    return 128 - returncode if returncode < 0 else returncode


def forward_signals(child: Supervised) -> dict[int, Any]:
    """Pass the signals we get on to the command (its process group); handle job control.

    Ctrl-Z stops the command and then us, so the shell that ran us sees a stopped job; SIGCONT
    (``fg``) continues both. Returns the previous handlers, for :func:`restore_signals`.
    """
    forwarded: dict[int, Any] = {}
    if threading.current_thread() is not threading.main_thread():
        return forwarded

    def forward(signum: int, frame: FrameType | None) -> None:
        child.signal(signum)

    def suspend(signum: int, frame: FrameType | None) -> None:
        child.signal(signal.SIGSTOP)
        os.kill(os.getpid(), signal.SIGSTOP)

    for sig in FORWARDED_SIGNALS:
        forwarded[sig] = signal.signal(sig, forward)
    if not child.foreground:  # in the foreground the terminal stops and continues both
        forwarded[signal.SIGTSTP] = signal.signal(signal.SIGTSTP, suspend)
        forwarded[signal.SIGCONT] = signal.signal(signal.SIGCONT, forward)
    return forwarded


def restore_signals(previous: dict[int, Any]) -> None:
    """Put back the handlers :func:`forward_signals` replaced."""
    for sig, handler in previous.items():
        signal.signal(sig, handler)
