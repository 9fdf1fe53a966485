"""Sizes of several folders at once, measured in parallel processes, as ``du -sx`` measures.

``janitor space`` must answer faster than ``du`` over the same folders, in Python. A walk is
one ``lstat`` per entry (as du's); the time goes to the kernel and to building each
``stat_result``, so it is spread over processes, not threads (the GIL serialises threads). One
process, the first, lists the top of every folder (names only) and cuts the work into tasks:
each subfolder of a top, and the top's files in chunks. The task numbers go into a pipe before
the others are forked; every process then takes the next number from the pipe (a read of a
few bytes from a pipe is atomic), so a process that finishes early takes more. Each sends its
results back through a pipe of its own; the caller merges them. Elsewhere than on Linux
(``janitor.host.fastpaths``), or with one worker, the same tasks run in the calling process.

What is counted, per folder: the allocated bytes (``st_blocks * 512``) of every entry below its
top (the top's own blocks excluded), a hard-linked file once over all the folders measured
together (the first folder listed has it, as with ``du -sxc``), never following a symlink, never
entering another filesystem or a mount point below the top (a bind mount of the same filesystem
included: the mount table is read when a folder is listed, and every folder entered must be on
the top's mount, as ``janitor.host.mounts`` tells). A folder's ``prune`` paths are measured on
their own: below this one, only their own entry counts. Entries that vanish or cannot be read
are skipped. Folders are opened relative to their parent (``FolderChain``): any depth works.

``start`` returns at once: the caller keeps working (importing the rest of the janitor, reading
its policy) while the folders are measured, then asks for the ``results``.

Given the compiled walker (``native``: ``janitor.host.nativewalk``, the same walk in C with
threads, built once per source version), ``start`` runs it instead, anywhere (its calls are
POSIX), handing it the mount points below each top; the Python walk here measures whenever it
cannot run or fails, and is the only walk when there is none. ``backend`` says which measured.
"""

from __future__ import annotations

import atexit
import marshal
import math
import os
import select
import signal
import stat
import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from janitor.host.fastpaths import LINUX
from janitor.host.fdwalk import DIR_FLAGS, FolderChain, FolderChanged
from janitor.host.mounts import mount_points, mounts_under
from janitor.host.nativewalk import NativeWalk, Raw

__all__ = ["CHILDREN", "FILES", "SIZE", "Child", "Folder", "Measured", "SizeWalk", "workers"]

#: How much a folder's measure tells: its size; also each entry right under its top; also every
#: file below it (path relative to the top, bytes, last use).
SIZE, CHILDREN, FILES = 0, 1, 2

#: Names of a top in one task: at most _CHUNK, fewer to make _RUNS tasks of a top; and at most
#: _MAX_TASKS tasks in all, whose numbers fit in a pipe's buffer (64 KiB).
_CHUNK = 1024
_RUNS = 64
_MAX_TASKS = 4000
_TASK = struct.Struct("<III")  # a task: a top, the first and the end of a run of its names


@dataclass(frozen=True, slots=True)
class Folder:
    """A folder to measure: its path, the folders below it measured on their own, and how much
    to tell about it (``SIZE``, ``CHILDREN``, ``FILES``)."""

    path: str
    prune: tuple[str, ...] = ()
    detail: int = SIZE


@dataclass(frozen=True, slots=True)
class Child:
    """An entry right under a folder's top, with what its subtree holds."""

    name: str
    is_dir: bool
    bytes: int  # allocated bytes, its own entry included
    newest_mtime: float  # the latest mtime in it, its own included
    oldest_use: float  # the earliest max(mtime, atime) of a file in it (not a folder); inf: none
    linked: bool = False  # it holds a file with several links (counted once, maybe elsewhere)


@dataclass(frozen=True, slots=True)
class Measured:
    """One folder's measure: its device, allocated bytes below its top, entries counted, and
    (by its ``detail``) its top's entries and every file in it as (relative path, bytes, use)."""

    folder: Folder
    device: int
    bytes: int
    entries: int
    own: int = 0  # the top's own allocated bytes (``du -s`` counts them too)
    children: tuple[Child, ...] = ()
    files: tuple[tuple[str, int, float], ...] = ()


def workers() -> int:
    """How many processes measure: one per core, at least two (a cold disk answers several
    requests at once), at most eight."""
    return min(8, max(2, os.cpu_count() or 1))


# A task's result, as marshal carries it: (folder index, entry name or None for a run of files
# told as one, is_dir, bytes, entries, newest mtime, oldest use, [(ino, bytes) of files with
# several links], [(rel, bytes, use) of files]).
_Record = tuple[int, str | None, bool, int, int, float, float, list[tuple[int, int]], list[Any]]


class _Top:
    """A folder's top as listed: its descriptor, identity, names and what bounds the walk."""

    __slots__ = ("device", "fd", "mounts", "names", "own", "path", "prune", "want")

    def __init__(self, folder: Folder) -> None:
        self.path = folder.path.rstrip("/") or "/"
        self.want = folder.detail
        self.fd = -1
        self.device = self.own = 0
        self.names: list[str] = []
        self.prune: frozenset[tuple[int, int]] = frozenset()
        self.mounts: frozenset[str] = frozenset()
        try:
            st = os.lstat(folder.path)
            if not stat.S_ISDIR(st.st_mode):
                return
            fd = os.open(folder.path, DIR_FLAGS)
        except OSError:
            return
        try:
            fst = os.fstat(fd)
            if (fst.st_dev, fst.st_ino) != (st.st_dev, st.st_ino):
                raise OSError("swapped between the lstat and the open")
            self.mounts = mounts_under(self.path)
            self.names = os.listdir(fd)
        except OSError:
            os.close(fd)
            self.names = []
            return
        self.fd, self.device, self.own = fd, st.st_dev, st.st_blocks * 512
        ids = set()
        for p in folder.prune:
            try:
                pst = os.lstat(p)
            except OSError:
                continue
            ids.add((pst.st_dev, pst.st_ino))
        self.prune = frozenset(ids)


def _tops(folders: Sequence[Folder]) -> list[_Top]:
    """Every folder's top, listed, with the mount table as it is now."""
    mount_points(fresh=True)
    return [_Top(f) for f in folders]


def _tasks(tops: Sequence[_Top]) -> list[tuple[int, int, int]]:
    """The work, as runs of each top's names (top, first, end): a few dozen runs per top at
    least, so that one big subfolder does not hold back the rest, and at most a few thousand in
    all (their numbers must fit in a pipe)."""
    out: list[tuple[int, int, int]] = []
    share = max(1, len(tops))
    for i, top in enumerate(tops):
        n = len(top.names)
        step = max(min(_CHUNK, math.ceil(n / _RUNS)), math.ceil(n * share / _MAX_TASKS), 1)
        out.extend((i, a, min(a + step, n)) for a in range(0, n, step))
    return out


def _run(tops: Sequence[_Top], i: int, a: int, b: int) -> list[_Record]:
    """The records of a run of top ``i``'s names: one per entry when the top wants its entries
    told, else one for the whole run."""
    top = tops[i]
    fd, device, want, names = top.fd, top.device, top.want, top.names
    lstat, isdir = os.lstat, stat.S_ISDIR
    out: list[_Record] = []
    total = n = 0
    multi: list[tuple[int, int]] = []
    files: list[tuple[str, int, float]] = []
    for k in range(a, b):
        name = names[k]
        try:
            st = lstat(name, dir_fd=fd)
        except OSError:
            continue
        if st.st_dev != device:
            continue  # another filesystem mounted there
        if isdir(st.st_mode):
            rec = _subfolder(top, i, name, st)
            if rec is None:
                continue
            if want:
                out.append(rec)
            else:
                total += rec[3]
                n += rec[4]
                multi.extend(rec[7])
            continue
        size = st.st_blocks * 512
        n += 1
        several = st.st_nlink > 1
        if want:
            use = max(st.st_mtime, st.st_atime)
            one = [(st.st_ino, size)] if several else []
            mine = [(name, size, use)] if want >= FILES else []
            out.append((i, name, False, 0 if several else size, 1, st.st_mtime, use, one, mine))
        elif several:
            multi.append((st.st_ino, size))
        else:
            total += size
    if not want:
        out.append((i, None, False, total, n, 0.0, math.inf, multi, files))
    return out


def _subfolder(top: _Top, i: int, name: str, st: os.stat_result) -> _Record | None:
    """The record of subfolder ``name`` of a top (``st``: its lstat) and all below it; None
    when it is not ours to count (a mount point)."""
    size = st.st_blocks * 512
    path = top.path.rstrip("/") + "/" + name  # the top "/" too
    if top.mounts and path in top.mounts:
        return None  # a mount point (a bind mount has the top's device)
    alone: _Record = (i, name, True, size, 1, st.st_mtime, math.inf, [], [])
    if (st.st_dev, st.st_ino) in top.prune:
        return alone  # measured on its own: only its entry counts here
    try:
        fd = os.open(name, DIR_FLAGS, dir_fd=top.fd)
    except OSError:
        return alone
    try:
        fst = os.fstat(fd)
        if (fst.st_dev, fst.st_ino) != (st.st_dev, st.st_ino):
            return alone  # replaced since its lstat
        walk = _Walk(top, fd, path, name)
        walk.run()
        return (
            i,
            name,
            True,
            size + walk.total,
            1 + walk.n,
            max(st.st_mtime, walk.newest),
            walk.oldest,
            walk.multi,
            walk.files,
        )
    finally:
        os.close(fd)


class _Walk:
    """Everything below one subfolder of a top: bytes, entries, and what its top wants told."""

    __slots__ = ("files", "multi", "n", "newest", "oldest", "path", "rel", "top", "top_fd", "total")

    def __init__(self, top: _Top, fd: int, path: str, rel: str) -> None:
        self.top, self.top_fd, self.path, self.rel = top, fd, path, rel
        self.total = self.n = 0
        self.newest, self.oldest = 0.0, math.inf
        self.multi: list[tuple[int, int]] = []
        self.files: list[tuple[str, int, float]] = []

    def run(self) -> None:
        top = self.top
        chain = FolderChain(self.top_fd)
        device, prune, want, mounts = top.device, top.prune, top.want, top.mounts
        isdir, listdir, lstat = stat.S_ISDIR, os.listdir, os.lstat
        multi = self.multi
        files = self.files
        blocks = n = 0
        newest, oldest = self.newest, self.oldest
        # Per level: the subfolders still to walk, as (name, ino, path, rel).
        todo: list[list[tuple[str, int, str, str]]] = []
        here: tuple[str, str] | None = (self.path, self.rel)
        try:
            while True:
                if here is not None:
                    path, rel = here
                    here = None
                    subs: list[tuple[str, int, str, str]] = []
                    todo.append(subs)
                    fd = chain.fd
                    try:
                        names = listdir(fd)
                    except OSError:
                        names = []
                    for name in names:
                        try:
                            st = lstat(name, dir_fd=fd)
                        except OSError:
                            continue
                        if st.st_dev != device:
                            continue
                        n += 1
                        if isdir(st.st_mode):
                            sub = path + "/" + name
                            if mounts and sub in mounts:
                                n -= 1
                                continue  # a mount point (a bind mount has the top's device)
                            blocks += st.st_blocks
                            if want:
                                newest = max(newest, st.st_mtime)
                            if (device, st.st_ino) not in prune:
                                subs.append((name, st.st_ino, sub, rel + "/" + name))
                            continue
                        if st.st_nlink > 1:
                            multi.append((st.st_ino, st.st_blocks * 512))
                        else:
                            blocks += st.st_blocks
                        if want:
                            mtime = st.st_mtime
                            use = max(mtime, st.st_atime)
                            newest = max(newest, mtime)
                            oldest = min(oldest, use)
                            if want >= FILES:
                                files.append((rel + "/" + name, st.st_blocks * 512, use))
                if todo[-1]:
                    name, ino, path, rel = todo[-1].pop()
                    try:
                        chain.enter(name, ino)
                    except (OSError, FolderChanged):
                        continue
                    here = (path, rel)
                    continue
                todo.pop()
                if not todo:
                    break
                if not chain.leave():
                    todo[-1].clear()
        finally:
            chain.close()
            self.total, self.n, self.newest, self.oldest = blocks * 512, n, newest, oldest


def _work(tops: Sequence[_Top], queue: int) -> list[_Record]:
    """Take tasks from the ``queue`` pipe until it is empty; their records."""
    out: list[_Record] = []
    size = _TASK.size
    while True:
        raw = os.read(queue, size)
        if len(raw) < size:
            return out
        out.extend(_run(tops, *_TASK.unpack(raw)))


def _heads(tops: Sequence[_Top]) -> list[tuple[int, list[str], int] | None]:
    """Each top's device, the mount points below it as the walk saw them and its own bytes
    (None: no top)."""
    return [(t.device, sorted(t.mounts), t.own) if t.fd >= 0 else None for t in tops]


def _mounted_since(folders: Sequence[Folder], heads: Sequence[Any]) -> bool:
    """True when the mount table now has a mount point below some top that its walk did not
    know of (a mount made since)."""
    for folder, head in zip(folders, heads, strict=True):
        if head is not None and not mounts_under(folder.path, fresh=True) <= set(head[1]):
            return True
    return False


def _merge(
    folders: Sequence[Folder], heads: Sequence[Any], records: Iterable[_Record]
) -> dict[Folder, Measured]:
    """The records of every process, as one Measured per folder listed (in folder order for the
    files linked more than once: the first folder has them)."""
    per: list[list[_Record]] = [[] for _ in folders]
    for rec in records:
        per[rec[0]].append(rec)
    seen: set[tuple[int, int]] = set()
    out: dict[Folder, Measured] = {}
    for i, folder in enumerate(folders):
        if heads[i] is None:
            continue
        device = heads[i][0]
        total = n = 0
        children: list[Child] = []
        files: list[tuple[str, int, float]] = []
        for _, name, is_dir, size, count, newest, oldest, multi, fl in per[i]:
            extra = 0
            for ino, blocks in multi:
                if (device, ino) not in seen:
                    seen.add((device, ino))
                    extra += blocks
            total += size + extra
            n += count
            if name is not None and folder.detail:
                # A child's own linked files count in it even when another folder has them.
                held = size + sum(dict(multi).values())
                children.append(Child(name, is_dir, held, newest, oldest, bool(multi)))
            files.extend(fl)
        own = heads[i][2]
        out[folder] = Measured(folder, device, total, n, own, tuple(children), tuple(files))
    return out


class SizeWalk:
    """Folders being measured (``start``), then their measures (``results``)."""

    def __init__(self, folders: Sequence[Folder], count: int) -> None:
        self.folders = tuple(folders)
        self._pid = 0
        self._pipes: list[int] = []
        self._done: dict[Folder, Measured] | None = None
        self._count = count
        self._native: NativeWalk | None = None
        self._known: list[list[str]] = []  # the mount points below each top, told the walker
        #: Which walk measured (once ``results`` returned): "native" (the compiled walker),
        #: "processes" (forked Python processes) or "here" (this process).
        self.backend = ""
        #: Why the compiled walker, when it was started, did not measure (debug output).
        self.native_failure: str | None = None

    @classmethod
    def start(
        cls, folders: Sequence[Folder], *, count: int | None = None, native: Path | None = None
    ) -> SizeWalk:
        """Start measuring ``folders`` with ``count`` threads or processes (default:
        ``workers()``): by the compiled walker ``native`` if given, else in Python processes,
        or in this process, later, when not on Linux or with one."""
        walk = cls(folders, workers() if count is None else count)
        if not walk.folders:
            return walk
        if native is not None:
            mount_points(fresh=True)
            walk._known = [sorted(mounts_under(f.path.rstrip("/") or "/")) for f in walk.folders]
            spec = [(f.path, f.prune, f.detail) for f in walk.folders]
            walk._native = NativeWalk.spawn(native, spec, walk._known, walk._count)
            if walk._native is not None:
                atexit.register(walk.close)
                return walk
            walk.native_failure = "the walker could not be started"
        if LINUX and walk._count > 1:
            walk._fork()
        return walk

    def _fork(self) -> None:
        pipes = [os.pipe() for _ in range(self._count)]
        pid = os.fork()
        if pid == 0:  # the first process: it lists, then forks the others
            code = 1
            try:
                for r, _ in pipes:
                    os.close(r)
                os.setpgid(0, 0)  # one group: ``close`` can end every process of the walk
                self._lead([w for _, w in pipes])
                code = 0
            finally:
                os._exit(code)
        for _, w in pipes:
            os.close(w)
        try:
            os.setpgid(pid, pid)  # as the child does: whichever runs first, ``close`` finds it
        except OSError:
            pass
        self._pid = pid
        self._pipes = [r for r, _ in pipes]
        atexit.register(self.close)

    def _lead(self, outs: list[int]) -> None:
        tops = _tops(self.folders)
        tasks = _tasks(tops)
        qr, qw = os.pipe()
        os.write(qw, b"".join(_TASK.pack(*t) for t in tasks))  # < 64 KiB: never blocks
        os.close(qw)
        mine = outs[0]
        for k in range(1, len(outs)):
            if os.fork() == 0:
                code = 1
                try:
                    for j, w in enumerate(outs):
                        if j == 0 or j > k:  # the lead's and the later ones' (closed: 1..k-1)
                            os.close(w)
                    _send(outs[k], [], _work(tops, qr))
                    code = 0
                finally:
                    os._exit(code)
            os.close(outs[k])
        _send(mine, _heads(tops), _work(tops, qr))
        os.close(mine)
        for _ in range(1, len(outs)):
            try:
                os.wait()
            except ChildProcessError:
                break

    def results(self) -> dict[Folder, Measured]:
        """Each folder's measure (a folder missing, or no folder, has none); waits for it.

        Measured again here, in this process, if a process of the walk failed, or if a mount
        was made below a top while it walked (the walk may have gone into it)."""
        if self._done is None:
            got = None
            if self._native is not None:
                got, self.backend = self._from_native(), "native"
            elif self._pipes:
                got, self.backend = self._collect(), "processes"
            if got is None:
                got, self.backend = self._here(), "here"
            self._done = got
        return self._done

    def _from_native(self) -> dict[Folder, Measured] | None:
        walker, self._native = self._native, None
        assert walker is not None
        atexit.unregister(self.close)
        raw = walker.results()
        if raw is None:
            self.native_failure = walker.failure
            return None
        heads = [
            (r[0], known, r[3]) if r is not None else None
            for r, known in zip(raw, self._known, strict=True)
        ]
        if _mounted_since(self.folders, heads):
            self.native_failure = "a mount was made below a folder while it was measured"
            return None
        return {f: _measured(f, r) for f, r in zip(self.folders, raw, strict=True) if r}

    def _here(self) -> dict[Folder, Measured]:
        while True:
            tops = _tops(self.folders)
            try:
                records = [r for t in _tasks(tops) for r in _run(tops, *t)]
                heads = _heads(tops)
            finally:
                for t in tops:
                    if t.fd >= 0:
                        os.close(t.fd)
            if not _mounted_since(self.folders, heads):
                return _merge(self.folders, heads, records)

    def _collect(self) -> dict[Folder, Measured] | None:
        raw = _receive(self._pipes)
        self._reap()
        if not all(raw):
            return None  # a process ended without its results
        heads: list[Any] = []
        records: list[_Record] = []
        for k, data in enumerate(raw):
            h, recs = marshal.loads(data)
            if k == 0:
                heads = h
            records.extend(recs)
        if _mounted_since(self.folders, heads):
            return None
        return _merge(self.folders, heads, records)

    def _reap(self) -> None:
        for fd in self._pipes:
            os.close(fd)
        self._pipes = []
        if self._pid:
            os.waitpid(self._pid, 0)
            self._pid = 0
        atexit.unregister(self.close)

    def close(self) -> None:
        """End the walk's processes if their results were not taken (an error, an exit)."""
        if self._native is not None:
            self._native.close()
            self._native = None
            atexit.unregister(self.close)
        if self._pid:
            try:
                os.killpg(self._pid, signal.SIGKILL)
            except OSError:
                pass
            self._reap()


def _measured(folder: Folder, raw: Raw) -> Measured:
    """A folder's measure from the compiled walker's numbers."""
    device, total, entries, own, children, files = raw
    kids = tuple(Child(*c) for c in children)
    return Measured(folder, device, total, entries, own, kids, tuple(files))


def _send(fd: int, heads: list[Any], records: list[_Record]) -> None:
    data = marshal.dumps((heads, records))
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _receive(fds: list[int]) -> list[bytes]:
    """Everything each pipe holds until its end, read side by side (a writer blocked on a full
    pipe must not wait for another one to be read first)."""
    parts: dict[int, list[bytes]] = {fd: [] for fd in fds}
    poll = select.poll()
    for fd in fds:
        poll.register(fd, select.POLLIN | select.POLLHUP)
    left = set(fds)
    while left:
        for fd, _ in poll.poll():
            chunk = os.read(fd, 1 << 20)
            if chunk:
                parts[fd].append(chunk)
            else:
                poll.unregister(fd)
                left.discard(fd)
    return [b"".join(parts[fd]) for fd in fds]
