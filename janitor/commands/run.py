"""``janitor run``: a whole pipeline job with the guarded ffmpeg first on its PATH.

Before: with ``--media``, a pre-flight of the bytes the job will write, as batchalign3 writes
them: a media-cache WAV (16 kHz mono s16le, 32,000 B/s plus its header)
for each input that needs converting (``.mp4 .m4a .webm .wma``) and is not cached yet, plus
each file's float32 PCM working set (its whole duration x 64,000 B/s: every alignment group's
PCM stays until the file is done) for as many files as run at once, each to the byte as
``janitor estimate`` says it (janitor.commands.estimate). Printed beside each volume's headroom;
``--require-fit`` refuses (exit 75) before the command starts.

During: the command runs with a guard script first on ``PATH`` (no install needed), its
signals passed on, never outliving us; every ffmpeg call it makes is reserved
(janitor.commands.guard).

After: what the run reserved and wrote, and the job temp folders that its guarded writes went
to and that are still there once the command ended (a killed job's ``.tmpXXXXXX``), removed by
the deleter with every one of its checks.
"""

from __future__ import annotations

import os
import secrets
import shutil
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from janitor.errors import ConfigError
from janitor.host.batchalign3 import media_cache_dir

if TYPE_CHECKING:
    from janitor.commands.run_daemon import RunDaemon
    from janitor.core import Janitor
    from janitor.guarding.ffmpeg import Probe

__all__ = [
    "CONVERTED",
    "MEDIA",
    "MediaPlan",
    "Place",
    "Preflight",
    "RunResult",
    "VolumeNeed",
    "fingerprint",
    "media_cache_dir",
    "preflight",
    "run_command",
]

#: Extensions batchalign3 converts into its media cache (the others it reads in place).
CONVERTED = frozenset({".mp4", ".m4a", ".webm", ".wma"})
#: Extensions taken as media when a folder is given.
MEDIA = CONVERTED | {".wav", ".mp3", ".flac", ".ogg", ".aac", ".aiff", ".aif", ".opus", ".mov"}
_CHUNK = 65536
#: How long a run waits, once its command ended, for guarded calls still finishing their files.
GUARD_GRACE_S = 10.0


def fingerprint(path: str | os.PathLike[str]) -> str | None:
    """batchalign3's cache key of a media file: the first 24 hex digits of BLAKE3(size as a
    big-endian u64, the first 64 KiB, the last 64 KiB); None without the blake3 module."""
    try:
        import blake3  # type: ignore[import-not-found,unused-ignore]
    except ImportError:
        return None
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        h = blake3.blake3(size.to_bytes(8, "big"))
        h.update(f.read(_CHUNK))
        if size > _CHUNK:
            f.seek(-_CHUNK, os.SEEK_END)
            h.update(f.read(_CHUNK))
    return str(h.hexdigest())[:24]


@dataclass(frozen=True, slots=True)
class MediaPlan:
    """What one input will cost: its cache WAV (if it must be made) and its PCM working set."""

    media: str
    duration_s: float | None
    converts: bool
    cached: bool
    cache_bytes: int
    pcm_bytes: int
    error: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "media": self.media,
            "duration_s": self.duration_s,
            "converts": self.converts,
            "cached": self.cached,
            "cache_bytes": self.cache_bytes,
            "pcm_bytes": self.pcm_bytes,
            "error": self.error,
        }


@dataclass(frozen=True, slots=True)
class VolumeNeed:
    """One volume's side of the pre-flight: what the job will write there against its
    headroom (free - floor - reserved)."""

    mount: str
    needs: int
    headroom: int
    what: tuple[str, ...]

    @property
    def fits(self) -> bool:
        return self.needs <= self.headroom

    def as_dict(self) -> dict[str, Any]:
        return {
            "volume": self.mount,
            "needs": self.needs,
            "headroom": self.headroom,
            "fits": self.fits,
            "for": list(self.what),
        }


@dataclass(frozen=True, slots=True)
class Place:
    """Where one part of the job's bytes goes (the folder batchalign3 writes, as its
    environment names it), and the policy's tree that manages that folder.

    ``tree`` is None when no tree holds the folder: then ``covered`` says whether its volume is
    one the policy covers (a write there is held to the volume's floor, and nothing cleans up
    after it), and ``hint`` names the policy's tree for that part, where it lies elsewhere."""

    what: str
    folder: str
    tree: str | None
    covered: bool
    hint: str = ""

    @property
    def managed(self) -> bool:
        """True when a tree of the policy holds the folder."""
        return self.tree is not None

    def describe(self) -> str:
        """``media cache WAVs in /x (tree media_cache)``, or ``... (not managed by the policy)``."""
        return f"{self.what} in {self.folder} " + (
            f"(tree {self.tree})" if self.tree else "(not managed by the policy)"
        )

    def note(self) -> str | None:
        """What to know about a folder no tree manages (None for one a tree does)."""
        if self.tree is not None:
            return None
        why = (
            "writes there are held to its volume's floor, and nothing removes what a failed "
            "job leaves there"
            if self.covered
            else "its volume is not one the policy covers: nothing there is reserved or removed"
        )
        return f"{self.folder}, where the job writes its {self.what}, is not managed by the " + (
            f"policy: {why}; {self.hint}" if self.hint else f"policy: {why}"
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "what": self.what,
            "folder": self.folder,
            "tree": self.tree,
            "managed": self.managed,
            "covered": self.covered,
            "hint": self.hint or None,
        }


@dataclass(frozen=True, slots=True)
class Preflight:
    """The whole job's bytes, per volume, before it starts, and where they go."""

    files: tuple[MediaPlan, ...]
    concurrency: int
    volumes: tuple[VolumeNeed, ...]
    places: tuple[Place, ...] = ()

    @property
    def notes(self) -> tuple[str, ...]:
        """One line for each folder the job writes that no tree of the policy manages."""
        return tuple(n for n in (p.note() for p in self.places) if n)

    @property
    def fits(self) -> bool:
        """True when every volume has room for its part."""
        return all(v.fits for v in self.volumes)

    @property
    def knows_cache(self) -> bool:
        """False without the blake3 module: inputs already in the media cache are not
        recognised, so their WAVs are counted as still to make."""
        import importlib.util

        return importlib.util.find_spec("blake3") is not None

    def as_dict(self) -> dict[str, Any]:
        return {
            "concurrency": self.concurrency,
            "fits": self.fits,
            "volumes": [v.as_dict() for v in self.volumes],
            "places": [p.as_dict() for p in self.places],
            "files": [f.as_dict() for f in self.files],
        }


def _media_files(paths: Iterable[str | os.PathLike[str]]) -> list[str]:
    out: list[str] = []
    for p in paths:
        path = os.fspath(p)
        if os.path.isdir(path):
            for folder, dirs, names in os.walk(path):
                dirs.sort()
                out.extend(
                    os.path.join(folder, n)
                    for n in sorted(names)
                    if os.path.splitext(n)[1].lower() in MEDIA
                )
        elif os.path.isfile(path):
            out.append(path)
        else:
            raise ConfigError(f"--media {path}: no such file or folder")
    return out


def _plan_one(path: str, probe: Probe, cache: Path) -> MediaPlan:
    """One input's costs, by the one estimator (janitor.commands.estimate): its cache WAV when
    batchalign3 converts it and it is not cached yet, and its whole float32 PCM."""
    from janitor.commands.estimate import Estimate, estimate_bytes

    converts = os.path.splitext(path)[1].lower() in CONVERTED
    try:
        pcm = estimate_bytes(path, "f32", probe=probe)
        wav = estimate_bytes(path, "wav16", probe=probe) if converts else None
    except Exception as exc:  # one unreadable file does not stop the others' pre-flight
        return MediaPlan(path, None, converts, False, 0, 0, f"cannot probe: {exc}")
    for est in (pcm, wav):
        if est is not None and not isinstance(est, Estimate):
            return MediaPlan(path, None, converts, False, 0, 0, f"cannot probe: {est.reason}")
    assert isinstance(pcm, Estimate)
    cached = False
    if converts:
        fp = fingerprint(path)
        cached = fp is not None and (cache / f"{fp}.wav").exists()
    cache_bytes = wav.bytes if isinstance(wav, Estimate) and not cached else 0
    return MediaPlan(path, pcm.duration_s, converts, cached, cache_bytes, pcm.bytes)


def preflight(
    jan: Janitor,
    media: Sequence[str | os.PathLike[str]],
    *,
    concurrency: int = 1,
    cache_dir: Path | None = None,
    tmp_dir: Path | None = None,
    progress: Callable[[int, int], None] | None = None,
    workers: int | None = None,
) -> Preflight:
    """The bytes a job over ``media`` will write, per volume, beside each volume's headroom.

    They are counted where batchalign3 writes them, as this environment (the command's) names
    the places: its media cache (``$BATCHALIGN_MEDIA_CACHE_DIR``, else its default) and
    ``$TMPDIR``, each with the policy's tree that holds it, or said to be managed by none.
    Each file's bytes are what ``janitor estimate`` says for it (the one estimator); what it
    needs of a file comes from its header, or from ffprobe in parallel (``workers``, default 2
    per core), remembered per file (janitor.guarding.ffmpeg.Probe) so a second pre-flight of the
    same folder is instant.
    """
    from janitor.guarding import ffmpeg
    from janitor.host.space import volume_stats

    if concurrency < 1:
        raise ConfigError(f"--concurrency {concurrency} must be at least 1")
    files = _media_files(media)
    cache = cache_dir or media_cache_dir()
    tmp = tmp_dir or Path(tempfile.gettempdir())
    probe = ffmpeg.Probe(ffmpeg.probe_cache_dir())
    # What the probe knows without ffprobe (a header it reads, a remembered answer) is planned
    # here, one file after another: pure Python, which threads would only make wait for the
    # GIL. Only the files left for ffprobe go to the pool, where they wait on the process.
    known = {p for p in files if probe.cached(p) is not None}
    done: dict[str, MediaPlan] = {}
    n_done = 0

    def planned(path: str, plan: MediaPlan) -> None:
        nonlocal n_done
        done[path] = plan
        n_done += 1  # a file named twice is planned twice, as it is listed
        if progress is not None:
            progress(n_done, len(files))

    for path in files:
        if path in known:
            planned(path, _plan_one(path, probe, cache))
    rest = [p for p in files if p not in known]
    n_workers = workers or max(2, 2 * (os.cpu_count() or 1))
    with ThreadPoolExecutor(max_workers=n_workers) as pool:
        for path, plan in zip(
            rest, pool.map(lambda p: _plan_one(p, probe, cache), rest), strict=True
        ):
            planned(path, plan)
    plans = [done[p] for p in files]
    status = jan.status(with_usage=False)

    def headroom(folder: Path) -> tuple[str, int]:
        vs = volume_stats(folder)
        for v in status.volumes:
            if v.device == vs.device:
                return v.mount, v.headroom
        return vs.mount, vs.free  # a volume the policy does not cover: no floor to keep

    needs: dict[str, list[Any]] = {}
    places: list[Place] = []

    def count(place: Place, folder: Path, nbytes: int, label: str) -> None:
        mount, room = headroom(folder)
        needs.setdefault(mount, [0, room, []])
        needs[mount][0] += nbytes
        needs[mount][2].append(label)
        places.append(place)

    cache_total = sum(p.cache_bytes for p in plans)
    if cache_total:
        place = _place(jan, "media cache WAVs", cache, "cache")
        count(place, cache, cache_total, place.describe())
    working = sorted((p.pcm_bytes for p in plans), reverse=True)[:concurrency]
    if working:
        place = _place(jan, "PCM working set", tmp, "scratch")
        times = f" (x{min(concurrency, len(working))})"
        count(place, tmp, sum(working), place.describe() + times)
    volumes = tuple(VolumeNeed(m, n, r, tuple(w)) for m, (n, r, w) in needs.items())
    return Preflight(tuple(plans), concurrency, volumes, tuple(places))


#: The shipped policy's tree for each part, and what points batchalign3 at a folder for it.
_USUAL = {"cache": ("media_cache", "BATCHALIGN_MEDIA_CACHE_DIR"), "scratch": ("job_tmp", "TMPDIR")}


def _place(jan: Janitor, what: str, folder: Path, role: str) -> Place:
    """``folder`` (where batchalign3 writes ``what``) and the policy's tree that holds it."""
    from janitor.guarding.prepare import locate

    # A name inside the folder: a tree whose root is the folder holds it, as one above it does.
    sample = os.path.join(folder, ".tmp000000" if role == "scratch" else f"{'0' * 24}.wav")
    where = locate(jan, sample)
    if where is not None and where.in_tree:
        return Place(what, str(folder), where.tree, True)
    name, variable = _USUAL[role]
    usual = jan.policy.trees.get(name)
    hint = ""
    if usual is not None and usual.role == role:
        hint = (
            f"the policy's {name} tree is {usual.path}: set {variable}={usual.path} for the "
            f"job, or point that tree at {folder}"
        )
    return Place(what, str(folder), None, where is not None, hint)


@dataclass(frozen=True, slots=True)
class RunResult:
    """How a guarded run ended: the command's exit code, what it reserved and wrote, and the
    job folders it left behind: removed (its own, every writer dead), or kept and why."""

    exit_code: int
    run_id: str
    grants: int
    refusals: int
    reserved: int
    written: int
    stopped: int
    leftovers: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()
    removed_bytes: int = 0
    kept: tuple[tuple[str, str], ...] = field(default=())
    #: The signals the run got while the command ran (``SIGINT`` for a Ctrl-C), in order.
    interrupted: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        return {
            "exit_code": self.exit_code,
            "run": self.run_id,
            "grants": self.grants,
            "refusals": self.refusals,
            "reserved": self.reserved,
            "written": self.written,
            "stopped": self.stopped,
            "leftovers": list(self.leftovers),
            "removed": list(self.removed),
            "removed_bytes": self.removed_bytes,
            "kept": [{"path": p, "why": w} for p, w in self.kept],
            "interrupted": list(self.interrupted),
        }


def guard_dir(jan: Janitor) -> Path:
    """The folder of the guard ``janitor run`` puts first on its command's PATH, in our data
    folder and named by its files' hash (``~/.local/share/space-janitor/run/3f2a9c1b7d0e4a65``):
    the compiled front end where it builds (built once), else the Python one
    (janitor.commands.front_end); written once, shared by every run with the same settings, and
    never removed, so a process the command left running (a daemonized server) keeps a guard
    that works."""
    from janitor.commands.front_end import choose, layout, matches, write_layout
    from janitor.commands.shim import default_bin_dir

    lay = layout(jan.settings, choose(jan.settings))
    folder = default_bin_dir().parent / "run" / lay.digest()
    if matches(folder, lay):
        return folder
    try:
        write_layout(folder, lay)
    except OSError as exc:
        raise ConfigError(
            f"cannot write the run's guard into {folder}: {exc.strerror}; check the permissions "
            "of the user data dir"
        ) from None
    return folder


def _unit_folders(jan: Janitor) -> frozenset[tuple[int, int]]:
    """(dev, inode) of every folder right under a scratch tree's root now: what existed
    before the run, never its own."""
    found: set[tuple[int, int]] = set()
    for tree in jan.policy.trees.values():
        if not tree.holds_jobs:
            continue
        try:
            with os.scandir(tree.path) as it:
                for entry in it:
                    try:
                        if entry.is_dir(follow_symlinks=False):
                            st = entry.stat(follow_symlinks=False)
                            found.add((st.st_dev, st.st_ino))
                    except OSError:
                        continue
        except OSError:
            continue
    return frozenset(found)


def run_command(
    jan: Janitor,
    command: Sequence[str],
    *,
    env: dict[str, str] | None = None,
    clean: bool = True,
    daemon: RunDaemon | None = None,
) -> RunResult:
    """Run ``command`` with the guarded ffmpeg first on its PATH (its calls going to
    ``daemon``, stopped once the command ends); afterwards, sum up what its guarded writes
    reserved and wrote and remove the job folders that are its own."""
    from janitor.commands.supervise import Supervised, exit_code, forward_signals, restore_signals

    if not command:
        raise ConfigError("no command given; write it after `--`")
    if shutil.which(command[0]) is None:
        raise ConfigError(f"command {command[0]!r} not found on PATH, or not an executable file")
    run_id = secrets.token_hex(4)
    label = f"run-{run_id}"
    started = time.time()
    bin_dir = guard_dir(jan)
    before = _unit_folders(jan)
    child_env = dict(os.environ if env is None else env)
    child_env["PATH"] = f"{bin_dir}{os.pathsep}{child_env.get('PATH', os.defpath)}"
    child_env["JANITOR_JOB"] = label
    child_env["JANITOR_RUN"] = run_id
    if jan.settings.policy is not None or "JANITOR_POLICY" in os.environ:
        child_env["JANITOR_POLICY"] = str(jan.settings.policy_path)
    if daemon is not None:
        child_env.update(daemon.env)
    received: list[int] = []
    try:
        child, previous = forward_signals(
            lambda: Supervised(list(command), env=child_env), received
        )
    except OSError as exc:
        raise ConfigError(f"cannot run {command[0]!r}: {exc.strerror}") from None
    try:
        returncode = child.wait()
    finally:
        restore_signals(previous)
        if child.returncode is None:
            child.stop(5.0)
        # A command that ends on Ctrl-C may leave its guarded calls finishing their files: they
        # record what they wrote (through the daemon) before it stops and the summary counts.
        _wait_for_guards(run_id, bin_dir / "ffmpeg", GUARD_GRACE_S)
        if daemon is not None:
            daemon.stop()  # before the summary: nothing else reaps or removes meanwhile
    assert returncode is not None
    result = _summary(jan, exit_code(returncode), run_id, label, started, before, clean=clean)
    return replace(result, interrupted=_signal_names(received))


def _signal_names(signums: Iterable[int]) -> tuple[str, ...]:
    """``SIGINT``, ``SIGTERM`` ...: the signals a run got, each once, in order."""
    import signal

    names: list[str] = []
    for n in signums:
        try:
            name = signal.Signals(n).name
        except ValueError:
            name = f"signal {n}"
        if name not in names:
            names.append(name)
    return tuple(names)


def _wait_for_guards(run_id: str, guard: Path, timeout: float) -> None:
    """Wait (at most ``timeout`` seconds) until no guarded ffmpeg call of run ``run_id`` is
    left: a process of ours running the run's guard script with the run's id in its
    environment (a guard of another run, sharing the script, is not waited for)."""
    import psutil

    deadline = time.monotonic() + timeout
    me, script = os.getuid(), str(guard)
    while True:
        left = False
        for proc in psutil.process_iter(["uids", "cmdline"]):
            try:
                if proc.info["uids"] is None or proc.info["uids"].real != me:
                    continue
                if script not in (proc.info["cmdline"] or [])[:2]:
                    continue
                if proc.environ().get("JANITOR_RUN") == run_id:
                    left = True
                    break
            except (psutil.Error, OSError):
                continue
        if not left or time.monotonic() >= deadline:
            return
        time.sleep(0.05)


def _summary(
    jan: Janitor,
    code: int,
    run_id: str,
    label: str,
    started: float,
    before: frozenset[tuple[int, int]],
    *,
    clean: bool,
) -> RunResult:
    """What the run's guarded writes did (from the ledger's log), and its job folders: removed
    when they are its own (made during the run, every recorded writer dead), else kept."""
    jan.reap()
    entries = jan.log(since=started - 1)
    mine: dict[str, Any] = {}
    refusals = 0
    for e in entries:
        if e.event == "grant" and e.detail.get("job") == label and e.reservation:
            mine[e.reservation] = e
        elif e.event == "refuse" and e.detail.get("job") == label:
            refusals += 1
    # What its calls left at their outputs, whoever held the bytes (a reservation of the call's
    # own, its job's working set; through the daemon or the ledger), a partial file included.
    written = sum(
        int(e.bytes or 0) for e in entries if e.event == "wrote" and e.detail.get("run") == run_id
    )
    stopped = 0
    for e in entries:
        if e.event == "at-risk" and e.reservation in mine:
            stopped += 1
    reserved = sum(int(e.bytes or 0) for e in mine.values())
    found, removed, kept, removed_bytes = _own_folders(jan, run_id, before, clean=clean)
    return RunResult(
        code, run_id, len(mine), refusals, reserved, written, stopped, found, removed,
        removed_bytes, kept,
    )  # fmt: skip


def _own_folders(
    jan: Janitor, run_id: str, before: frozenset[tuple[int, int]], *, clean: bool
) -> tuple[tuple[str, ...], tuple[str, ...], tuple[tuple[str, str], ...], int]:
    """The run's job folders still there; those removed, those kept (and why), bytes freed.

    A folder is the run's own when the run's guard recorded its job, it did not exist when the
    run started, and every process it recorded is dead, wherever it was re-parented, and so is
    everything they forked (janitor.host.lineage)."""
    from janitor.admission.jobs import folder_is, job_keepers
    from janitor.cleanup.sweep import remove_units

    with jan.ledger.read() as tx:
        jobs = [j for j in tx.jobs.of_run(run_id) if j.state in ("live", "orphan")]
    found = tuple(j.folder for j in jobs)
    removed: list[str] = []
    kept: list[tuple[str, str]] = []
    freed = 0
    for job in jobs:
        live = job_keepers(job.writers)
        if (job.device, job.ino) in before:
            kept.append((job.folder, "it existed before the run"))
        elif job.foreign:
            kept.append((job.folder, "it held files older than the run's first write into it"))
        elif live:
            kept.append((
                job.folder,
                f"a process of its job (pid {', '.join(map(str, live[:5]))}) still runs; it goes "
                "once that ends (the daemon, or the next sweep)",
            ))  # fmt: skip
        elif not clean:
            kept.append((job.folder, "--keep"))
        elif job.tree in jan.policy.trees and folder_is(job):
            report = remove_units(
                jan.policy, jan.ledger, jan.settings.state_dir, job.tree,
                [os.path.basename(job.folder)],
            )  # fmt: skip
            removed += [o.item.unit.path for o in report.outcomes if o.deleted]
            freed += report.deleted_bytes
            kept += [(o.item.unit.path, o.skipped or "") for o in report.outcomes if not o.deleted]
            if not report.outcomes:
                kept.append((job.folder, "in use (pinned, reserved, locked or open)"))
    if removed:
        jan.reap()
    return found, tuple(removed), tuple(kept), freed
