"""Jobs: what batchalign3 does with one recording in one ``.tmpXXXXXX`` folder, as admission sees
it (schedulers call it a job's scratch request: HTCondor's ``request_disk``, Slurm's ``--tmp``).

A job is a unit folder of a scratch tree (``units = "dir"``), recorded at the first guarded
write into it with its writers (the processes each cut came through, from the one that ran
ffmpeg up to the writer: each a pid and its start time, and its process group) and its sources
(the inputs it cuts from). It lives while its folder is there and one of its processes runs: a
writer, or what a writer forked that lives on (:mod:`janitor.host.lineage`):

- its folder removed (the pipeline's ``TempDir`` dropped): ``done``, its working-set
  reservations released and its source pins ended;
- every process gone with the folder still there: an ``orphan``, at once (no ``orphan_age``);
  the daemon, a sweep or ``janitor run`` removes it with every deleter check; then ``removed``.
  A folder that held files older than the job's first guarded write (``foreign``: another job's,
  which the guard never saw written) is never removed at once: its tree's ``orphan_age`` rules.

The working set: the first cut from a source into a job's folder reserves the whole source at
the cut's byte rate (every group's PCM stays until the file is done), as one reservation on
the folder its cuts go to (``path``: that folder, so what is written there counts as written,
and later cuts draw on it without a new admission). It has no TTL: it ends with the job.

Everything here runs inside the caller's write transaction (janitor.guarding orders it).
"""

from __future__ import annotations

import os
import stat
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple

from janitor.admission.reserve import end_logged, live_reservations, owners_alive, reap
from janitor.host.lineage import keepers
from janitor.host.owner import still_alive
from janitor.host.space import allocated_size
from janitor.ledger.jobs import JobInfo, SourceInfo, Writer, new_job_id
from janitor.ledger.reservations import ReservationInfo

if TYPE_CHECKING:
    from janitor.admission.volume import Volume
    from janitor.config.policy import Policy, TreePolicy
    from janitor.ledger.tx import Tx

__all__ = [
    "Capacity",
    "JobEnd",
    "JobFolder",
    "KnownWrite",
    "Reaped",
    "capacity",
    "end_job",
    "folder_is",
    "job_folder",
    "job_keepers",
    "job_tree",
    "known_job",
    "reap_all",
    "reap_jobs",
    "reap_waiters",
    "record_job",
    "set_source",
]


@dataclass(frozen=True, slots=True)
class JobFolder:
    """Where a write lands, as a job: the scratch tree, the unit folder (as the policy spells
    the tree's root, e.g. ``/var/folders/x7/T/.tmpa1b2c3``) and the folder's identity."""

    tree: str
    folder: str
    device: int
    ino: int


def job_folder(policy: Policy, tree: str, path: str) -> JobFolder | None:
    """The job folder that ``path`` (inside tree ``tree``, as recorded) lies in: a unit of a
    scratch tree, i.e. a folder right under its root that matches its ``unit_glob`` and holds
    an entry matching one of its ``unit_requires`` (batchalign3's scopes: another program's
    ``.tmp*`` folder is no job of ours); None for any other write.

    The folder must be a real folder (not a symlink) holding the path, not the path itself.
    """
    tp = policy.trees.get(tree)
    if tp is None or not tp.holds_jobs:
        return None
    root = os.path.normpath(os.path.abspath(tp.path))
    if not path.startswith(root + os.sep):
        return None
    head, sep, _ = path[len(root) + 1 :].partition(os.sep)
    if not sep:
        return None
    folder = os.path.join(root, head)
    try:
        st = os.lstat(folder)
        if not stat.S_ISDIR(st.st_mode) or not tp.is_unit_folder(head, lambda: os.listdir(folder)):
            return None
    except OSError:
        return None
    return JobFolder(tree, folder, st.st_dev, st.st_ino)


@dataclass(frozen=True, slots=True)
class KnownWrite:
    """A write into the folder of a job the ledger knows (live or orphaned): the job, its
    folder as recorded, and the write's path under that folder as the job records it."""

    job: JobInfo
    folder: JobFolder
    path: str


def known_job(tx: Tx, path: str) -> KnownWrite | None:
    """The live or orphaned job whose folder holds ``path``, whatever the policy now says: a
    job known to the ledger stays that job until it ends, though a reload dropped its tree,
    moved its root or spelled it another way (a symlink to the same folder).

    Its folder is found by identity: a folder above ``path`` (symlinks resolved) with the
    device and inode a job was recorded with, that is still the folder the job records
    (:func:`folder_is`: an inode number reused by a new folder elsewhere is not the job's).
    None when no known job's folder holds it.
    """
    try:
        real = os.path.realpath(path)
    except ValueError:
        return None  # a NUL byte, text no filesystem names: no folder holds it
    above: list[tuple[str, int, int]] = []
    folder = os.path.dirname(real)
    while True:
        try:
            st = os.stat(folder)
        except (OSError, ValueError):
            pass  # not made yet: only a folder that exists can be a job's
        else:
            above.append((folder, st.st_dev, st.st_ino))
        parent = os.path.dirname(folder)
        if parent == folder:
            break
        folder = parent
    jobs = {(j.device, j.ino): j for j in tx.jobs.active_with((d, i) for _, d, i in above)}
    for folder, device, ino in above:  # the innermost first
        job = jobs.get((device, ino))
        if job is not None and folder_is(job):
            where = JobFolder(job.tree, job.folder, job.device, job.ino)
            return KnownWrite(job, where, os.path.join(job.folder, os.path.relpath(real, folder)))
    return None


def job_tree(policy: Policy, job: JobInfo) -> TreePolicy:
    """The tree a known job's writes are admitted under: the policy's tree of the job's name
    while its root still holds the job's folder (as it was recorded); else (a reload dropped
    the tree, renamed it or moved its root) the job's tree as recorded: a scratch tree of that
    name whose root is the folder's parent. Either way the volume's numbers (floor, free_low)
    are those the policy now gives that volume (its ``[volume]`` table, or the
    ``[volumes.X]`` that names it), whether a tree is still on it or not."""
    from pathlib import Path

    from janitor.config.policy import TreePolicy

    parent = os.path.dirname(job.folder)
    tree = policy.trees.get(job.tree)
    if tree is not None and os.path.normpath(os.path.abspath(tree.path)) == parent:
        return tree
    # Not validated: the root is the job's, not a folder a policy names.
    return TreePolicy.model_construct(name=job.tree, role="scratch", path=Path(parent), units="dir")


def job_keepers(writers: Iterable[Writer]) -> tuple[int, ...]:
    """The pids that keep a job with these recorded ``writers`` alive: a writer that runs (the
    same process: its start time is checked exactly), else what they forked that lives on in
    their process groups; () for an orphan. The one rule for every caller: reaps, sweeps,
    admission's working sets and ``janitor run``."""
    return keepers(writers)


def folder_is(job: JobInfo) -> bool:
    """True while the job's folder is still the one it was recorded with."""
    try:
        st = os.lstat(job.folder)
    except OSError:
        return False
    return stat.S_ISDIR(st.st_mode) and st.st_ino == job.ino and st.st_dev == job.device


@dataclass(frozen=True, slots=True)
class JobEnd:
    """A job that changed state at a reap: its record before, and the state it moved to."""

    job: JobInfo
    state: str
    why: str


def end_job(tx: Tx, job: JobInfo, state: str, why: str, now: float) -> JobEnd:
    """Move a job to ``state`` (done, orphan, removed), ending what it held: its working-set
    reservations (released when the job is done, dead when its writers died) and the pins on
    its sources."""
    tx.jobs.set_state(job.id, state, now)
    ending = "released" if state == "done" else "dead"
    for info in tx.reservations.of_job(job.id):
        end_logged(tx, info, ending, now, why=why)
    tx.draws.drop_job(job.id)
    pins = [s.pin for s in job.sources if s.pin]
    if pins:
        tx.pins.end_ids(pins, "released" if state == "done" else "dead", now=now)
    tx.log.add(
        "job-end", tree=job.tree, device=job.device, path=job.folder, ts=now, job_id=job.id,
        state=state, why=why,
    )  # fmt: skip
    return JobEnd(job, state, why)


def reap_jobs(tx: Tx, now: float | None = None) -> list[JobEnd]:
    """End the jobs whose folder is gone (done, or removed for an orphan) and mark orphans the
    live jobs whose every writer died. Cheap: an lstat per job and a pidfd poll per writer."""
    now = time.time() if now is None else now
    ended: list[JobEnd] = []
    for job in tx.jobs.active():
        if not folder_is(job):
            state = "done" if job.state == "live" else "removed"
            ended.append(end_job(tx, job, state, "folder removed", now))
        elif job.state == "live" and not job_keepers(job.writers):
            ended.append(end_job(tx, job, "orphan", "every writer died", now))
    return ended


class Reaped(NamedTuple):
    """What a reap ended: reservations, how many pins, and jobs (done, orphaned, removed)."""

    reservations: list[ReservationInfo]
    pins: int
    jobs: list[JobEnd]


def reap_all(tx: Tx, now: float) -> Reaped:
    """End, inside the caller's write transaction, what outlived its owner or its time: the
    queue places of processes that died waiting, the reservations and pins whose owner died
    or whose TTL passed, and the jobs whose folder is gone or whose every writer died (those
    become orphans). ``Janitor.reap`` and a sweep both reap with this."""
    reap_waiters(tx)
    return Reaped(reap(tx, now), tx.pins.reap(now), reap_jobs(tx, now))


def record_job(
    tx: Tx,
    where: JobFolder,
    writer: Writer,
    *,
    run: str | None,
    now: float,
    lineage: Sequence[Writer] = (),
) -> JobInfo:
    """The job of folder ``where``, recorded now if it is new, with ``writer`` and the rest of
    the call's ``lineage`` (the process that ran ffmpeg, the go-betweens) among its writers. A
    recorded job whose folder was replaced (another inode) ends first; an orphan that a live
    process writes into again is live again."""
    job = tx.jobs.active_at(where.folder)
    if job is not None and (job.ino != where.ino or job.device != where.device):
        end_job(tx, job, "done" if job.state == "live" else "removed", "folder replaced", now)
        job = None
    if job is None:
        job = JobInfo(
            new_job_id(now), where.tree, where.folder, where.device, where.ino, run, now, "live",
            None, _holds_older_files(where.folder, now - FOREIGN_AGE_S),
        )  # fmt: skip
        tx.jobs.insert(job)
        tx.log.add(
            "job", tree=where.tree, device=where.device, path=where.folder, ts=now,
            job_id=job.id, writer=writer.pid, run=run,
        )  # fmt: skip
    elif job.state == "orphan":
        tx.jobs.set_state(job.id, "live", now)
    added = [tx.jobs.add_writer(job.id, w, now) for w in dict.fromkeys((*lineage, writer))]
    if any(added) or job.state != "live":
        refreshed = tx.jobs.get(job.id)
        assert refreshed is not None  # written in this very transaction
        job = refreshed
    return job


#: A file this much older than a job's first guarded write was not written by that job: the
#: pipeline writes a group's JSON payload moments before its first cut, never minutes.
FOREIGN_AGE_S = 60.0


def _holds_older_files(folder: str, before: float) -> bool:
    """True if ``folder`` holds a file modified before ``before`` (a bounded look: a new job's
    folder holds a few entries)."""
    seen = 0
    for top, dirs, files in os.walk(folder):
        for name in files:
            seen += 1
            if seen > 10_000:
                return True  # not a new job's folder
            try:
                if os.lstat(os.path.join(top, name)).st_mtime < before:
                    return True
            except OSError:
                continue
        dirs[:] = [d for d in dirs if not os.path.islink(os.path.join(top, d))]
    return False


def set_source(tx: Tx, job: JobInfo, source: SourceInfo) -> JobInfo:
    """Record what the job holds for one input; the job as it is now."""
    tx.jobs.set_source(job.id, source)
    refreshed = tx.jobs.get(job.id)
    assert refreshed is not None
    return refreshed


def reap_waiters(tx: Tx) -> int:
    """Take off the queues the places of processes that died while waiting; how many."""
    gone = [w.id for w in tx.waiters.all() if not still_alive(w.owner_pid, w.owner_start)]
    for waiter_id in gone:
        tx.waiters.remove(waiter_id)
    return len(gone)


@dataclass(frozen=True, slots=True)
class Capacity:
    """What a volume could ever give one request: its size, the floor it keeps, and the bytes
    held outside every reservation that no eviction or job end frees (other files, root's
    reserve); ``most`` is what is left for one request once every job has ended."""

    total: int
    floor: int
    held: int

    @property
    def most(self) -> int:
        """capacity - floor - held, never below zero."""
        return max(0, self.total - self.floor - self.held)


def capacity(
    tx: Tx, policy: Policy, volume: Volume, *, kept: frozenset[str] = frozenset()
) -> Capacity:
    """The volume's capacity for one request (see :class:`Capacity`): used bytes less what can
    come back: the caches on it (every entry can be evicted once unpinned; not a cache of
    Hugging Face revisions, which only its quota evicts), the folders of
    its jobs (removed when they end), and what live reservations elsewhere on it wrote.
    ``kept``: files the request itself keeps (its job's pinned sources): they never come back
    while it waits.

    It walks the caches and job folders: a refusal path only, never per grant.
    """
    from janitor.config.policy import trees_by_device

    device = volume.device
    evicting = trees_by_device(t for t in policy.trees.values() if t.evicts_for_room)
    caches = [os.path.normpath(os.path.abspath(t.path)) for t in evicting.get(device, ())]
    folders = [j.folder for j in tx.jobs.active() if j.device == device]
    back = sum(allocated_size(p) for p in caches) + sum(allocated_size(f) for f in folders)
    inside = tuple(p + os.sep for p in (*caches, *folders))
    for r in live_reservations(tx, device=device):
        if r.path is not None and not r.path.startswith(inside) and owners_alive(r):
            back += r.bytes - r.outstanding
    for path in kept:
        if path.startswith(tuple(p + os.sep for p in caches)):
            back -= allocated_size(path)
    used = volume.total - volume.free
    return Capacity(volume.total, volume.floor, max(0, used - back))
