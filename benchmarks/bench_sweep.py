#!/usr/bin/env python3
"""Scan, delete and planner benchmark for space-janitor: prints one table, exits 0 (not a test).

Measures, in one run, on trees generated under a fresh folder (``--where``, default under /tmp):

* scan: ``janitor.cleanup.scan.scan(root)`` beside ``du -s root`` on the same generated tree of
  ``--files`` files (read only, so both read the very same tree; the order alternates);
* delete: ``janitor.cleanup.apply.apply(plan, ledger=...)`` on a tree of ``--delete`` files beside
  ``find root -type f -delete`` on an identical tree (same names, sizes and contents). The plan
  comes from a cache-tree policy whose quota is 1 byte, low watermark 0 and min_age 0, so every
  file is chosen; only ``apply`` is compared with find, the scan + group + open-files + plan
  phase is reported on its own row. Leases are on (``prepare_leases()``); one extra run with
  leases off shows what they cost;
* planner: ``janitor.cleanup.kinds.group_units`` on an in-memory snapshot of
  ``--planner-entries`` files (no disk), then ``janitor.cleanup.plan.plan_tree`` over the
  units with a quota that makes it choose about half of them, with a few pins, reservations,
  held locks and open files so every check in the classifier runs.

Targets (issue 3, item 10): full scan <= 1.5x du's wall time; deleting 100,000 files <= 1.3x
find -delete; grouping + planning under 1 s for 1,000,000 entries.

Both sides start from the same cache state: nothing is dropped from the page cache; each tree
is written, ``sync``'ed, then read once with ``du -s`` before anything is timed, and ``sync``
runs (untimed) before every timed delete so neither side pays for the other's writeback. Times
are ``time.perf_counter`` around ``subprocess.run`` for du/find (their exec is included) and
around the in-process janitor calls. Each figure is the median of ``--repeat`` runs. The table
also gives CPU seconds (user + system: ``time.process_time`` for the janitor, the child's rusage
for du/find) and their ratio, which other load on the machine disturbs far less than wall time.

    python benchmarks/bench_sweep.py                      # 200k scan, 100k delete, 1M planner
    python benchmarks/bench_sweep.py --files 1000000      # the optional 1M-file scan
    sudo python benchmarks/bench_sweep.py --tmpfs         # on a tmpfs it mounts: no disk noise
    python benchmarks/bench_sweep.py --profile            # also cProfile the janitor side

Nothing outside the fresh work folder is written, except the tmpfs mount point (a fresh folder,
unmounted and removed at the end).
"""

from __future__ import annotations

import argparse
import cProfile
import hashlib
import io
import json
import os
import platform
import pstats
import random
import resource
import shutil
import stat
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

from rich.console import Console
from rich.table import Table

import janitor.host.inuse as inuse
from janitor.cleanup import apply as applying
from janitor.cleanup.apply import apply
from janitor.cleanup.kinds import group_units
from janitor.cleanup.plan import Plan, Protection, plan_tree
from janitor.cleanup.scan import Entry, Snapshot, scan
from janitor.cleanup.units import Unit
from janitor.config.policy import SizeSpec, TreePolicy
from janitor.host.inuse import open_inodes, prepare_leases
from janitor.host.space import volume_stats
from janitor.ledger.db import Ledger

T = TypeVar("T")

TARGET_SCAN_RATIO = 1.5
TARGET_DELETE_RATIO = 1.3
TARGET_PLANNER_S = 1.0

# The default policy's media cache (policies/batchalign3.toml): {fp}.wav, {fp}.tmp.wav and
# {fp}.wav.lock make one unit, whose lock file marks it in use.
MEDIA_GROUP = r"^(?P<key>[^/]+?)(?:\.tmp)?\.wav(?:\.lock)?$"
MEDIA_LOCK = "{key}.wav.lock"

console = Console(highlight=False, width=None if sys.stdout.isatty() else 150)


# -- trees -------------------------------------------------------------------------------------


_NAMES: dict[int, list[str]] = {}


def file_names(n: int) -> list[str]:
    """``n`` media-cache-like names (a hex fingerprint + ``.wav``), the same on every call."""
    names = _NAMES.get(n)
    if names is None:
        names = [
            hashlib.blake2b(i.to_bytes(8, "little"), digest_size=12).hexdigest() + ".wav"
            for i in range(n)
        ]
        _NAMES.clear()
        _NAMES[n] = names
    return names


_PAYLOAD = bytes(random.Random(7).randrange(256) for _ in range(1024))


def make_tree(root: Path, n: int, per_dir: int) -> None:
    """``n`` files of 200-599 bytes, ``per_dir`` to a folder ``dNNNN``; deterministic layout."""
    names = file_names(n)
    os.mkdir(root)
    dflags = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
    fflags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC
    root_fd = os.open(root, dflags)
    try:
        for d in range((n + per_dir - 1) // per_dir):
            dname = f"d{d:04d}"
            os.mkdir(dname, dir_fd=root_fd)
            dfd = os.open(dname, dflags, dir_fd=root_fd)
            try:
                for i in range(d * per_dir, min(n, (d + 1) * per_dir)):
                    fd = os.open(names[i], fflags, 0o644, dir_fd=dfd)
                    os.write(fd, _PAYLOAD[: 200 + (i * 37) % 400])
                    os.close(fd)
            finally:
                os.close(dfd)
    finally:
        os.close(root_fd)


def count_files(root: Path) -> int:
    """Regular files left under ``root``."""
    return sum(len(files) for _, _, files in os.walk(root))


def remove_tree(root: Path) -> None:
    if root.exists():
        subprocess.run(["rm", "-rf", "--one-file-system", str(root)], check=True)


#: (wall seconds, CPU seconds: user + system)
Sample = tuple[float, float]


def _children_cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def run_cmd(argv: list[str]) -> Sample:
    """Wall and CPU seconds of one command (exec included); raises if it fails."""
    c0 = _children_cpu()
    t0 = time.perf_counter()
    proc = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    dt = time.perf_counter() - t0
    cpu = _children_cpu() - c0
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed: {proc.stderr.decode(errors='replace')}")
    return dt, cpu


def timed(fn: Callable[[], T]) -> tuple[T, Sample]:
    """``fn()``'s result, and the wall and CPU (this process) seconds it took."""
    c0 = time.process_time()
    t0 = time.perf_counter()
    out = fn()
    dt = time.perf_counter() - t0
    return out, (dt, time.process_time() - c0)


def warm(*roots: Path) -> None:
    """Write back what generation dirtied, then read each tree once the same way (du -s)."""
    os.sync()
    for r in roots:
        run_cmd(["du", "-s", str(r)])


# -- environment -------------------------------------------------------------------------------


def fs_type(path: Path) -> tuple[str, str, str]:
    """(type from /proc/mounts, mount point, type from ``stat -f``) of the volume holding path."""
    real = os.path.realpath(path)
    best = ("?", "?")
    best_len = -1
    try:
        with open("/proc/mounts", encoding="utf-8", errors="replace") as fh:
            for line in fh:
                parts = line.split()
                if len(parts) < 3:
                    continue
                mnt = parts[1].replace("\\040", " ")
                inside = real == mnt or real.startswith(mnt.rstrip("/") + "/")
                if inside and len(mnt) >= best_len:  # the last of equal mounts wins
                    best, best_len = (parts[2], mnt), len(mnt)
    except OSError:
        pass
    try:
        out = subprocess.run(
            ["stat", "-f", "-c", "%T", real], capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        out = "?"
    return best[0], best[1], out


def tool_version(argv: list[str]) -> str:
    try:
        out = subprocess.run(argv, capture_output=True, text=True).stdout
    except OSError:
        return "?"
    return out.splitlines()[0] if out else "?"


def loadavg() -> str:
    try:
        a, b, c = os.getloadavg()
    except OSError:
        return "?"
    return f"{a:.2f} {b:.2f} {c:.2f}"


def cpu_ticks() -> tuple[int, int]:
    """(busy, total) jiffies of all CPUs from /proc/stat (0, 0 where it does not exist)."""
    try:
        with open("/proc/stat", encoding="ascii") as fh:
            fields = [int(x) for x in fh.readline().split()[1:]]
    except (OSError, ValueError):
        return 0, 0
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
    return sum(fields) - idle, sum(fields)


def cpu_busy(start: tuple[int, int]) -> float | None:
    """Share of all CPUs busy (any process) since ``start``, in percent."""
    busy, total = cpu_ticks()
    if total <= start[1]:
        return None
    return 100.0 * (busy - start[0]) / (total - start[1])


# -- results -----------------------------------------------------------------------------------


@dataclass
class Row:
    name: str
    janitor: list[Sample]
    baseline: list[Sample] = field(default_factory=list)
    target: str = ""
    limit: float | None = None  # ratio limit (with a baseline) or seconds (without)
    note: str = ""

    @property
    def j(self) -> float:
        return statistics.median(s[0] for s in self.janitor)

    @property
    def jc(self) -> float:
        return statistics.median(s[1] for s in self.janitor)

    @property
    def b(self) -> float | None:
        return statistics.median(s[0] for s in self.baseline) if self.baseline else None

    @property
    def bc(self) -> float | None:
        return statistics.median(s[1] for s in self.baseline) if self.baseline else None

    @property
    def ratio(self) -> float | None:
        b = self.b
        return self.j / b if b else None

    @property
    def cpu_ratio(self) -> float | None:
        b = self.bc
        return self.jc / b if b else None

    @property
    def verdict(self) -> str:
        if self.limit is None:
            return "info"
        value = self.ratio if self.baseline else self.j
        if value is None:
            return "?"
        return "PASS" if value <= self.limit else "MISS"


def fmt_s(v: float | None) -> str:
    if v is None:
        return "—"
    return f"{v * 1000:.0f} ms" if v < 10 else f"{v:.1f} s"


# -- measurements ------------------------------------------------------------------------------


def bench_scan(work: Path, n: int, per_dir: int, repeat: int, profile: bool) -> list[Row]:
    root = work / "scan"
    console.print(f"[dim]scan: generating {n:,} files ...[/]")
    t0 = time.perf_counter()
    make_tree(root, n, per_dir)
    console.print(f"[dim]  generated in {time.perf_counter() - t0:.1f} s[/]")
    warm(root)
    scan(root)  # both sides now have every inode in cache
    jan: list[Sample] = []
    du: list[Sample] = []
    entries = 0
    for k in range(repeat):
        order = ("du", "janitor") if k % 2 == 0 else ("janitor", "du")
        for who in order:
            if who == "du":
                du.append(run_cmd(["du", "-s", str(root)]))
            else:
                snap, sample = timed(lambda: scan(root))
                jan.append(sample)
                entries = len(snap.entries)
                del snap
    if entries != n + (n + per_dir - 1) // per_dir:
        raise RuntimeError(f"scan saw {entries} entries, expected {n} files and their folders")
    if profile:
        print_profile(f"scan of {n:,} files", lambda: scan(root))
    remove_tree(root)
    return [
        Row(
            f"scan {n:,} files",
            jan,
            du,
            f"<= {TARGET_SCAN_RATIO}x du -s",
            TARGET_SCAN_RATIO,
            f"{entries:,} entries (files and folders); same tree for both, order alternated",
        )
    ]


@dataclass
class Prepared:
    plan: Plan
    open_set: frozenset[tuple[int, int]]
    phases: dict[str, Sample]


def delete_policy(root: Path) -> TreePolicy:
    """A cache tree where everything is over quota and nothing is too young."""
    return TreePolicy(
        name="bench",
        role="cache",
        path=root,
        quota=SizeSpec(nbytes=1),
        low_watermark=SizeSpec(nbytes=0),
        min_age=0.0,
    )


def prepare(root: Path, n: int) -> Prepared:
    """The sweep's phases before the deletes: scan, group, what is open, plan."""
    tree = delete_policy(root)
    phases: dict[str, Sample] = {}
    snap, phases["scan"] = timed(lambda: scan(root))
    units, phases["group"] = timed(lambda: group_units(snap, tree))
    open_set, phases["open files"] = timed(lambda: open_inodes({snap.device}))
    total = volume_stats(snap.root).total
    plan, phases["plan"] = timed(
        lambda: plan_tree(
            snap,
            units,
            tree,
            volume_total=total,
            protection=Protection(open=open_set),
            now=time.time(),
        )
    )
    if len(plan.items) != n:
        raise RuntimeError(f"plan chose {len(plan.items)} units, expected {n}")
    return Prepared(plan, open_set, phases)


def timed_apply(prep: Prepared, state: Path) -> tuple[Sample, int]:
    """Wall/CPU of apply() alone, and files it removed (a fresh ledger, opened beforehand)."""
    if state.exists():
        shutil.rmtree(state)
    state.mkdir()
    ledger = Ledger(state / "ledger.sqlite3")
    ledger.last_log_id()  # schema created and connection open, as in a running sweep
    try:
        report, dt = timed(lambda: apply(prep.plan, ledger=ledger, open_set=prep.open_set))
    finally:
        ledger.close()
    skipped = [o.skipped for o in report.outcomes if not o.deleted]
    if skipped:
        raise RuntimeError(f"apply skipped {len(skipped)} units, e.g. {skipped[0]!r}")
    return dt, sum(o.files for o in report.outcomes)


def bench_delete(
    work: Path,
    n: int,
    per_dir: int,
    repeat: int,
    leases_off_run: bool,
    profile: bool,
    one_thread_run: bool = True,
) -> list[Row]:
    jan: list[Sample] = []
    find: list[Sample] = []
    phases: dict[str, list[Sample]] = {}
    leases = prepare_leases()
    for k in range(repeat):
        a, b = work / f"del-j{k}", work / f"del-f{k}"
        console.print(f"[dim]delete run {k + 1}/{repeat}: generating 2 x {n:,} files ...[/]")
        make_tree(a, n, per_dir)
        make_tree(b, n, per_dir)
        warm(a, b)
        prep = prepare(a, n)
        for name, v in prep.phases.items():
            phases.setdefault(name, []).append(v)
        order = ("find", "janitor") if k % 2 == 0 else ("janitor", "find")
        for who in order:
            os.sync()
            if who == "find":
                find.append(run_cmd(["find", str(b), "-type", "f", "-delete"]))
                if count_files(b):
                    raise RuntimeError("find -delete left files behind")
            else:
                dt, files = timed_apply(prep, work / "state")
                if files != n or count_files(a):
                    raise RuntimeError(f"apply removed {files} of {n} files")
                jan.append(dt)
        del prep
        remove_tree(a)
        remove_tree(b)
    prep_total = [
        (sum(v[i][0] for v in phases.values()), sum(v[i][1] for v in phases.values()))
        for i in range(repeat)
    ]
    rows = [
        Row(
            f"delete {n:,} files: apply, leases {'on' if leases else 'UNAVAILABLE'}",
            jan,
            find,
            f"<= {TARGET_DELETE_RATIO}x find -delete",
            TARGET_DELETE_RATIO,
        )
    ]

    def one_run(label: str, module: object, attr: str, value: object) -> None:
        """One more delete run with ``module.attr`` set to ``value``, as an info row."""
        root = work / f"del-{attr.strip('_').lower()}"
        console.print(f"[dim]delete, {label}: generating {n:,} files ...[/]")
        make_tree(root, n, per_dir)
        warm(root)
        prep = prepare(root, n)
        os.sync()
        saved = getattr(module, attr)
        setattr(module, attr, value)
        try:
            dt, _ = timed_apply(prep, work / "state")
        finally:
            setattr(module, attr, saved)
        del prep
        remove_tree(root)
        rows.append(Row(f"delete {n:,} files: apply, {label}", [dt], find, "info", None, "1 run"))

    if leases_off_run and leases:
        one_run("leases off", inuse.probe, "lease_ok", False)
    if one_thread_run:
        # The executor's second thread pays only where deletes wait on the disk: this row says
        # what one thread alone takes here.
        one_run("one thread", applying, "_THREADS", 1)
    detail = ", ".join(
        f"{k} {fmt_s(statistics.median(s[0] for s in v))}" for k, v in phases.items()
    )
    rows.append(Row(f"sweep prep, {n:,} files", prep_total, [], "info", note=detail))
    rows.append(
        Row(
            f"whole sweep of {n:,} files (prep + apply)",
            [(p[0] + j[0], p[1] + j[1]) for p, j in zip(prep_total, jan, strict=True)],
            find,
            "info",
        )
    )
    if profile:
        root = work / "del-profile"
        make_tree(root, n, per_dir)
        warm(root)
        prep = prepare(root, n)
        os.sync()
        print_profile(f"apply() deleting {n:,} files", lambda: timed_apply(prep, work / "state"))
        del prep
        remove_tree(root)
    return rows


def planner_inputs(
    n: int, per_dir: int, *, locks: bool = False
) -> tuple[Snapshot, TreePolicy, TreePolicy, Protection, float]:
    """A snapshot of ``n`` media-cache files (plus their folders) built in memory, no disk.

    With ``locks``, every second file is the ``.wav.lock`` of the ``.wav`` before it, as in a
    real media cache: ``n`` files make ``n / 2`` units of two files.
    """
    rng = random.Random(1)
    root = "/bench/media_cache"
    now = time.time()
    dev = 2049
    names = file_names(n)
    dir_mode = stat.S_IFDIR | 0o755
    file_mode = stat.S_IFREG | 0o644
    uid = os.getuid()
    entries: list[Entry] = []
    usage = 0
    for d in range((n + per_dir - 1) // per_dir):
        folder = f"d{d:04d}"
        entries.append(
            Entry(
                f"{root}/{folder}",
                folder,
                4096,
                10_000_000 + d,
                dev,
                now,
                now,
                now,
                uid,
                dir_mode,
                4096,
            )
        )
        for i in range(d * per_dir, min(n, (d + 1) * per_dir)):
            rel = f"{folder}/{names[i]}"
            if locks and i % 2:  # the lock file of the entry before
                rel = f"{folder}/{names[i - 1]}.lock"
            mtime = now - 3600 - rng.random() * 30 * 86400
            atime = mtime + rng.random() * 3600
            size = 4096 * (1 + i % 7)
            usage += size
            entries.append(
                Entry(
                    f"{root}/{rel}",
                    rel,
                    size,
                    20_000_000 + i,
                    dev,
                    mtime,
                    atime,
                    mtime,
                    uid,
                    file_mode,
                    size - 100,
                )
            )
    snap = Snapshot(root, dev, 1, now, tuple(entries))
    # Quota below usage, low watermark at half of it: the planner chooses about half the units.
    common: dict[str, Any] = {
        "name": "media_cache",
        "role": "cache",
        "path": Path(root),
        "quota": SizeSpec(nbytes=usage * 3 // 4),
        "low_watermark": SizeSpec(nbytes=usage // 2),
        "min_age": 600.0,
    }
    plain = TreePolicy(**common)
    media = TreePolicy(**common, group=MEDIA_GROUP, lock=MEDIA_LOCK)
    # A few of each protection, so every branch of the classifier runs, as in a real sweep
    # (open files on the cache's volume are almost never none: the ledger itself is one).
    picks = [rng.randrange(n) & ~1 if locks else rng.randrange(n) for _ in range(40)]
    prot = Protection(
        pinned=frozenset(f"{root}/d{i // per_dir:04d}/{names[i]}" for i in picks[:10]),
        reserved=frozenset(f"{root}/d{i // per_dir:04d}/{names[i]}" for i in picks[10:20]),
        locked=frozenset(
            f"{root}/d{i // per_dir:04d}/{names[i].removesuffix('.wav')}.wav.lock"
            for i in picks[20:30]
        ),
        open=frozenset((dev, 20_000_000 + i) for i in picks[30:40]),
    )
    return snap, plain, media, prot, now


def bench_planner(n: int, per_dir: int, repeat: int, profile: bool) -> list[Row]:
    console.print(f"[dim]planner: building {n:,} entries in memory ...[/]")
    snap, plain, media, prot, now = planner_inputs(n, per_dir)
    total = 1 << 50
    g_plain: list[Sample] = []
    g_media: list[Sample] = []
    p_media: list[Sample] = []
    chosen = 0
    kept: dict[str, int] = {}
    units: Sequence[Unit] = ()
    for _ in range(repeat):
        units_plain, sample = timed(lambda: group_units(snap, plain))
        g_plain.append(sample)
        del units_plain
        units = ()
        units, sample = timed(lambda: group_units(snap, media))
        g_media.append(sample)
        plan, sample = timed(
            partial(plan_tree, snap, units, media, volume_total=total, protection=prot, now=now)
        )
        p_media.append(sample)
        chosen = len(plan.items)
        kept = dict(plan.trees[0].kept)
        del plan
    both = [(g[0] + p[0], g[1] + p[1]) for g, p in zip(g_media, p_media, strict=True)]
    units = ()  # let the table go before the next layout is built
    # A real media cache: each .wav with its .wav.lock, two files to a unit.
    snap2, _, media2, prot2, now2 = planner_inputs(n, per_dir, locks=True)
    pairs: list[Sample] = []
    pair_units = 0
    for _ in range(repeat):
        plan, sample = timed(
            lambda: plan_tree(
                snap2,
                group_units(snap2, media2),
                media2,
                volume_total=total,
                protection=prot2,
                now=now2,
            )
        )
        pairs.append(sample)
        pair_units = plan.trees[0].units
        del plan
    units = group_units(snap, media)
    if profile:
        print_profile(
            f"group_units, {n:,} entries (media-cache policy)", lambda: group_units(snap, media)
        )
        print_profile(
            f"plan_tree, {len(units):,} units",
            lambda: plan_tree(snap, units, media, volume_total=total, protection=prot, now=now),
        )
    share = f"{chosen:,} of {len(units):,} units chosen; kept {kept}"
    return [
        Row(f"planner: group_units, {n:,} entries, plain", g_plain, [], "info"),
        Row(
            f"planner: group_units, {n:,} entries, media",
            g_media,
            [],
            "info",
            note="media-cache policy: group regex + lock template, as policies/batchalign3.toml",
        ),
        Row(f"planner: plan_tree, {len(units):,} units", p_media, [], "info", note=share),
        Row(
            f"planner: group + plan, {n:,} entries",
            both,
            [],
            f"< {TARGET_PLANNER_S:g} s",
            TARGET_PLANNER_S,
        ),
        Row(
            f"planner: group + plan, {n:,} entries, .wav + .wav.lock pairs",
            pairs,
            [],
            "info",
            note=f"{pair_units:,} units of two files each, as a real media cache holds them",
        ),
    ]


def print_profile(title: str, fn: Callable[[], object], top: int = 18) -> None:
    prof = cProfile.Profile()
    prof.enable()
    fn()
    prof.disable()
    buf = io.StringIO()
    pstats.Stats(prof, stream=buf).sort_stats("tottime").print_stats(top)
    text = buf.getvalue()
    start = text.find("   ncalls")
    console.rule(f"cProfile: {title} (sorted by tottime)")
    console.print(text[start:].rstrip() if start >= 0 else text, markup=False)


# -- main --------------------------------------------------------------------------------------


def mount_tmpfs(parent: Path, size: int) -> Path:
    if os.geteuid() != 0:
        raise SystemExit("--tmpfs needs root (it mounts a tmpfs of its own)")
    point = Path(tempfile.mkdtemp(prefix="janitor-bench-tmpfs-", dir=parent))
    proc = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", str(point)],
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:
        point.rmdir()
        raise SystemExit(f"mounting a tmpfs failed: {proc.stderr.strip()}")
    return point


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--files", type=int, default=200_000, help="files in the scanned tree")
    ap.add_argument("--delete", type=int, default=100_000, help="files in each deleted tree")
    ap.add_argument(
        "--planner-entries",
        type=int,
        default=1_000_000,
        help="entries of the in-memory snapshot for the planner (no disk)",
    )
    ap.add_argument("--per-dir", type=int, default=1000, help="files per folder")
    ap.add_argument(
        "--where",
        type=Path,
        default=None,
        help="parent of the fresh work folder (default: the temp dir)",
    )
    ap.add_argument(
        "--tmpfs",
        action="store_true",
        help="mount a tmpfs under --where and work there (root only)",
    )
    ap.add_argument("--repeat", type=int, default=3, help="runs per figure; the median is shown")
    ap.add_argument(
        "--no-leases-off", action="store_true", help="skip the extra delete run with leases off"
    )
    ap.add_argument(
        "--no-one-thread", action="store_true", help="skip the extra delete run on one thread"
    )
    ap.add_argument(
        "--only",
        choices=("scan", "delete", "planner"),
        action="append",
        help="run only these parts (repeatable)",
    )
    ap.add_argument(
        "--profile",
        action="store_true",
        help="also cProfile the janitor side of each part (top by tottime)",
    )
    ap.add_argument("--json", type=Path, default=None, help="also write the results here")
    args = ap.parse_args(argv)
    parts = set(args.only or ("scan", "delete", "planner"))
    if min(args.files, args.delete, args.planner_entries, args.per_dir, args.repeat) < 1:
        ap.error("counts must be positive")

    parent = (args.where or Path(tempfile.gettempdir())).resolve()
    parent.mkdir(parents=True, exist_ok=True)
    mounted: Path | None = None
    if args.tmpfs:
        need = (max(args.files, 2 * args.delete) + 10_000) * 4096 * 2 + (256 << 20)
        mounted = mount_tmpfs(parent, need)
        work = Path(tempfile.mkdtemp(prefix="janitor-bench-", dir=mounted))
    else:
        work = Path(tempfile.mkdtemp(prefix="janitor-bench-", dir=parent))

    fs, mnt, fs_stat = fs_type(work)
    affinity = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else "?"
    leases = prepare_leases()
    env: dict[str, Any] = {
        "nproc": os.cpu_count(),
        "usable_cpus": affinity,
        "loadavg_start": loadavg(),
        "where": str(work),
        "fs_mounts": f"{fs} on {mnt}",
        "fs_stat": fs_stat,
        "kernel": platform.release(),
        "python": platform.python_version(),
        "du": tool_version(["du", "--version"]),
        "find": tool_version(["find", "--version"]),
        "leases": leases,
    }
    console.print(
        f"nproc {env['nproc']} (usable {affinity}); load average {env['loadavg_start']}; "
        f"work folder {work}\nfilesystem: {fs} on {mnt} (stat -f: {fs_stat}); "
        f"kernel {env['kernel']}; Python {env['python']}; {env['du']}; {env['find']}; "
        f"leases {'usable' if leases else 'unavailable'}"
    )

    rows: list[Row] = []
    stat0 = cpu_ticks()
    try:
        if "scan" in parts:
            rows += bench_scan(work, args.files, args.per_dir, args.repeat, args.profile)
        if "delete" in parts:
            rows += bench_delete(
                work,
                args.delete,
                args.per_dir,
                args.repeat,
                not args.no_leases_off,
                args.profile,
                not args.no_one_thread,
            )
        if "planner" in parts:
            rows += bench_planner(args.planner_entries, args.per_dir, args.repeat, args.profile)
    finally:
        remove_tree(work)
        if mounted is not None:
            if subprocess.run(["umount", str(mounted)], check=False).returncode != 0:
                subprocess.run(["umount", "-l", str(mounted)], check=False)  # detach when busy
            try:
                mounted.rmdir()
            except OSError:
                console.print(f"[yellow]could not remove mount point {mounted}[/]")
    env["loadavg_end"] = loadavg()
    env["cpu_busy_pct"] = cpu_busy(stat0)

    table = Table(
        title=f"space-janitor sweep benchmark (median of {args.repeat}; "
        f"{fs} / {fs_stat}; nproc {env['nproc']}; load {env['loadavg_start']} -> "
        f"{env['loadavg_end']}; all CPUs {env['cpu_busy_pct'] or 0:.0f}% busy during the run)"
    )
    for col, just in (
        ("measurement", "left"),
        ("janitor", "right"),
        ("baseline", "right"),
        ("ratio", "right"),
        ("target", "left"),
        ("verdict", "center"),
        ("janitor cpu", "right"),
        ("baseline cpu", "right"),
        ("cpu ratio", "right"),
    ):
        table.add_column(col, justify=just)  # type: ignore[arg-type]
    for r in rows:
        ratio, cpu_ratio = r.ratio, r.cpu_ratio
        style = {"PASS": "green", "MISS": "bold red"}.get(r.verdict, "dim")
        table.add_row(
            r.name,
            fmt_s(r.j),
            fmt_s(r.b),
            "—" if ratio is None else f"{ratio:.2f}x",
            r.target,
            f"[{style}]{r.verdict}[/]",
            fmt_s(r.jc),
            fmt_s(r.bc),
            "—" if cpu_ratio is None else f"{cpu_ratio:.2f}x",
        )
    console.print(table)
    console.print(
        "baseline: du -s (scan), find ROOT -type f -delete on an identical tree (delete); "
        "wall time with exec. janitor: in-process calls. Runs in seconds:",
        style="dim",
    )
    for r in rows:
        runs = f"janitor {[round(w, 3) for w, _ in r.janitor]}"
        if r.baseline:
            runs += f", baseline {[round(w, 3) for w, _ in r.baseline]}"
        console.print(f"  {r.name}: {runs}" + (f"; {r.note}" if r.note else ""), style="dim")
    console.print(
        "[dim]cpu = user + system seconds (this process for the janitor, the child for du/find): "
        "less sensitive than wall time to other load on the machine, blind to I/O waits and "
        "to work the kernel does in its own threads (journal commits, discards).[/]"
    )
    if args.json is not None:
        args.json.write_text(
            json.dumps(
                {
                    "env": env,
                    "rows": [
                        {
                            "measurement": r.name,
                            "janitor_wall_cpu_s": r.janitor,
                            "baseline_wall_cpu_s": r.baseline,
                            "janitor_median_s": r.j,
                            "baseline_median_s": r.b,
                            "janitor_cpu_median_s": r.jc,
                            "baseline_cpu_median_s": r.bc,
                            "ratio": r.ratio,
                            "cpu_ratio": r.cpu_ratio,
                            "target": r.target,
                            "verdict": r.verdict,
                        }
                        for r in rows
                    ],
                },
                indent=2,
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
