"""Deleting one Hugging Face hub revision through huggingface_hub's cache API, after our checks.

huggingface_hub knows its cache best: which blobs another revision still uses, when the whole
repository folder goes with its last revision, how its shared blob store is collected. So the
deletion is its own: ``scan_cache_dir(root).delete_revisions(commit)`` gives a
``DeleteCacheStrategy``, whose ``execute()`` removes the files. Before that, right before it,
every path the strategy names is checked here as the deleter checks any file:

- it lies in the revision's own repository folder (its snapshot, its refs, the repository's
  blobs; the whole folder only with its last revision), below the tree root, and the cache
  huggingface_hub scanned is the tree root itself (the same folder, not another reached
  through a symlink);
- it is an entry of the unit the plan chose, unchanged since the scan (same inode, size,
  mtime, owner), and so is every entry below a folder it names: nothing new, nothing moved.
  Folders are opened one component at a time without following symlinks, never on another
  filesystem or mount;
- no file of the revision, the blobs its links lead to included (those another revision keeps
  too), is open or memory-mapped by any process: each is opened and, on Linux, held under a
  write lease until the strategy has run (a late opener waits, then finds it gone); elsewhere
  the open-file list is read again right before;
- no download into the repository holds one of huggingface_hub's lock files
  (``.locks/<repository>/*.lock``).

The pins and the ledger's record come before, from ``janitor.cleanup.apply``.
What remains between the last check and the strategy's own removals (milliseconds) is a file
made in the repository meanwhile by something that takes no lock: huggingface_hub's removal of
a whole repository folder would take it too.
"""

from __future__ import annotations

import os
import stat
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from janitor.cleanup.scan import Entry
from janitor.config.unit_rules import HF_MISSING
from janitor.host.fdwalk import DIR_FLAGS
from janitor.host.inuse import lock_held

if TYPE_CHECKING:
    from janitor.cleanup.units import Unit

__all__ = ["Checks", "Partial", "Refused", "remove_revision"]

#: One revision at a time: each strategy comes from a scan that must not see another half done.
_ONE_AT_A_TIME = threading.Lock()


class Refused(Exception):
    """The revision must be left alone, nothing of it removed; the message says why."""


class Partial(Refused):
    """huggingface_hub's removal stopped part way; what went is counted."""

    def __init__(self, files: int, size: int, why: str) -> None:
        super().__init__(why)
        self.files = files
        self.size = size


@dataclass(frozen=True, slots=True)
class Checks:
    """What the deleter lends for one tree: its opened root and its per-file checks (each
    raises the deleter's own skip, which passes through here unchanged)."""

    root: str
    root_fd: int
    device: int
    root_ino: int
    #: An fd of a folder below the root ("" the root), opened without following symlinks and
    #: never on another filesystem; the deleter keeps it (never closed here).
    folder: Callable[[str], int]
    #: Open a regular file of the scan and check it (unchanged, ours, open nowhere else); the
    #: fd holds a write lease where the kernel gives one, until ``release``.
    hold: Callable[[int, str, Entry], int]
    #: lstat an entry and check it is the one scanned, unchanged and ours.
    verify: Callable[[int, str, Entry], os.stat_result]
    release: Callable[[int], None]


def remove_revision(unit: Unit, checks: Checks) -> tuple[int, int]:
    """Delete one revision (a unit of ``units = "hf_revision"``): (files removed, bytes)."""
    repo, _, commit = unit.key.partition("/snapshots/")
    if not repo or "/" in repo or not commit or "/" in commit:
        raise Refused("not a revision of a Hugging Face hub repository")
    known = {e.rel: e for e in unit.entries}
    with _ONE_AT_A_TIME:
        _downloading(checks, repo)
        strategy, targets = _strategy(checks, repo, commit)
        held: list[int] = []
        try:
            checked = _check_targets(checks, targets, known, held)
            # The files that stay (blobs another revision uses) are the revision's too.
            for e in unit.entries:
                if stat.S_ISREG(e.mode) and e.rel not in checked:
                    _hold(checks, e, held)
            try:
                strategy.execute()
            except Exception as exc:  # OSError, or a failure of its own: count what went
                files, size = _gone(unit.entries)
                text = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
                why = f"huggingface_hub stopped part way: {text}"
                if files or size:
                    raise Partial(files, size, why) from None
                raise Refused(why) from None
        finally:
            for fd in held:
                checks.release(fd)
    files, size = _gone(unit.entries)
    if not files and not size:
        raise Refused("huggingface_hub removed nothing of it")
    return files, size


def _strategy(checks: Checks, repo: str, commit: str) -> tuple[Any, list[str]]:
    """huggingface_hub's plan to delete the revision, and every path it names, relative to the
    root (Refused when one is anything but this revision's)."""
    try:
        from huggingface_hub import scan_cache_dir
    except ImportError as exc:
        if exc.name == "huggingface_hub":
            raise Refused(f'units = "hf_revision" {HF_MISSING}') from None
        raise Refused(f"huggingface_hub cannot be imported: {exc}") from None
    real = os.path.realpath(checks.root)
    try:
        st = os.stat(real)
    except OSError:
        raise Refused("tree root gone since the scan") from None
    if (st.st_dev, st.st_ino) != (checks.device, checks.root_ino):
        raise Refused("tree root was replaced since the scan")
    try:
        info = scan_cache_dir(real)
    except Exception as exc:  # huggingface_hub's own kinds (CacheNotFound ...): never delete
        raise Refused(f"huggingface_hub cannot scan the cache: {exc}") from None
    listed = [
        rev
        for r in info.repos
        if os.path.basename(os.fspath(r.repo_path)) == repo
        for rev in r.revisions
        if rev.commit_hash == commit
    ]
    if not listed:
        raise Refused(
            "huggingface_hub does not list this revision now (a corrupted repository? "
            "`hf cache verify` tells)"
        )
    strategy = info.delete_revisions(commit)
    allowed: dict[str, Callable[[str], bool]] = {
        "repos": lambda rel: rel == repo,
        "snapshots": lambda rel: rel == f"{repo}/snapshots/{commit}",
        "refs": lambda rel: rel.startswith(f"{repo}/refs/"),
        # Older huggingface_hub (0.20) lists a file copied into a snapshot as its own blob.
        "blobs": lambda rel: rel.startswith((f"{repo}/blobs/", f"{repo}/snapshots/{commit}/")),
        "files": lambda rel: False,  # single snapshot files: never part of a revision's plan
    }
    targets: list[str] = []
    for kind, fits in allowed.items():
        for path in getattr(strategy, kind, ()):
            full = os.path.abspath(os.fspath(path))
            rel = full[len(real) + 1 :] if full.startswith(real + "/") else None
            if rel is None or not fits(rel):
                raise Refused(
                    f"huggingface_hub would delete {full}, which is not this revision's "
                    "(outside its repository folder, or outside the tree)"
                )
            targets.append(rel)
    return strategy, targets


def _check_targets(
    checks: Checks, targets: Iterable[str], known: dict[str, Entry], held: list[int]
) -> set[str]:
    """Check every path the strategy removes, and every entry below its folders, against the
    scan; the regular files are held (``held``). Returns the paths checked."""
    checked: set[str] = set()
    todo = list(targets)
    while todo:
        rel = todo.pop()
        if rel in checked:
            continue
        checked.add(rel)
        e = known.get(rel)
        if e is None:  # the scan leaves out what another filesystem holds, mounts too
            raise Refused(f"{rel} is new since the scan, or another filesystem mounted there")
        if stat.S_ISREG(e.mode):
            _hold(checks, e, held)
            continue
        parent, _, name = rel.rpartition("/")
        st = checks.verify(checks.folder(parent), name, e)
        if stat.S_ISDIR(e.mode) != stat.S_ISDIR(st.st_mode):
            raise Refused(f"{rel} was replaced since the scan")
        if stat.S_ISDIR(st.st_mode):
            fd = checks.folder(rel)
            if os.fstat(fd).st_ino != e.ino:
                raise Refused(f"{rel} was replaced since the scan")
            todo += [f"{rel}/{n}" for n in os.listdir(fd)]
    return checked


def _hold(checks: Checks, e: Entry, held: list[int]) -> None:
    parent, _, name = e.rel.rpartition("/")
    held.append(checks.hold(checks.folder(parent), name, e))


def _downloading(checks: Checks, repo: str) -> None:
    """Refused while huggingface_hub holds a lock file of the repository (a download)."""
    try:
        locks = os.open(".locks", DIR_FLAGS, dir_fd=checks.root_fd)
    except OSError:
        return  # none: nothing was ever downloaded with a lock, or none is going on
    try:
        try:
            mine = os.open(repo, DIR_FLAGS, dir_fd=locks)
        except OSError:
            return
        try:
            if any(lock_held(name, mine) for name in os.listdir(mine)):
                raise Refused("locked: huggingface_hub is downloading into this repository")
        finally:
            os.close(mine)
    finally:
        os.close(locks)


def _gone(entries: Iterable[Entry]) -> tuple[int, int]:
    """Files and allocated bytes of the entries no longer there (or replaced by others)."""
    files = size = 0
    for e in entries:
        try:
            st = os.lstat(e.path)
            if (st.st_dev, st.st_ino) == (e.dev, e.ino):
                continue
        except FileNotFoundError:
            pass
        except OSError:
            continue
        size += e.size
        files += not stat.S_ISDIR(e.mode)
    return files, size
