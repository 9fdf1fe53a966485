"""Supervised commands: a command that a janitor process runs never outlives it.

``janitor exec`` and the guarded ffmpeg reserve bytes, run a command and stop it when the volume
is at risk. If the supervisor itself is killed (SIGKILL, the OOM killer), nothing watches the
command any more, while its reservation ends with the supervisor: the very disk-filling write
the product exists to stop. So the command dies with its supervisor:

* a *sentinel*, a small ``/bin/sh`` in a session of its own, blocks reading a pipe whose write
  end only the supervisor holds. However the supervisor dies, the kernel closes that end, the
  read returns at EOF and the sentinel kills the command's process group with SIGKILL. This is
  what macOS gets (it has no pdeathsig);
* on Linux the command also gets ``PR_SET_PDEATHSIG`` (:mod:`janitor.host.parent_death`): the
  kernel sends it SIGKILL the moment the supervisor dies, even if the sentinel was killed too.

The command leads a process group of its own, so a shell wrapper's children go with it; only a
command started from an interactive terminal's foreground stays in the supervisor's group (it
may read the terminal and take Ctrl-C, as ``timeout --foreground`` allows), and then the
sentinel kills the command alone. A supervisor that ends normally tells the sentinel so before
it reaps the command (its exit seen through a pidfd on Linux, :mod:`janitor.host.child_exit`),
so the sentinel never signals a pid that may have been given to another process.
"""

from __future__ import annotations

import errno
import os

try:  # the C module: ``signal`` builds its enums at import, 8 ms on every guarded ffmpeg call
    import _signal as signal  # type: ignore[import-not-found,unused-ignore]
except ImportError:  # pragma: no cover - not CPython
    import signal  # type: ignore[no-redef,unused-ignore]

from janitor.host.child_exit import exit_watch, reap
from janitor.host.parent_death import death_signal_setter

# The guarded ffmpeg imports this module on every call: no typing at run time.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence
    from types import FrameType
    from typing import IO, Any

    from janitor.host.child_exit import ChildExit

__all__ = [
    "FORWARDED_SIGNALS",
    "TERMINAL_SIGNALS",
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


def in_foreground() -> bool:
    """True when stdin is a terminal whose foreground process group is ours (an interactive
    shell ran us directly): the command then stays in our group, to read the terminal."""
    try:
        return os.isatty(0) and os.tcgetpgrp(0) == os.getpgrp()
    except OSError:
        return False


def _which(name: str, env: Mapping[str, str] | None) -> str:
    """``name`` resolved on PATH as execvp would; FileNotFoundError when it is not there."""
    if os.sep in name:
        return name
    path = (os.environ if env is None else env).get("PATH", os.defpath)
    for folder in path.split(os.pathsep):
        candidate = os.path.join(folder or ".", name)
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    raise FileNotFoundError(2, "No such file or directory", name)


def _fd(stream: int | IO[Any] | None) -> int | None:
    return stream if stream is None or isinstance(stream, int) else stream.fileno()


class Supervised:
    """A running command tied to this process's life (see the module docstring).

    ``wait(timeout)`` returns the exit code once the command ended (None before);
    ``signal(sig)`` reaches the command's process group; ``stop(grace)`` sends SIGTERM, then
    SIGKILL after ``grace`` seconds.

    Started with ``fork`` + ``exec`` and ``posix_spawn`` rather than ``subprocess``: the guarded
    ffmpeg supervises every alignment group's cut, and importing subprocess (locale, re, enum)
    would cost it 15 ms each time.
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
        argv = list(argv)
        exe = _which(argv[0], env)
        environ = dict(os.environ if env is None else env)
        # The pipe's write end is ours alone: os.pipe() is not inherited across exec, so neither
        # the command nor the sentinel keeps it open.
        read_end, self._word = os.pipe()
        try:
            self.pid = self._spawn(exe, argv, environ, (_fd(stdin), _fd(stdout), _fd(stderr)))
        except BaseException:
            os.close(read_end)
            os.close(self._word)
            raise
        target = str(self.pid) if self.foreground else f"-{self.pid}"
        self._sentinel: int | None = None
        try:
            self._sentinel = _spawn_sentinel(read_end, target)
        except Exception:
            pass  # no /bin/sh: Linux still has pdeathsig; say nothing more here
        finally:
            os.close(read_end)
        # The sentinel is dismissed once the command exited, before its pid is reaped.
        self._exit: ChildExit = exit_watch(self.pid, self._dismiss)

    def _spawn(
        self, exe: str, argv: list[str], env: dict[str, str], stdio: tuple[int | None, ...]
    ) -> int:
        """fork + exec, the child armed first: pdeathsig, its own group, default SIGPIPE."""
        die_with_us = death_signal_setter()  # resolved here: the child only calls it
        parent = os.getpid()
        group = not self.foreground
        for arg in (exe, *argv, *env, *env.values()):  # what execve would refuse in the child
            if "\0" in arg:
                raise ValueError(f"embedded null byte in {arg!r}")
        if any(not k or "=" in k for k in env):
            raise ValueError("an environment variable name is empty or holds '='")
        errors_r, errors_w = os.pipe()  # close-on-exec: EOF means the exec went through
        try:
            pid = os.fork()
        except BaseException:
            os.close(errors_r)
            os.close(errors_w)
            raise
        if pid == 0:  # pragma: no cover - the child, measured through its behaviour
            try:
                os.close(errors_r)
                if die_with_us is not None:
                    die_with_us(int(signal.SIGKILL))
                    if os.getppid() != parent:  # the supervisor died before that took effect
                        os.kill(os.getpid(), signal.SIGKILL)
                if group:
                    os.setpgid(0, 0)
                for target, fd in enumerate(stdio):
                    if fd is not None and fd != target:
                        os.dup2(fd, target)
                for sig in (signal.SIGPIPE, getattr(signal, "SIGXFSZ", None)):
                    if sig is not None:  # Python ignores these; the command must not
                        signal.signal(sig, signal.SIG_DFL)
                os.execve(exe, argv, env)
            except OSError as exc:
                os.write(errors_w, str(exc.errno or errno.EINVAL).encode())
            except BaseException:
                os.write(errors_w, str(errno.EINVAL).encode())
            finally:
                os._exit(127)
        os.close(errors_w)
        try:
            failed = os.read(errors_r, 32)
        except BaseException:  # interrupted: the child must not run unwatched
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            raise
        finally:
            os.close(errors_r)
        if group:
            try:  # set from both sides, so a signal sent right away reaches the group
                os.setpgid(pid, pid)
            except OSError:
                pass
        if failed:
            os.waitpid(pid, 0)
            code = int(failed or 0)
            raise OSError(code, os.strerror(code), argv[0])
        return pid

    @property
    def sentinel_pid(self) -> int | None:
        """The sentinel's pid (for tests and diagnostics)."""
        return self._sentinel

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
            reap(self._sentinel, timeout=5.0)  # it exits as soon as it reads the word

    def wait(self, timeout: float | None = None) -> int | None:
        """The command's exit code once it ended (negative: killed by that signal), else None
        after ``timeout`` seconds (None: no limit). Signal handlers of the main thread run
        while it waits (:mod:`janitor.host.child_exit`)."""
        return self._exit.wait(timeout)

    @property
    def returncode(self) -> int | None:
        """The exit code, or None while the command runs."""
        return self._exit.returncode

    def signal(self, sig: int) -> None:
        """Send ``sig`` to the command (its whole process group, unless in the foreground); not
        once it ended, for its pid may be another process's then."""
        if self._exit.ended:
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


def _spawn_sentinel(read_end: int, target: str) -> int:
    """The sentinel, reading ``read_end`` as its stdin, in a session of its own (out of reach of
    the terminal and of group kills)."""
    args = ["/bin/sh", "-c", _SENTINEL, "janitor-sentinel", target]
    actions = [
        (os.POSIX_SPAWN_DUP2, read_end, 0),
        (os.POSIX_SPAWN_OPEN, 1, os.devnull, os.O_WRONLY, 0),
        (os.POSIX_SPAWN_OPEN, 2, os.devnull, os.O_WRONLY, 0),
    ]
    try:
        env = {"PATH": "/usr/bin:/bin"}  # sh needs nothing of ours (and no odd names in it)
        return os.posix_spawn(args[0], args, env, file_actions=actions, setsid=True)
    except NotImplementedError:  # no POSIX_SPAWN_SETSID here: fork
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child
            try:
                os.setsid()
                os.dup2(read_end, 0)
                null = os.open(os.devnull, os.O_WRONLY)
                os.dup2(null, 1)
                os.dup2(null, 2)
                os.execv(args[0], args)
            finally:
                os._exit(127)
        return pid


def exit_code(returncode: int) -> int:
    """A shell's exit code for a returncode: 128 + N for a command killed by signal N."""
    return 128 - returncode if returncode < 0 else returncode


#: The signals a terminal sends to its whole foreground process group (Ctrl-C, Ctrl-\\).
TERMINAL_SIGNALS = (signal.SIGINT, signal.SIGQUIT)


def _from_terminal(signum: int) -> bool:
    """True when ``signum`` is one the terminal sent to our whole process group: a keyboard
    signal while our group is the terminal's foreground group. A command in the foreground
    shares that group, so it got the signal already; sending it again is what makes ffmpeg
    quit at once ("Immediate exit requested") instead of finishing its file. A shell does not
    pass Ctrl-C on to its foreground job either."""
    return signum in TERMINAL_SIGNALS and in_foreground()


def forward_signals(
    start: Callable[[], Supervised], received: list[int] | None = None
) -> tuple[Supervised, dict[int, Any]]:
    """Start the command with ``start()`` and pass the signals we get on to it (its process
    group); handle job control. Returns the command and the previous handlers, for
    :func:`restore_signals`; each signal we got is appended to ``received``.

    The handlers go in before the command starts: a signal that comes while it starts (a
    Ctrl-C, or a SIGTERM sent as soon as the command said it was ready) is passed on the moment
    the command runs, instead of killing us unforwarded. A command in the terminal's foreground
    gets Ctrl-C and Ctrl-\\ from the terminal itself: those are not sent again. Ctrl-Z stops
    the command and then us, so the shell that ran us sees a stopped job; SIGCONT (``fg``)
    continues both.
    """
    forwarded: dict[int, Any] = {}
    started: list[Supervised] = []
    early: list[int] = []

    def forward(signum: int, frame: FrameType | None) -> None:
        if received is not None:
            received.append(signum)
        if not started:
            early.append(signum)
        elif not (started[0].foreground and _from_terminal(signum)):
            started[0].signal(signum)

    def suspend(signum: int, frame: FrameType | None) -> None:
        started[0].signal(signal.SIGSTOP)
        os.kill(os.getpid(), signal.SIGSTOP)

    try:
        for sig in FORWARDED_SIGNALS:
            forwarded[sig] = signal.signal(sig, forward)
    except ValueError:  # not the main thread: only it may set handlers (and run them)
        restore_signals(forwarded)  # none set, as it is the first that raises
        return start(), {}
    try:
        child = start()
    except BaseException:
        restore_signals(forwarded)
        raise
    started.append(child)
    for signum in early:
        child.signal(signum)
    if not child.foreground:  # in the foreground the terminal stops and continues both
        forwarded[signal.SIGTSTP] = signal.signal(signal.SIGTSTP, suspend)
        forwarded[signal.SIGCONT] = signal.signal(signal.SIGCONT, forward)
    return child, forwarded


def restore_signals(previous: dict[int, Any]) -> None:
    """Put back the handlers :func:`forward_signals` replaced."""
    for sig, handler in previous.items():
        signal.signal(sig, handler)
