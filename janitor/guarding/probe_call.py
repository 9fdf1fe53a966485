"""One guarded ffprobe call, decided: the half both front ends of the guarded ffprobe share.

batchalign3 finds a WAV in its media cache, probes its duration with a bare ``ffprobe`` from
``PATH`` (``ffprobe -v quiet -show_entries format=duration -of
default=noprint_wrappers=1:nokey=1 WAV``), may then run UTR for as long as UTR takes, and
only then cuts the WAV group by group into a job folder under its ``TMPDIR``. A guarded
``ffprobe`` first on ``PATH`` (``janitor shim install``, ``janitor run``) sees that probe:

* a probe of a cache entry marks it **awaiting use** for the prober (the ffprobe's caller, a
  pid and its start time, found as the ffmpeg guard finds a job's writer;
  :mod:`janitor.admission.awaiting`), so nothing evicts it before the job's first cut pins it;
* a probe of a cached WAV whose forced alignment could never fit refuses (exit 75, one
  ``space-janitor:`` line) before anything is spent: its cuts (the whole recording as f32le
  mono 16 kHz PCM, worked out by the one estimator from the WAV's header) need more than the
  volume of the prober's ``TMPDIR`` could ever give (its capacity less its floor and what no
  eviction or job end frees; the WAV itself stays), and had no such room in any of the
  daemon's samples of that volume within ``forecast_window_s`` since the WAV was written (an
  outside writer's burst holds the disk for seconds: it does not make a volume one that can
  never hold them; before the WAV, its own bytes were free space). It reserves nothing: what
  may fit is admitted at the first cut, as ever.

Every other call, and every call that is not refused, runs the real ffprobe at once: the same
arguments, stdin, stdout, stderr and exit code (the front end ``exec``\\ s it). The verdict is
a :class:`~janitor.guarding.verdict.Verdict`: ``exec`` or ``refuse``, with the lines to print
and log. Imported by the Python front end only when it decides without a daemon.

A call is decided in two steps, each side effect in its place: :func:`decide_probe` reads
only (the files, the volume, the ledger when it is tight) and gives the verdict with the marks
it leaves to make (an :class:`AwaitingUse`); then :func:`mark_awaiting_use` writes them, in
one transaction. The daemon answers between the two (``POST /v1/guard/probe``): the refusal is
decided before ffprobe runs, and the prober's ffprobe does not wait for the ledger, whose mark
is needed only at its first cut, after UTR. A daemon that dies between its answer and the
write (a millisecond) leaves that entry unmarked, as an entry nothing covers (the probe not
counted as a use): pressure and make-room may take it, least recently used first, until the
prober's first cut pins it. A front end deciding in its own process marks, then ``exec``\\ s ffprobe
(:func:`probe_here`), since nothing of it runs after.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from janitor.error_statuses import status_of
from janitor.guarding.verdict import Verdict, policy_mismatch
from janitor.humanize import format_duration, format_size

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from janitor.admission.awaiting import CacheEntry
    from janitor.core import Janitor

__all__ = [
    "AwaitingUse",
    "FaNeed",
    "ProbeDecision",
    "decide_probe",
    "fa_need",
    "mark_awaiting_use",
    "probe_here",
    "probed_files",
]

#: batchalign3's forced-alignment cut, whose working set a probe of a cached WAV announces: one
#: group's PCM, ``ffmpeg -y -ss S -to E -i WAV -f f32le -acodec pcm_f32le -ar 16000 -ac 1
#: .tmpXXXXXX/fa_v2/audio/fa-v2-audio-{ns}-{group}.pcm``; the window is only there to make it a
#: cut.
_FA_CUT = ("-f", "f32le", "-acodec", "pcm_f32le", "-ar", "16000", "-ac", "1")
#: ffprobe's options whose value is a file it writes, never one it probes.
_WRITES = frozenset({"-o"})


def probed_files(args: Sequence[str], cwd: str) -> list[str]:
    """The existing files an ffprobe argument list names: ``-i``'s value and every operand,
    made absolute against ``cwd`` (``file:`` taken off). An option's value that happens to be
    a file counts too: a probe of a cache entry is only ever marked, never harmed."""
    found: list[str] = []
    skip = False
    for i, arg in enumerate(args):
        if skip:
            skip = False
            continue
        if arg in _WRITES:
            skip = True
            continue
        if arg.startswith("-") and arg != "-" and not (arg == "-i" and i + 1 < len(args)):
            continue
        name = args[i + 1] if arg == "-i" else arg
        skip = arg == "-i"
        name = name[5:] if name.startswith("file:") else name
        if not name or "\0" in name:
            continue
        path = os.path.normpath(os.path.join(cwd, name))
        try:
            if os.path.isfile(path) and path not in found:
                found.append(path)
        except (OSError, ValueError):
            continue
    return found


@dataclass(frozen=True, slots=True)
class FaNeed:
    """What forced alignment of a WAV will need in a job folder: the folder it stands for
    (under the prober's ``TMPDIR``), a tree on that folder's volume (to measure the volume by:
    its floor and free space are the volume's, whichever tree holds the folder), and the bytes
    (the whole WAV as batchalign3's PCM)."""

    folder: str
    tree: str
    bytes: int


def fa_need(jan: Janitor, wav: str, tmpdir: str) -> FaNeed | None:
    """The working set of aligning ``wav`` in a job folder under ``tmpdir``, worked out as
    the guard works out a first cut's; None when it cannot be (not a WAV whose header tells
    its length) or no tree of the policy is on that folder's volume."""
    from janitor.admission.reserve import tree_on
    from janitor.guarding import ffmpeg
    from janitor.host.space import device_of

    folder = os.path.join(tmpdir, ".tmp-fa-probe")
    out = os.path.join(folder, "fa_v2", "audio", "fa-v2-audio-0-0.pcm")

    def header_only(path: str) -> ffmpeg.MediaInfo | ffmpeg.NotEstimable:
        # What the WAV's header says: deciding a probe never runs an ffprobe of its own.
        return ffmpeg.header_info(path) or ffmpeg.NotEstimable("no header to read")

    cut = ffmpeg.parse(["-y", "-ss", "0", "-to", "1", "-i", wav, *_FA_CUT, out])
    est = ffmpeg.estimate(cut, header_only)
    if isinstance(est, ffmpeg.NotEstimable) or not est or not est[0].whole_bytes:
        return None
    try:
        device = device_of(tmpdir)  # a TMPDIR not made yet: the volume it would be made on
    except OSError:
        return None
    tree = tree_on(jan.policy, device)
    if tree is None:
        return None
    return FaNeed(folder, tree.name, int(est[0].whole_bytes))


@dataclass(frozen=True, slots=True)
class AwaitingUse:
    """The marks a probe leaves to make: its cache entries, awaiting use by the prober found
    from ``caller`` (the ffprobe's parent), past the go-betweens above it, as a job's writer
    is."""

    entries: tuple[CacheEntry, ...]
    caller: int


@dataclass(frozen=True, slots=True)
class ProbeDecision:
    """A probe call decided: the verdict to carry out, and the marks to make after it (None:
    nothing cached was probed, or the probe is refused)."""

    verdict: Verdict
    then: AwaitingUse | None = None


def decide_probe(
    jan: Janitor, call: Mapping[str, Any], *, policy_path: str | None
) -> ProbeDecision:
    """The verdict on one ffprobe call (the body of ``POST /v1/guard/probe``), from a read-only
    look: ``refuse`` (507) a probe of a cached WAV whose alignment could never fit, else
    ``exec``, with the cache entries it probes to mark awaiting use for the prober
    (:func:`mark_awaiting_use`). 409 when the call expects another policy than
    ``policy_path`` (None: the caller's own, deciding in its own process)."""
    from janitor.admission.awaiting import cache_entry

    env = call.get("env") or {}
    expected = env.get("JANITOR_POLICY") or (call.get("config") or {}).get("policy")
    mismatch = policy_mismatch(expected, policy_path)
    if mismatch is not None:
        return ProbeDecision(mismatch)
    probed = (cache_entry(jan.policy, p) for p in probed_files(call["args"], call["cwd"]))
    entries = tuple(e for e in probed if e is not None)
    if not entries:
        return ProbeDecision(Verdict(200, {"action": "exec"}))
    tmpdir = env.get("TMPDIR") or "/tmp"
    for entry in entries:
        refused = _hopeless(jan, entry, tmpdir)
        if refused is not None:
            body = {"action": "refuse", "say": refused, "log": f"refused: {refused}"}
            return ProbeDecision(Verdict(status_of("refused"), body))
    caller = int(call.get("writer_pid") or call["owner_pid"])
    return ProbeDecision(Verdict(200, {"action": "exec"}), AwaitingUse(entries, caller))


def mark_awaiting_use(jan: Janitor, marks: AwaitingUse) -> str:
    """Mark ``marks``' entries awaiting use by the prober, in one transaction; who it is, for
    the log. A caller gone already marks nothing (there is no use to await)."""
    from janitor.admission.awaiting import mark_awaiting
    from janitor.host.owner import choose_writer

    prober = choose_writer(marks.caller)
    if prober.start is None:
        return f"pid {prober.pid} (gone)"
    start = prober.start
    now = time.time()

    def write(tx: Any) -> None:
        for entry in marks.entries:
            mark_awaiting(tx, jan.policy, entry, owner_pid=prober.pid, owner_start=start, now=now)

    jan.ledger.call(write)
    return f"pid {prober.pid} ({prober.description})"


def probe_here(jan: Janitor, call: Mapping[str, Any]) -> Verdict:
    """A probe call decided in the caller's own process (no daemon): its marks made, then its
    verdict, with the ``guard.log`` line naming the prober (at DEBUG)."""
    decided = decide_probe(jan, call, policy_path=str(jan.settings.policy_path))
    if decided.then is None:
        return decided.verdict
    prober = mark_awaiting_use(jan, decided.then)
    names = ", ".join(e.path for e in decided.then.entries)
    body = {**decided.verdict.body, "log": f"awaiting use by {prober}: {names}", "debug": True}
    return Verdict(decided.verdict.status, body)


def _hopeless(jan: Janitor, entry: CacheEntry, tmpdir: str) -> str | None:
    """The line refusing a probe of ``entry`` whose alignment in ``tmpdir`` could never fit,
    or None. Cheap unless it is tight: the volume's capacity is worked out (a walk of its
    caches and job folders) only when the need passes what is free above the floor now."""
    from janitor.admission.jobs import capacity
    from janitor.admission.queue import had_room
    from janitor.admission.volume import Volume, read_volume

    need = fa_need(jan, entry.path, tmpdir)
    if need is None:
        return None
    tree = jan.policy.tree(need.tree)
    now = read_volume(jan.policy, tree)  # one statvfs while the volume is the one it was
    if need.bytes <= now.free - now.floor:
        return None
    vol = Volume.at(jan.policy, tree.path)
    window = jan.settings.forecast_window_s
    try:
        written = os.stat(entry.path).st_mtime
    except OSError:
        return None  # gone: ffprobe says so
    with jan.ledger.read() as tx:
        # Files outside every tree count as never freed, and an outside writer's burst is
        # such a file for a few seconds: a volume the daemon saw with the room within the
        # window is not one that can never have it (its first cut decides, as any other).
        # Only readings since the WAV was written: before, its own bytes were free space.
        if had_room(
            tx, vol.device, need.bytes, vol.floor, since=max(time.time() - window, written)
        ):
            return None
        cap = capacity(tx, jan.policy, vol, kept=frozenset((entry.path,)))
    if need.bytes <= cap.most:
        return None
    return (
        f"refused to probe {entry.path} for forced alignment: its cuts need "
        f"{format_size(need.bytes)} in {tmpdir} on volume {vol.mount}, which can never hold "
        f"them: capacity {format_size(cap.total)}, floor {format_size(cap.floor)}, "
        f"{format_size(cap.held)} held by files outside every reservation and cache leave at "
        f"most {format_size(cap.most)} even once every job ends, and it has not had that room in "
        f"the last {format_duration(window)}. Free space on {vol.mount} or use a bigger disk; "
        "ffprobe did not run"
    )
