"""``janitor`` started from a Python that has already imported it: the same process, less start.

Most of the suite's CPU went to starting Python and importing the janitor (a quarter of a
CPU-second a command, most of a second for the daemon), some nine hundred times a run on two
cores. :class:`JanitorPopen` is ``subprocess.Popen`` for the console script: the process it
starts is the console script's entry point (``janitor.cli.main``) with the argv, environment,
working folder, umask, session and stdin/stdout/stderr the test gave, and its parent is the
test's process. Only the start differs: the process is a copy of a per-worker server
(``tests/_fixtures/zygote.py``) that imported every module of ``janitor`` once, made with
``clone(CLONE_PARENT)`` so that the worker is its parent and waits for its real exit status.

What a copy could carry over from the server, and why each cannot matter:

* module state: importing the janitor starts no thread, fills no cache and reads the environment
  only for ``JANITOR_PORTABLE`` (``janitor.host.fastpaths``); a call whose environment differs
  from the server's there, or in ``PYTHON*``, ``LANG`` or ``LC_*`` (how Python sets itself up),
  runs the real console script. ``tempfile``'s cached folder and the time zone are reset;
* the standard streams: Python chose their buffering from a terminal; a call given a terminal
  runs the real console script;
* whatever a test gives ``Popen`` beyond that (``preexec_fn``, ``pass_fds`` or
  ``close_fds=False``, another user or group, a umask, a process group, a shell, another
  executable) runs the real console script.

``JANITOR_TEST_EXEC=1`` runs the real console script for every call (CI's second pass does), and
a platform where the clone cannot be made the same way (not glibc, not x86-64 or arm64) does.
The tests whose subject is the console script itself (its start-up imports, its exec) run
``JANITOR_BIN`` with ``subprocess`` directly.
"""

from __future__ import annotations

import atexit
import json
import os
import socket
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

__all__ = ["JANITOR_BIN", "JanitorPopen", "run"]

#: The console script installed next to the interpreter running the tests.
JANITOR_BIN = Path(sys.executable).parent / "janitor"

_SERVER = Path(__file__).with_name("zygote.py")


def _interpreter() -> str:
    """The console script's interpreter (its ``#!`` line): the server runs it, so that a copy's
    ``sys.executable`` is the script's (``.venv/bin/python3``), not the tests' (``python``)."""
    with open(JANITOR_BIN, "rb") as script:
        line = script.readline().decode().strip()
    first = line[2:].split()[0] if line.startswith("#!") else ""
    return first if first and os.path.isabs(first) and os.access(first, os.X_OK) else sys.executable


#: Variables read when Python or the janitor's modules start, not when a command runs.
_AT_IMPORT = ("JANITOR_PORTABLE",)
_AT_IMPORT_PREFIXES = ("PYTHON", "LC_", "LANG")


def _start_env(env: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if k in _AT_IMPORT or k.startswith(_AT_IMPORT_PREFIXES)}


class _Server:
    """The worker's one server process, started on first use; none where it cannot clone."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.sock: socket.socket | None = None
        self.proc: subprocess.Popen[bytes] | None = None
        self.env: dict[str, str] = {}
        self.pid = 0
        self.tried = False

    def get(self) -> socket.socket | None:
        """The socket to the server (started now if not yet), or None (then exec)."""
        if self.pid != os.getpid():  # a fork of the worker never shares its server
            self.sock, self.proc, self.tried, self.pid = None, None, False, os.getpid()
        if self.tried:
            return self.sock
        self.tried = True
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.env = dict(os.environ)
        proc = subprocess.Popen(
            [_interpreter(), str(_SERVER), str(theirs.fileno())],
            pass_fds=[theirs.fileno()],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            env=self.env,
        )
        theirs.close()
        ready = json.loads(ours.recv(4096) or b"{}")
        if not ready.get("ready"):
            ours.close()
            proc.wait()
            return None
        self.sock, self.proc = ours, proc
        atexit.register(self.stop)
        return ours

    def stop(self) -> None:
        """Close the socket: the server reads its end and exits."""
        if self.sock is not None and self.pid == os.getpid():
            self.sock.close()
            if self.proc is not None:
                self.proc.wait(timeout=10)
        self.sock = self.proc = None


_SERVER_OF_WORKER = _Server()


def _the_script(args: list[Any], executable: Any) -> bool:
    return executable is None and bool(args) and os.fspath(args[0]) == str(JANITOR_BIN)


class JanitorPopen(subprocess.Popen):  # type: ignore[type-arg]
    """``subprocess.Popen`` for ``[JANITOR_BIN, ...]``: started by the worker's server where the
    call is one it starts the same way (module docstring), else exec'd as Popen does."""

    #: How the last process was started: "server" or "exec" (for the tests of this module).
    started_by = ""

    def _execute_child(
        self, args: Any, executable: Any, preexec_fn: Any, close_fds: bool, pass_fds: Any,
        cwd: Any, env: Any, startupinfo: Any, creationflags: int, shell: bool,
        p2cread: int, p2cwrite: int, c2pread: int, c2pwrite: int, errread: int, errwrite: int,
        restore_signals: bool, gid: Any, gids: Any, uid: Any, umask: int,
        start_new_session: bool, process_group: Any,
    ) -> None:  # fmt: skip
        argv = [args] if isinstance(args, (str, bytes, os.PathLike)) else list(args)
        child_env = dict(os.environ if env is None else env)
        child_env = {os.fsdecode(k): os.fsdecode(v) for k, v in child_env.items()}
        stdio = [
            p2cread if p2cread != -1 else 0,
            c2pwrite if c2pwrite != -1 else 1,
            errwrite if errwrite != -1 else 2,
        ]
        simple = (
            os.environ.get("JANITOR_TEST_EXEC", "") in ("", "0")
            and not shell
            and _the_script(argv, executable)
            and preexec_fn is None
            and close_fds
            and not pass_fds
            and (gid, gids, uid) == (None, None, None)
            and process_group in (None, -1)
            and umask == -1
            and not any(os.isatty(fd) for fd in stdio)
        )
        if simple:
            server = _SERVER_OF_WORKER
            with server.lock:
                sock = server.get()
                if sock is not None and _start_env(child_env) == _start_env(server.env):
                    mask = os.umask(0)
                    os.umask(mask)
                    request = {
                        "argv": [os.fsdecode(a) for a in argv],
                        "env": child_env,
                        "cwd": os.path.abspath(cwd if cwd is not None else os.getcwd()),
                        "umask": mask,
                        "new_session": bool(start_new_session),
                    }
                    try:
                        socket.send_fds(sock, [json.dumps(request).encode()], stdio)
                        answer = json.loads(sock.recv(4096) or b"{}")
                    except OSError:  # the server is gone: exec from now on
                        server.sock, answer = None, {}
                    if "pid" in answer:
                        self.pid = int(answer["pid"])
                        self._child_created = True
                        type(self).started_by = "server"
                        # Popen's own step after a spawn: the child's ends of the pipes close
                        self._close_pipe_fds(  # type: ignore[attr-defined]
                            p2cread, p2cwrite, c2pread, c2pwrite, errread, errwrite
                        )
                        return
        type(self).started_by = "exec"
        super()._execute_child(  # type: ignore[misc]
            args, executable, preexec_fn, close_fds, pass_fds, cwd, env, startupinfo,
            creationflags, shell, p2cread, p2cwrite, c2pread, c2pwrite, errread, errwrite,
            restore_signals, gid, gids, uid, umask, start_new_session, process_group,
        )  # fmt: skip


def run(
    args: list[str], *, timeout: float | None = None, **kwargs: Any
) -> subprocess.CompletedProcess[Any]:
    """``subprocess.run`` with :class:`JanitorPopen` (``capture_output``, ``input``, ``check``
    as there)."""
    check = kwargs.pop("check", False)
    data = kwargs.pop("input", None)
    if kwargs.pop("capture_output", False):
        kwargs["stdout"] = kwargs["stderr"] = subprocess.PIPE
    if data is not None:
        kwargs["stdin"] = subprocess.PIPE
    with JanitorPopen(args, **kwargs) as proc:
        try:
            out, err = proc.communicate(data, timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            raise
        except BaseException:
            proc.kill()
            raise
        code = proc.poll()
        assert code is not None
    done = subprocess.CompletedProcess(proc.args, code, out, err)
    if check:
        done.check_returncode()
    return done
