"""The forkserver's server: a Python that has imported the janitor once and starts each
``janitor ...`` the tests run as a copy of itself (see ``tests/_fixtures/forkserver.py``).

Run as a script by the test worker, with one end of a SOCK_SEQPACKET socket pair as argv[1].
Each request is one JSON message (argv, env, cwd, umask, new session) with three file
descriptors (the child's stdin, stdout, stderr); the answer is ``{"pid": N}``.

The child is made with ``clone(CLONE_PARENT)``, not ``fork``: its parent is the test worker,
as a ``subprocess.Popen`` child's is, so the worker waits for it (its real exit status) and the
janitor's ``os.getppid()`` (who holds a reservation made by ``janitor reserve``) is the test's
process. Python's own before/after-fork steps run around the clone, as ``os.fork`` runs them.
Single-threaded and holding no lock, the server's memory is safe to copy; glibc's thread
descriptor gets the child's thread id (CLONE_CHILD_SETTID), as glibc's ``fork`` gives it.

Nothing from ``tests`` is imported here: the children must hold only what a ``janitor`` process
holds.
"""

from __future__ import annotations

import ctypes
import json
import os
import platform
import signal
import socket
import sys
from typing import Any

# A script's folder is sys.path[0]; the children are the console script, not this folder.
del sys.path[0]

_CLONE_PARENT = 0x00008000
_CLONE_CHILD_SETTID = 0x01000000
#: syscall numbers (clone, gettid) and where glibc keeps a thread's id in its descriptor
_ARCH = {
    "x86_64": (56, 186, 0x2D0),
    "aarch64": (220, 178, 0xD0),
}


class _NoThreads:
    """Refuses numpy while preloading: its BLAS starts threads as it loads, and a process made
    by copying one with threads would find them gone (its exit waits for them forever). The
    janitor modules that need numpy are imported by each child that needs them."""

    @staticmethod
    def find_spec(name: str, path: object = None, target: object = None) -> None:
        if name.partition(".")[0] == "numpy":
            raise ImportError(f"{name} is not preloaded (it starts threads)")


def _preload() -> bool:
    """Import what a ``janitor`` command and the daemon import (nothing runs: no thread, no
    cache filled, no environment read that a child could find stale; see forkserver.py).
    False if a thread was started all the same."""
    import importlib
    import pkgutil

    import janitor

    sys.meta_path.insert(0, _NoThreads)
    try:
        for mod in pkgutil.walk_packages(janitor.__path__, "janitor."):
            if not mod.name.endswith("__main__"):
                try:
                    importlib.import_module(mod.name)
                except ImportError:
                    continue
    finally:
        sys.meta_path.remove(_NoThreads)
    return len(os.listdir("/proc/self/task")) == 1


def _cloner() -> tuple[object, int] | None:
    """The clone call and the address of this thread's id in glibc's descriptor, or None
    where they are not known (then the worker runs the real console script)."""
    arch = _ARCH.get(platform.machine())
    if arch is None or platform.libc_ver()[0] != "glibc":
        return None
    _, nr_gettid, offset = arch
    libc = ctypes.PyDLL(None, use_errno=True)  # PyDLL: the GIL stays held, as os.fork holds it
    libc.syscall.restype = ctypes.c_long
    libc.pthread_self.restype = ctypes.c_void_p
    tid = libc.syscall(nr_gettid)
    where = libc.pthread_self() + offset
    if ctypes.c_int.from_address(where).value != tid:
        return None
    return libc, where


def _clone(libc: object, where: int) -> int:
    nr_clone = _ARCH[platform.machine()][0]
    flags = _CLONE_PARENT | _CLONE_CHILD_SETTID | signal.SIGCHLD
    api = ctypes.pythonapi
    api.PyOS_BeforeFork()
    if platform.machine() == "aarch64":  # CLONE_BACKWARDS: (flags, stack, ptid, tls, ctid)
        pid = libc.syscall(nr_clone, flags, 0, 0, 0, ctypes.c_void_p(where))  # type: ignore[attr-defined]
    else:  # (flags, stack, ptid, ctid, tls)
        pid = libc.syscall(nr_clone, flags, 0, 0, ctypes.c_void_p(where), 0)  # type: ignore[attr-defined]
    if pid == 0:
        api.PyOS_AfterFork_Child()
    else:
        api.PyOS_AfterFork_Parent()
    if pid < 0:
        raise OSError(ctypes.get_errno(), "clone")
    return int(pid)


def _become(request: dict[str, Any], fds: list[int], sock: socket.socket) -> None:
    """In the child: the process the worker asked for, then the console script's entry point.
    Its SystemExit ends this interpreter as it ends the script's."""
    import tempfile
    import time

    sock.close()
    for target, fd in enumerate(fds):
        if fd != target:
            os.dup2(fd, target)
    for fd in set(fds) - {0, 1, 2}:
        os.close(fd)
    if request["new_session"]:
        os.setsid()
    os.umask(int(request["umask"]))
    os.chdir(str(request["cwd"]))
    os.environ.clear()
    os.environ.update(request["env"])
    time.tzset()
    tempfile.tempdir = None
    argv = [str(a) for a in request["argv"]]
    sys.argv = argv
    sys.path.insert(0, os.path.dirname(argv[0]))
    from janitor.cli import main

    main()


def serve(fd: int) -> None:
    sock = socket.socket(fileno=fd)
    cloner = _cloner()
    if cloner is not None and not _preload():
        cloner = None
    sock.send(json.dumps({"ready": cloner is not None}).encode())
    while True:
        try:
            msg, fds, _flags, _addr = socket.recv_fds(sock, 1 << 20, 3)
        except (ConnectionError, OSError):
            return
        if not msg:  # the worker closed its end
            return
        request = json.loads(msg)
        try:
            pid = _clone(*cloner)  # type: ignore[misc]
        except OSError as exc:
            for f in fds:
                os.close(f)
            sock.send(json.dumps({"error": str(exc)}).encode())
            continue
        if pid == 0:
            _become(request, fds, sock)
            sys.exit(0)  # main() always exits; never reached
        for f in fds:
            os.close(f)
        sock.send(json.dumps({"pid": pid}).encode())


if __name__ == "__main__":
    serve(int(sys.argv[1]))
