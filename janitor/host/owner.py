"""Owner processes: who holds a reservation or a pin, whether it still lives, and which process
a command-line user means (:func:`choose_owner`).

A pid alone is not an identity (pids are reused), so an owner is a pid plus the process's start
time; a zombie counts as dead, since it will never write again. :mod:`janitor.host.processes`
reads them, from ``/proc`` on Linux and through psutil elsewhere.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from janitor.host.processes import ProcessInfo, processes

__all__ = [
    "LAUNCHERS",
    "SHELLS",
    "Owner",
    "ProcessInfo",
    "choose_owner",
    "choose_writer",
    "is_alive",
    "process_info",
    "process_start",
    "still_alive",
]


def process_start(pid: int) -> float | None:
    """The start time of process ``pid`` (epoch seconds), or None if there is no such process."""
    if pid == os.getpid():
        # Our own start never changes; every reserve asks for it. Keyed by pid for fork().
        cached = _own_start.get(pid)
        if cached is None:
            cached = _own_start[pid] = processes.start(pid)
        return cached
    return processes.start(pid)


_own_start: dict[int, float | None] = {}


def is_alive(pid: int, start: float | None) -> bool:
    """True while process ``pid`` runs and, when ``start`` is known, is the same process."""
    return pid > 0 and processes.alive(pid, start)


def still_alive(pid: int, start: float | None) -> bool:
    """:func:`is_alive` for an owner asked about again and again (admission asks it of every
    live reservation's owner, under the ledger's writer lock): on Linux an owner once seen
    alive is watched by a pidfd, so each later ask is one ``poll``."""
    return pid > 0 and processes.still_alive(pid, start)


def process_info(pid: int) -> ProcessInfo | None:
    """pid, parent pid, executable and command line of ``pid``; None if it cannot be read."""
    return processes.info(pid)


# -- choosing the owner a command-line user means --------------------------------------------

#: Shells: a forked copy of one (what `$(...)`, a pipe, `( ... )` or `&` makes) exits as soon
#: as the command it waits for does, so it is never the owner.
SHELLS = frozenset(
    {"sh", "bash", "dash", "zsh", "ksh", "ksh93", "mksh", "oksh", "ash", "busybox", "yash",
     "posh", "fish", "tcsh", "csh"}
)  # fmt: skip
#: Launchers that only wait for the command they start and exit with it.
LAUNCHERS = frozenset(
    {"timeout", "flock", "xargs", "uv", "uvx", "poetry", "pipenv", "pdm", "hatch", "rye", "pipx",
     "conda", "mamba", "micromamba", "pixi"}
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class Owner:
    """The process chosen to own a reservation or pin, and what a message should say of it."""

    pid: int
    start: float | None
    description: str
    warning: str | None = None


def _transient(proc: ProcessInfo, parent: ProcessInfo, *, one_shot: bool = False) -> bool:
    """True for a go-between that exits as soon as the command it runs does.

    ``one_shot``: a shell running a command string (``sh -c '...'``) counts too: it lives for
    one command line, as a forked copy does.
    """
    if proc.name in LAUNCHERS:
        return True
    if proc.name not in SHELLS:
        return False
    if one_shot and _runs_a_string(proc.cmdline):
        return True
    # A forked copy: same program, same command line as its parent (it never exec'd).
    return bool(proc.exe) and proc.exe == parent.exe and proc.cmdline == parent.cmdline


def _runs_a_string(cmdline: tuple[str, ...]) -> bool:
    """True for ``sh -c STRING`` (or ``bash -lc``, ``zsh -ec`` ...): options before the first
    operand, one of them holding ``c``."""
    for arg in cmdline[1:]:
        if not arg.startswith("-") or arg in ("-", "--"):
            return False
        if not arg.startswith("--") and "c" in arg[1:]:
            return True
    return False


def _past_go_betweens(pid: int, *, one_shot: bool) -> ProcessInfo | None:
    proc = process_info(pid)
    hops = 0
    while proc is not None and proc.ppid > 1 and hops < 64:
        parent = process_info(proc.ppid)
        if parent is None or not _transient(proc, parent, one_shot=one_shot):
            break
        proc, hops = parent, hops + 1
    return proc


def choose_writer(pid: int) -> Owner:
    """The writer of a job: the process that ran ffmpeg (``pid``, the guard's parent), past the
    go-betweens that live for one command: launchers, forked shells and ``sh -c`` strings.

    A batchalign3 server runs ffmpeg itself, so it is the writer of its jobs; a script that
    runs ``sh -c "ffmpeg ..."`` per cut is, not the shell that ends with each cut. A writer that
    has exited already is returned with ``start`` None (its job is an orphan).
    """
    proc = _past_go_betweens(pid, one_shot=True)
    chosen = pid if proc is None else proc.pid
    start = process_start(chosen)
    description = "?" if proc is None else proc.describe()
    return Owner(chosen, start, description)


def choose_owner(start_pid: int | None = None) -> Owner:
    """The owner a command-line user means: the process that ran ``janitor`` (``start_pid``,
    default our parent), skipping go-betweens that exit as soon as janitor does.

    A go-between is a shell that is a forked copy of its parent (what ``$(...)``, a pipe,
    ``( ... )`` and ``&`` make: same executable and command line as its parent) or a launcher
    that only waits for its child (``timeout``, ``flock``, ``xargs``, ``uv run``, ...). So
    ``id=$(janitor reserve ...)`` in ``script.sh`` is owned by ``bash script.sh``, and a Python
    worker that runs the CLI with subprocess (even a forked multiprocessing worker) by that
    worker. ``warning`` says when the owner found is gone already or is init, for then only
    the TTL or a release ends the reservation.
    """
    pid = os.getppid() if start_pid is None else start_pid
    proc = _past_go_betweens(pid, one_shot=False)
    owner_pid = pid if proc is None else proc.pid
    start = process_start(owner_pid)
    warning = None
    description = "?" if proc is None else proc.describe()
    if start is None:
        warning = (
            f"the process that ran janitor (pid {owner_pid}) has exited already, so init owns "
            "this: only the TTL or a release ends it; pass --owner-pid to tie it to a process "
            "that lives"
        )
        owner_pid, start, description = 1, process_start(1), "init"
    elif owner_pid == 1:
        warning = (
            "janitor was started by init (the process that ran it has exited); only the TTL or "
            "a release ends this; pass --owner-pid to tie it to a process that lives"
        )
    return Owner(owner_pid, start, description, warning)
