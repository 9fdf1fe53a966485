"""A child that dies with its parent: Linux's ``PR_SET_PDEATHSIG``, through libc's ``prctl``.

A supervised command (``janitor exec``, the guarded ffmpeg, ``janitor run``) must not outlive
the process that watches it (:mod:`janitor.commands.supervise`). On Linux the kernel can see to it:
a child that calls ``prctl(PR_SET_PDEATHSIG, sig)`` after the fork is sent ``sig`` the moment
the thread that forked it dies. macOS has no such call (and the portable mode does without it,
as macOS does): there the sentinel alone stops the command.

The guarded ffmpeg imports this on every call, so it loads nothing at import, and resolves
``prctl`` only when the setter is asked for, in the parent, before it forks (the child then calls
a function already resolved). It resolves it with ``_ctypes``, the C half of ``ctypes``
(``dlopen``, ``dlsym``, ``call_function``, there since Python 2.5): ``ctypes`` itself builds its
types at import, 2.5 ms of every guarded cut; it is used where ``_ctypes`` lacks them.
"""

from __future__ import annotations

from janitor.host.fastpaths import LINUX

TYPE_CHECKING = False  # typing costs the guarded ffmpeg several ms at every start
if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["death_signal_setter"]

#: ``PR_SET_PDEATHSIG`` from ``<linux/prctl.h>``.
_PR_SET_PDEATHSIG = 1


def death_signal_setter() -> Callable[[int], int] | None:
    """A function that, called in a forked child with a signal number, has the kernel send
    the child that signal when its parent dies (0 once armed, -1 when the kernel refused);
    None where there is none (not Linux, the portable mode, a libc without ``prctl``)."""
    if not LINUX:
        return None
    try:
        import _ctypes  # type: ignore[import-not-found,unused-ignore]

        address = _ctypes.dlsym(_ctypes.dlopen(None, 0), "prctl")  # type: ignore[arg-type,unused-ignore]
        call = _ctypes.call_function
    except (ImportError, OSError, AttributeError):
        return _through_ctypes()

    def arm(sig: int) -> int:
        # Python ints go as C ints, and the result comes back as one: as ctypes would call it.
        return int(call(address, (_PR_SET_PDEATHSIG, sig, 0, 0, 0)))

    return arm


def _through_ctypes() -> Callable[[int], int] | None:
    """The setter through ``ctypes`` proper; None where libc has no ``prctl``."""
    try:
        import ctypes

        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (ImportError, OSError, AttributeError):
        return None

    def arm(sig: int) -> int:
        return int(prctl(_PR_SET_PDEATHSIG, sig, 0, 0, 0))

    return arm
