"""`janitor doctor`: every check a support person would run, each with a verdict and the fix.

Checks never change anything. Each says ``ok``, ``warn`` or ``fail``; the command exits 1 when
any check fails.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

from janitor.commands.run_daemon import daemon_status
from janitor.config.settings import Settings
from janitor.errors import JanitorError, LedgerError, LedgerFull
from janitor.host import batchalign, batchalign3
from janitor.host.fdwalk import tree_shape
from janitor.humanize import plural

__all__ = ["Check", "run_checks"]

Verdict = Literal["ok", "warn", "fail"]

_FIX_POLICY = "fix the policy file, then `janitor policy validate FILE`"


@dataclass(frozen=True, slots=True)
class Check:
    """One finding: what was checked, the verdict, what was seen, and how to fix it."""

    name: str
    verdict: Verdict
    message: str
    fix: str = ""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def run_checks(
    settings: Settings,
    *,
    platform: str = sys.platform,
    run: Callable[[list[str]], subprocess.CompletedProcess[str]] | None = None,
) -> list[Check]:
    """All checks, in order; those that need the policy (trees, volumes, inotify) are left
    out when it cannot be loaded, and the others still run."""
    return list(_checks(settings, platform, run or _run))


def _run(cmd: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=20)


def _checks(
    settings: Settings,
    platform: str,
    run: Callable[[list[str]], subprocess.CompletedProcess[str]],
) -> Iterator[Check]:
    from janitor.config.policy import load_policy
    from janitor.errors import PolicyError

    cfg = settings.config
    yield Check("config", "ok", f"config file {cfg}" if cfg else "no config file; defaults apply")
    policy = None
    try:
        policy = load_policy(
            settings.policy_path, state_dir=settings.state_dir, origin=settings.policy_origin
        )
    except PolicyError as exc:  # its fix, when it has one, shown once: as the fix
        yield Check("policy", "fail", exc.what, exc.fix or _FIX_POLICY)
    except JanitorError as exc:
        yield Check("policy", "fail", str(exc), _FIX_POLICY)
    else:
        yield Check("policy", "ok", f"{settings.policy_path}: {plural(len(policy.trees), 'tree')}")
        yield from _policy_checks(policy)
        yield from _staging_checks(policy)
    yield _ledger_check(settings)
    yield from _daemon_checks(settings)
    found = _generations()
    yield from _generation_checks(found, policy)
    if found.calls_ffmpeg:
        yield _server_check()
    yield _size_walk_check()
    if found.calls_ffmpeg:
        yield from _guard_checks(platform)
        yield _front_end_check(settings, platform)
    else:
        yield Check(
            "guard",
            "ok",
            "not needed here: batchalign 0.10+ decodes media in its own process and runs no "
            "ffmpeg, and no batchalign3 is installed or running; the policy's trees cover its "
            "temp WAVs, job folders and result cache",
        )
    if platform.startswith("linux") and policy is not None:
        yield _inotify_check(policy)
    if platform == "darwin":
        yield _snapshot_check(run)


def _policy_checks(policy: Any) -> Iterator[Check]:
    """Each tree's root, and each volume the trees are on against its floor and free_low."""
    from janitor.admission.volume import Volume
    from janitor.config.policy import trees_by_device
    from janitor.host.space import volume_stats
    from janitor.sizes import format_size

    measured = []
    for name, tree in policy.trees.items():
        path = tree.path
        if os.path.islink(path):
            yield Check(
                f"tree {name}",
                "warn",
                f"{path} is a symlink; the janitor will not follow it",
                "point the policy at the real folder",
            )
        elif not path.exists() and tree.role == "report":
            yield Check(f"tree {name}", "ok", f"report at {path}: not there, nothing to report")
            continue
        elif not path.exists():
            yield Check(
                f"tree {name}",
                "warn",
                f"{path} does not exist yet",
                "it is created by the daemon, or by the program that fills it",
            )
        elif not path.is_dir():
            yield Check(f"tree {name}", "fail", f"{path} is not a folder", "fix the tree's path")
        elif not os.access(path, os.R_OK | os.W_OK | os.X_OK):
            yield Check(
                f"tree {name}",
                "fail",
                f"{path} is not readable and writable by you",
                f"chown/chmod {path}, or run the janitor as its owner",
            )
        else:
            yield Check(f"tree {name}", "ok", f"{tree.role} at {path}")
        try:
            volume_stats(path)  # its volume answers (the volume checks below group by it)
        except OSError as exc:
            yield Check(f"tree {name}", "fail", f"cannot stat its volume: {exc.strerror}")
            continue
        measured.append(tree)

    for trees in trees_by_device(measured).values():
        vol = Volume.at(policy, trees[0].path)
        # The check's name holds the mount already: "volume /: 76 GiB free of ...".
        what = (
            f"{format_size(vol.free)} free of {format_size(vol.total)}, "
            f"floor {format_size(vol.floor)}"
        )
        if vol.floor >= vol.total // 2:
            yield Check(
                f"volume {vol.mount}",
                "warn",
                what + " (the floor is half the volume or more)",
                "lower [volume] floor, or most reservations will be refused",
            )
        if vol.free < vol.floor:
            yield Check(
                f"volume {vol.mount}",
                "fail",
                what + ": below the floor",
                "free space (`janitor sweep`, or `janitor emergency` if the disk is full)",
            )
        elif vol.free < vol.free_low:
            yield Check(
                f"volume {vol.mount}",
                "warn",
                what + ": below free_low",
                "run `janitor sweep`, or let the daemon evict caches",
            )
        else:
            yield Check(f"volume {vol.mount}", "ok", what)


def _staging_checks(policy: Any) -> Iterator[Check]:
    """For each staging tree (``active_jobs``): which ``jobs.db`` and ``server.yaml`` it goes
    by (those beside it), whether that jobs.db can be read, and what a sweep keeps for it."""
    from janitor.cleanup.kinds import group_units
    from janitor.cleanup.scan import scan
    from janitor.cleanup.staging import FIX, read_staging
    from janitor.host.batchalign3 import server_config, staging_state
    from janitor.humanize import format_duration

    for name, tree in policy.trees.items():
        if tree.active_jobs != "batchalign3":
            continue
        snap = scan(tree.path)
        keys = group_units(snap, tree).keys() if snap.exists else ()
        store = read_staging(tree, str(tree.path), keys)
        cfg = server_config(state=staging_state(tree.path))
        what = (
            f"jobs from {store.db}; orphan_age {format_duration(tree.orphan_age)} "
            f"(job_ttl_days {cfg.job_ttl_days} in {cfg.path})"
        )
        if store.kept is not None:
            yield Check(f"staging {name}", "warn", f"{what}; {store.kept}", FIX)
        elif store.problem is not None:
            yield Check(f"staging {name}", "ok", f"{what}; {store.problem}; no folder to keep")
        else:
            held = plural(len(store.live), "folder")
            yield Check(f"staging {name}", "ok", f"{what}; {held} of unfinished jobs kept")


@dataclass(frozen=True, slots=True)
class _Generations:
    """Which generations of the pipeline this machine has: batchalign3 (it runs ffmpeg for its
    big writes: the guard's to watch) and batchalign 0.10+ (it decodes in its own process)."""

    #: batchalign3's executable or package, its running processes, whether a server answers.
    b3: str | None
    b3_pids: tuple[int, ...]
    b3_server: bool
    #: batchalign's distribution, and its processes running.
    ba: batchalign.Installed | None
    ba_running: tuple[batchalign.Running, ...]

    @property
    def next_found(self) -> bool:
        """batchalign 0.10+ installed (or of unknown version) or running."""
        installed = self.ba is not None and self.ba.next_generation is not False
        return installed or bool(self.ba_running)

    @property
    def calls_ffmpeg(self) -> bool:
        """Whether the guard's advice applies: batchalign3 is installed or runs, or neither
        generation is found (what will be installed is unknown: the advice stays)."""
        return self.b3 is not None or bool(self.b3_pids) or self.b3_server or not self.next_found


def _generations() -> _Generations:
    import psutil

    from janitor.commands.ffmpeg_route import is_batchalign, route

    pids = []
    for proc in psutil.process_iter(["pid", "cmdline"]):
        try:
            if is_batchalign(proc.info["cmdline"] or []):
                pids.append(proc.pid)
        except psutil.Error:
            continue
    served = route(None)
    return _Generations(
        batchalign3.installed(),
        tuple(pids),
        served is not None and served.case != "direct",
        batchalign.installed(),
        batchalign.running(),
    )


def _generation_checks(found: _Generations, policy: Any) -> Iterator[Check]:
    """What of each generation is here: installed, its folders that exist, what runs."""
    from janitor.host.batchalign3 import known_paths

    known = {k.name: k.path for k in known_paths()}
    b3_folders = ("media cache", "batchalign3 state", "job staging", "analysis cache")
    there = [f"{n} {known[n]}" for n in b3_folders if known[n].exists()]
    parts = [f"installed: {found.b3}" if found.b3 else "not installed"]
    if found.b3_pids:
        parts.append(f"running: pid {', '.join(map(str, found.b3_pids))}")
    if found.b3_server:
        parts.append("a local server answers")
    parts.append(f"its folders: {', '.join(there)}" if there else "none of its folders")
    yield Check("batchalign3", "ok", "; ".join(parts))
    yield from _next_generation_check(found, policy)


def _next_generation_check(found: _Generations, policy: Any) -> Iterator[Check]:
    """batchalign 0.10+: its version, its folders, its temp files in TMPDIR, its daemon."""
    import tempfile

    ba = found.ba
    if ba is None:
        parts = ["not installed"]
    elif ba.next_generation is False:
        parts = [f"{ba.version} ({ba.where}): before 0.10, not the generation this policy covers"]
    else:
        parts = [f"installed: {ba.version or 'version unknown'} ({ba.where})"]
    mine = (("API workdir", batchalign.api_workdir()), ("result cache", batchalign.cache_path()))
    folders = [f"{what} {path}" for what, path in mine if path.exists()]
    parts.append(f"its folders: {', '.join(folders)}" if folders else "none of its folders")
    try:
        names = os.listdir(tempfile.gettempdir())
    except OSError:
        names = []
    wavs = sum(1 for n in names if batchalign.TEMP_WAV_RE.fullmatch(n))
    staged = sum(1 for n in names if n.startswith("batchalign-morphotag-"))
    if wavs or staged:
        parts.append(
            f"in TMPDIR: {plural(wavs, 'tempfile WAV')}, {plural(staged, 'morphotag folder')}"
        )
    loose = []
    for run in found.ba_running:
        if run.workdir is None:
            parts.append(f"running: {run.role} pid {run.pid}")
            continue
        parts.append(f"running: {run.role} pid {run.pid} (workdir {run.workdir})")
        if policy is not None and _tree_of(policy, run.workdir / "jobs" / "x") is None:
            loose.append(str(run.workdir / "jobs"))
    if loose:
        yield Check(
            "batchalign",
            "warn",
            "; ".join(parts) + f"; no tree judges {', '.join(loose)}",
            "add a scratch tree there (as the default policy's batchalign_api_jobs), or start "
            "the daemon with the BATCHALIGN_API_WORKDIR this shell has",
        )
        return
    yield Check("batchalign", "ok", "; ".join(parts))


def _tree_of(policy: Any, path: Path) -> Any:
    from janitor.config.policy import tree_holding

    return tree_holding(policy.trees.values(), path)


def _ledger_check(settings: Settings) -> Check:
    path = settings.ledger_path
    if not path.exists():
        return Check("ledger", "ok", f"{path} not created yet (the first reservation creates it)")
    from janitor.ledger.db import Ledger

    try:
        result = Ledger(path).integrity_check()
    except LedgerFull:
        return Check(
            "ledger",
            "fail",
            f"the disk of {path.parent} is full: commands that only read answer from the "
            "ledger as it is, nothing new can be recorded (no grant, no deletion)",
            "free space on that volume (the ledger is not at fault: keep it)",
        )
    except LedgerError as exc:
        return Check(
            "ledger",
            "fail",
            str(exc),
            "move the file aside; space-janitor starts a new ledger",
        )
    if result != "ok":
        return Check(
            "ledger",
            "fail",
            f"{path}: integrity check says {result}",
            "move the file aside; space-janitor starts a new ledger",
        )
    mode = stat.S_IMODE(os.stat(path).st_mode)
    if mode & 0o077:
        return Check(
            "ledger", "warn", f"{path} is readable by others (mode {mode:o})", f"chmod 600 {path}"
        )
    return Check("ledger", "ok", f"{path}: integrity ok")


def _daemon_checks(settings: Settings) -> Iterator[Check]:
    sock = settings.socket_path
    if not sock.exists():
        yield Check(
            "daemon",
            "warn",
            "not running (no socket at " + str(sock) + ")",
            "`janitor service install` runs it as a service",
        )
        return
    mode = stat.S_IMODE(os.lstat(sock).st_mode)
    if mode & 0o077:
        yield Check(
            "daemon socket",
            "fail",
            f"{sock} has mode {mode:o}: other users can connect",
            "restart the daemon (it creates the socket 0600)",
        )
    else:
        yield Check("daemon socket", "ok", f"{sock} (mode {mode:o})")
    status = daemon_status(sock)
    if status is None:
        yield Check(
            "daemon",
            "fail",
            f"{sock} exists but nothing answers",
            "restart it: `janitor service install`, or remove the stale socket",
        )
        return
    daemon = status.get("daemon", {})
    polled = [t["name"] for t in daemon.get("trees", []) if t.get("watch") != "watching"]
    msg = f"running, pid {daemon.get('pid', '?')}"
    theirs = str(daemon.get("policy") or "")
    if theirs and os.path.realpath(theirs) != os.path.realpath(settings.policy_path):
        yield Check(
            "daemon",
            "warn",
            msg + f", with policy {theirs}, not {settings.policy_path} (this shell's): it "
            "cannot admit this shell's guarded writes, which open the ledger themselves",
            "restart the daemon with this policy, or point JANITOR_POLICY at the daemon's",
        )
    elif polled:
        yield Check(
            "daemon",
            "warn",
            msg + f"; trees polled, not watched: {', '.join(polled)}",
            "see `janitor service logs` for why (often inotify limits)",
        )
    else:
        yield Check("daemon", "ok", msg)


def _size_walk_check() -> Check:
    """Whether ``janitor space`` measures with the compiled walker, or why it walks in Python
    (slower than ``du``). Nothing is built here."""
    from janitor.config.paths import native_dir
    from janitor.host.cbuild import compiler, why_not
    from janitor.host.nativewalk import walker_state

    name, slower = "size walk", "`janitor space` walks in Python, slower than du"
    into = native_dir()
    if into is None:
        return Check(name, "ok", f"JANITOR_NATIVE=0: {slower}")
    state = walker_state(into)
    if state.path is not None:
        return Check(name, "ok", f"compiled walker {state.path}")
    if state.failed is not None:
        return Check(
            name,
            "warn",
            f"the compiled walker did not build ({state.failed}): {slower}",
            f"fix the C compiler, then remove {state.marker} (else it is tried again a day "
            "after it failed)",
        )
    if compiler() is None:
        return Check(name, "warn", f"{why_not()}: {slower}", "install a C compiler")
    return Check(name, "ok", f"the first `janitor space` builds the compiled walker into {into}")


def _server_check() -> Check:
    """Does batchalign3 hand its jobs to a local server, and does that server run the guard?"""
    from janitor.commands.ffmpeg_route import route

    found = route(None)
    assert found is not None  # only `serve` commands have no route
    if found.protected:
        return Check("batchalign3 server", "ok", found.message)
    return Check(
        "batchalign3 server",
        "warn" if found.case == "unknown" else "fail",
        found.message,
        found.fix or "",
    )


def _guard_checks(platform: str) -> Iterator[Check]:
    """Does each running batchalign3 process find the guarded ffmpeg first on its PATH?"""
    import psutil

    from janitor.commands.ffmpeg_route import is_batchalign, process_ffmpeg

    found = False
    for proc in psutil.process_iter(["pid", "name", "cmdline"]):
        try:
            argv = proc.info["cmdline"] or []
            if not is_batchalign(argv or [proc.info["name"] or ""]):
                continue
        except psutil.Error:
            continue
        found = True
        who = f"batchalign3 (pid {proc.pid})"
        seen = process_ffmpeg(proc.pid, platform)
        if seen.guarded is None:
            if psutil.pid_exists(proc.pid):
                yield Check(
                    "guard",
                    "warn",
                    f"{who}: cannot read its environment",
                    f"check by hand: {seen.how_to_check}",
                )
        elif seen.guarded:
            yield Check("guard", "ok", f"{who} runs the guarded ffmpeg {seen.ffmpeg}")
        else:
            yield Check(
                "guard",
                "fail",
                f"{who} finds ffmpeg at {seen.ffmpeg or 'nowhere'}, not the guard: its writes "
                "are not reserved",
                "`janitor shim install` prints how to put the guard first on the server's PATH; "
                "then restart the server",
            )
    if not found:
        yield Check(
            "guard",
            "ok",
            "no batchalign3 process runs; `janitor shim status` checks this shell's PATH",
        )


def _front_end_check(settings: Settings, platform: str) -> Check:
    """Which front end the installed guard has (compiled: a few ms a call; Python: ~25 ms
    more), and why; what `janitor shim install` would put in when none is installed."""
    from janitor.commands.shim import state

    st = state(settings)
    now, would = st.front_end, st.would_install
    reinstall = "`janitor shim install`"
    if now is None:
        said = f"the {would.kind} front end ({would.why})" if would is not None else "nothing"
        return Check("guard front end", "ok", f"no guard in {st.bin_dir}; {reinstall} would "
                     f"put in {said}")  # fmt: skip
    msg = f"the {now.kind} front end in {st.bin_dir} ({now.why})"
    if not st.current:
        better = f" (it would put in the {would.kind} front end)" if would is not None else ""
        return Check("guard front end", "warn", msg + "; out of date", reinstall + better)
    if now.kind == "python" and now.why != "asked for":
        compiler = "xcode-select --install" if platform == "darwin" else "install gcc"
        return Check("guard front end", "warn", msg + ": about 25 ms more per ffmpeg call",
                     f"{compiler}, then {reinstall}")  # fmt: skip
    return Check("guard front end", "ok", msg)


def _inotify_check(policy: Any) -> Check:
    try:
        limit = int(Path("/proc/sys/fs/inotify/max_user_watches").read_text())
    except (OSError, ValueError):
        return Check("inotify", "warn", "cannot read fs.inotify.max_user_watches")
    folders = 0
    for tree in policy.trees.values():
        if tree.role != "cache" or not tree.path.is_dir():
            continue
        folders += tree_shape(tree.path).folders  # any depth: no recursion, no long paths
    if folders * 2 > limit:
        return Check(
            "inotify",
            "warn",
            f"{plural(folders, 'folder')} to watch, limit max_user_watches={limit}",
            "sysctl fs.inotify.max_user_watches=524288 (and in /etc/sysctl.d)",
        )
    return Check("inotify", "ok", f"{plural(folders, 'folder')} to watch; max_user_watches={limit}")


def _snapshot_check(run: Callable[[list[str]], subprocess.CompletedProcess[str]]) -> Check:
    try:
        proc = run(["tmutil", "listlocalsnapshots", "/"])
    except (OSError, subprocess.SubprocessError):
        return Check("local snapshots", "warn", "tmutil cannot be run; cannot check")
    if proc.returncode != 0:
        why = (proc.stderr or proc.stdout).strip() or f"exit {proc.returncode}"
        return Check(
            "local snapshots",
            "warn",
            f"`tmutil listlocalsnapshots /` failed: {why}",
            "give the terminal Full Disk Access, or run the command yourself",
        )
    snaps = [ln for ln in proc.stdout.splitlines() if "com.apple" in ln]
    if snaps:
        return Check(
            "local snapshots",
            "warn",
            f"{plural(len(snaps), 'Time Machine local snapshot')} "
            f"{'holds' if len(snaps) == 1 else 'hold'} space that deleting files cannot give back",
            "`tmutil thinlocalsnapshots / 999999999999 4` frees them",
        )
    return Check("local snapshots", "ok", "no local snapshots")
