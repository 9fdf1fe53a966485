"""Owner processes: who holds a reservation or a pin, whether it still lives, which process
a command-line user means (:func:`choose_owner`), and which processes a guarded cut came
through (:func:`writer_chain`: a job's lineage, judged by :mod:`janitor.host.lineage`).

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
    "Chain",
    "Link",
    "Owner",
    "ProcessInfo",
    "choose_owner",
    "choose_writer",
    "is_alive",
    "process_info",
    "process_start",
    "same_owner",
    "still_alive",
    "writer_chain",
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


def same_owner(recorded: float | None, seen: float | None) -> bool:
    """True when two starts recorded for one pid (maybe by two processes, a wall-clock step
    apart) can name one process; an unknown start (None) matches any."""
    return recorded is None or seen is None or processes.same_start(recorded, seen)


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


def _may_be_transient(proc: ProcessInfo) -> bool:
    """False for a process that is no go-between whatever its parent is: neither a launcher
    nor a shell (so its parent need not be read to tell)."""
    return proc.name in LAUNCHERS or proc.name in SHELLS


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


@dataclass(frozen=True, slots=True)
class Link:
    """One process a guarded cut came through, as read when the cut began: its pid and start
    time (its identity; 0.0 when it was gone before it could be read: no process is it), its
    process group then, and the start of the process that held the group's number then (the
    group's identity: None when none did, -1.0 when it could not be told)."""

    pid: int
    start: float
    pgid: int | None
    leader_start: float | None
    description: str = "?"


@dataclass(frozen=True, slots=True)
class Chain:
    """The processes from the guard's parent (the one that ran ffmpeg: it cut) up to the
    writer, past the go-betweens: every one is recorded with the job, and the job lives while
    any of them, or anything they forked, runs. ``writer`` owns the job's working set and pins."""

    links: tuple[Link, ...]
    writer: Link


def _verified_parent(child: ProcessInfo) -> ProcessInfo | None:
    """The parent of ``child``, read and then confirmed: ``child`` is read again and must be
    the same process with the same parent. A parent that exits re-parents its children, so
    an unchanged parent pid after the read means the start time read was that parent's, never
    a new process's given its pid. None when that cannot be confirmed (it exited meanwhile)."""
    parent = process_info(child.ppid)
    again = process_info(child.pid)
    if parent is None or parent.start is None or again is None or again.ppid != child.ppid:
        return None
    return parent if _unchanged(child.start, again.start) else None


def _unchanged(before: float | None, after: float | None) -> bool:
    """True unless two readings of one pid's start time may name two processes (the second
    one unreadable, or another time)."""
    if before is None or before < 0:
        return True
    return after is not None and after >= 0 and processes.same_start(before, after)


def _leader_start(pid: int, pgid: int | None, start: float) -> float | None:
    """The start of the process holding pid ``pgid`` (the group's leader, while it lives), read
    while process ``pid`` (started at ``start``) is in that group: a group's number is never
    handed to a new process while a process is in the group. -1.0 if that cannot be confirmed."""
    if pgid is None or pgid <= 0:
        return None
    if pgid == pid:
        return start
    leader = process_start(pgid)
    again = process_info(pid)
    if again is None or again.pgid != pgid or not _unchanged(start, again.start):
        return -1.0
    return leader


def _link(proc: ProcessInfo) -> Link:
    start = 0.0 if proc.start is None else proc.start
    return Link(proc.pid, start, proc.pgid, _leader_start(proc.pid, proc.pgid, start),
                proc.describe())  # fmt: skip


def _lost(pid: int, guard: ProcessInfo | None) -> Chain:
    """The chain of a cut whose process exited before it could be read (its guard was adopted
    by init or a subreaper): no process is it now, not one given its pid later. Its group is
    the one its guard inherited at the fork (unless the guard leads a group of its own), and is
    followed with no bound, since how long ago it started is not known."""
    pgid = None
    leader: float | None = None
    if guard is not None and guard.pgid is not None and guard.pgid != guard.pid:
        pgid = guard.pgid
        leader = _leader_start(guard.pid, pgid, -1.0 if guard.start is None else guard.start)
    gone = Link(pid, 0.0, pgid, leader)
    return Chain((gone,), gone)


def writer_chain(pid: int, *, guard: int | None = None) -> Chain:
    """The processes a guarded cut came through: ``pid`` (the guard's parent, which ran
    ffmpeg) and the go-betweens above it up to the writer: launchers, forked shells and
    ``sh -c`` strings, which live for one command.

    ``guard``: the guard's pid, when ``pid`` is its parent (what both guards send). Each
    process is then read through the one below it, confirmed after the read, so a process that
    exited before it was read is recorded as gone (start 0.0), never as a new process given its
    pid. Without ``guard`` (a caller naming the writer), ``pid`` is read as it is.

    A batchalign3 server runs ffmpeg itself, so it is the writer of its jobs; a script that
    runs ``sh -c "ffmpeg ..."`` per cut is, and the shell is recorded too: should it go on
    cutting after the script exits (a loop), it keeps the job alive.
    """
    if guard is None:
        proc = process_info(pid)
    else:
        kid = process_info(guard)
        proc = None if kid is None or kid.ppid != pid else _verified_parent(kid)
        if proc is None or proc.start is None:
            return _lost(pid, kid)
    if proc is None or proc.start is None:
        gone = Link(pid, 0.0, None, None)
        return Chain((gone,), gone)
    links = tuple(_link(p) for p in _up_to_writer(proc))
    return Chain(links, links[-1])


def _up_to_writer(proc: ProcessInfo) -> list[ProcessInfo]:
    """``proc`` and the go-betweens above it, up to the writer (the last), each read through
    the one below it. A parent is read only where the one below may be a go-between (a
    launcher or a shell): the cut of a server or a worker that runs ffmpeg itself reads no
    other process."""
    chain = [proc]
    while proc.ppid > 1 and len(chain) < 64 and _may_be_transient(proc):
        parent = _verified_parent(proc)
        if parent is None or not _transient(proc, parent, one_shot=True):
            break
        chain.append(parent)
        proc = parent
    return chain


def choose_writer(pid: int) -> Owner:
    """The writer of a job run by ``pid`` (the top of its :func:`writer_chain`, found the same
    way), as an owner; ``start`` None when it has exited already (its job is an orphan).
    The process groups a chain records are not read: an owner is a pid and a start time."""
    proc = process_info(pid)
    if proc is None or proc.start is None:
        return Owner(pid, None, "?")
    top = _up_to_writer(proc)[-1]
    return Owner(top.pid, top.start or None, top.describe())


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
