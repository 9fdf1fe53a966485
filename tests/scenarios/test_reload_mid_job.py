"""A job known to the ledger stays that job until it ends, whatever the policy now says (issue 33
item 5).

A policy reload mid-job may drop the job's tree, move its root or spell it another way (a
symlink to the same folder). The job's later cuts are still the job's: they draw on its
working set, nothing is counted twice, and an admitted file is never refused midway.

Everything is real where a process is involved: the daemon (reloading the rewritten policy
file), the guard ``janitor shim install`` writes (both front ends, through the ``front_end``
fixture), the pipeline simulator (tests/pipeline_sim.py), ffmpeg, a tmpfs; the library tests
swap the policy of a :class:`~janitor.core.Janitor` as the daemon's reload does.
"""

from __future__ import annotations

import os
import shutil
import signal
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests._daemon_helpers import eventually, running_daemon
from tests._fixtures.pipeline import PCM_RATE
from tests._fixtures.space import MiB, fill_file, free_of

from .test_jobs import JOB_TREE, Lib, Site, cuts_of, finish, site

pytestmark = pytest.mark.skipif(
    shutil.which("ffmpeg") is None or shutil.which("ffprobe") is None,
    reason="ffmpeg/ffprobe not installed (Debian package ffmpeg; .ci/run installs it)",
)

#: The recording: 120 s cut in 8 groups of 15 s (a cut is 960,000 bytes; its cached WAV holds
#: 120 x 32,000 bytes and a 44-byte header; its working set 120 x 64,000 bytes).
SECONDS, GROUPS, GROUP_S = 120, 8, 15
WAV_BYTES = SECONDS * 32_000 + 44
WORKING_SET = SECONDS * PCM_RATE


def _tight(s: Site) -> None:
    """Fill the volume so that the job fits with less than one cut to spare: a later cut
    counted again beside the working set (as another write's) cannot fit."""
    spare = GROUP_S * PCM_RATE // 2
    need = WAV_BYTES + WORKING_SET + spare
    fill_file(s.setup.mount / "other" / "data.bin", free_of(s.setup.mount) - 8 * MiB - need)


def _mid_job(s: Site, tmp_path: Path, m4a: Callable[[float], Path]) -> tuple[Any, Path]:
    """The simulator, stopped (SIGSTOP) after its second cut: (the process, its report)."""
    report = tmp_path / "report.jsonl"
    proc = s.start(
        "--groups", str(GROUPS), "--group-s", str(GROUP_S), "--pause-s", "0.3", "--report",
        report, m4a(SECONDS), JANITOR_GUARD_WAIT_S="0",
    )  # fmt: skip
    eventually(lambda: len(cuts_of(report)) >= 2, timeout=60, what="the job's second cut")
    proc.send_signal(signal.SIGSTOP)  # between two cuts, or in one: its guard goes on
    return proc, report


def _job_grants(s: Site) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(the working sets granted, the grants of single writes into job folders)."""
    log = s.log()
    grants = [e for e in log if e["event"] == "grant"]
    sets = [e for e in grants if e["detail"].get("job_id")]
    others = [e for e in grants if not e["detail"].get("job_id") and "fa_v2" in (e["path"] or "")]
    return sets, others


@pytest.mark.usefixtures("front_end")
def test_a_job_whose_tree_a_reload_drops_goes_on_drawing_on_its_working_set(
    tmp_path: Path, m4a: Callable[[float], Path]
) -> None:
    """The daemon reloads a policy without the job's tree (the file rewritten, and SIGHUP)
    after the job's second cut. Every later cut is still the job's: drawn on its working set, with
    no new grant and nothing counted twice, on a volume where counting a cut twice leaves no
    room. (Before, each later cut was another write beside the job, its own working set
    counted as "reserved by others", and refused.)"""
    with site(tmp_path, size="64m", floor="8MiB") as s:
        with running_daemon(s.setup) as daemon, daemon.events() as ev:
            _tight(s)
            proc, report = _mid_job(s, tmp_path, m4a)
            s.setup.write_policy(trees={k: v for k, v in s.setup.trees.items() if k != "job_tmp"})
            daemon.signal(signal.SIGHUP)  # as an operator does: at once, whatever the watch saw
            ev.wait_for("policy-reloaded", lambda d: "job_tmp" not in d["trees"], timeout=30)
            proc.send_signal(signal.SIGCONT)
            code, _, err = finish(proc)
            status = s.status()
            sets, others = _job_grants(s)
        said = s.setup.log_file.read_text()
    assert code == 0, err
    assert "1 running job whose folder the new policy no longer puts in its tree" in said, said
    cuts = cuts_of(report)
    assert len(cuts) == GROUPS and all(c["bytes"] == GROUP_S * PCM_RATE for c in cuts), cuts
    assert len(sets) == 1 and abs(sets[0]["bytes"] - WORKING_SET) < PCM_RATE // 10, sets
    assert others == [], others  # no cut reserved again beside the working set
    assert status["reservations"] == [], status["reservations"]  # the job ended with its folder


def test_a_job_whose_tree_root_is_respelled_stays_one_job(
    tmp_path: Path, m4a: Callable[[float], Path], front_end: str
) -> None:
    """The job tree's root given another spelling of the same folder (a symlink to it, as
    ``/tmp`` is ``/private/tmp`` on macOS) while the job runs: its later cuts, written as the
    pipeline names them, stay the same job (found by its folder's identity): one job, one
    working set. (Before, the job was recorded again under the new spelling, with a second
    working set that did not fit.)"""
    with site(tmp_path, size="64m", floor="8MiB") as s:
        link = tmp_path / "tmp-link"
        link.symlink_to(s.tmp)
        with running_daemon(s.setup) as daemon, daemon.events() as ev:
            _tight(s)
            proc, report = _mid_job(s, tmp_path, m4a)
            trees = {**s.setup.trees, "job_tmp": {**s.setup.trees["job_tmp"], "path": str(link)}}
            s.setup.write_policy(trees=trees)
            ev.wait_for("policy-reloaded", timeout=30)
            proc.send_signal(signal.SIGCONT)
            code, _, err = finish(proc)
            # The job ends with its folder (the daemon reaps it within its reap interval).
            eventually(lambda: s.status()["jobs"] == [],
                       timeout=30, what="the job's end")  # fmt: skip
            sets, others = _job_grants(s)
    assert code == 0, err
    assert len(cuts_of(report)) == GROUPS
    assert len(sets) == 1 and others == [], (sets, others)


# -- the library, its policy swapped as the daemon's reload swaps it -------------------------------


@dataclass
class Swap:
    """A Janitor on a tmpfs (:class:`~tests.scenarios.test_jobs.Lib`) and its policy's tree
    tables, to reload it without some of them."""

    lib: Lib
    tables: dict[str, dict[str, Any]]
    write_policy: Callable[..., Path]

    def drop(self, *names: str) -> None:
        """Give the Janitor the policy less the trees ``names``, as the daemon's reload does."""
        from janitor.config.policy import load_policy

        kept = {n: t for n, t in self.tables.items() if n not in names}
        path = self.write_policy(kept, floor="4MiB", name="reloaded.toml", activate=False)
        self.lib.jan.policy = load_policy(path)


@pytest.fixture
def swap(tmpfs: Callable[..., Path], write_policy: Callable[..., Path]) -> Iterator[Swap]:
    """A tmpfs with a job tree and a cache tree beside it, a source outside both."""
    from janitor import Janitor

    mount = tmpfs("32m")
    tmp, cache = mount / "tmp", mount / "cache"
    tmp.mkdir()
    cache.mkdir()
    src = mount / "talk.wav"
    src.write_bytes(b"\0" * 4096)
    tables = {
        "job_tmp": {**JOB_TREE, "path": str(tmp), "min_age": "0s"},
        "media_cache": {"role": "cache", "path": str(cache), "quota": "8MiB"},
    }
    jan = Janitor.from_settings(policy=write_policy(tables, floor="4MiB"))
    yield Swap(Lib(jan, mount, tmp, src), tables, write_policy)
    jan.ledger.close()


def _window(lib: Lib, folder: str, name: str, start_s: int, nbytes: int, whole: int) -> Any:
    """A cut of the window that starts at ``start_s`` (its bytes: its length)."""
    from dataclasses import replace

    req = lib.cut(folder, 0, nbytes, whole)
    (w,) = req.writes
    out = str(Path(w.path).with_name(name))
    span = nbytes * 1_000_000 // PCM_RATE
    window = replace(w, path=out, start_us=start_s * 1_000_000, end_us=start_s * 1_000_000 + span)
    return replace(req, writes=(window,))


def test_a_jobs_cuts_after_its_tree_is_dropped_are_its_own_and_may_grow(swap: Swap) -> None:
    """Its tree dropped, the job's later cut draws on its working set (one reservation, no new
    grant); a window cut again is growth on that same working set, held to the volume's numbers
    the policy now gives (a tree still on the volume); its folder removed, the job ends and
    its working set with it."""
    from janitor.guarding.close import close_writes
    from janitor.guarding.wait import open_writes

    lib = swap.lib
    whole = 2 * PCM_RATE * 10  # 20 s
    first = open_writes(lib.jan, _window(lib, ".tmpjob", "g0.pcm", 0, PCM_RATE, whole))
    (held,) = first.writes
    fill_file(Path(held.output), PCM_RATE)
    close_writes(lib.jan, first.own, first.pins, draws=first.draws)
    swap.drop("job_tmp")
    later = open_writes(lib.jan, _window(lib, ".tmpjob", "g1.pcm", 1, PCM_RATE, whole))
    assert [w.reservation for w in later.writes] == [held.reservation]
    fill_file(Path(later.writes[0].output), PCM_RATE)
    close_writes(lib.jan, later.own, later.pins, draws=later.draws)
    again = open_writes(lib.jan, _window(lib, ".tmpjob", "g1-again.pcm", 1, PCM_RATE, whole))
    assert [w.reservation for w in again.writes] == [held.reservation]
    close_writes(lib.jan, again.own, again.pins, draws=again.draws)
    log = lib.jan.log()
    assert [e.bytes for e in log if e.event == "grant"] == [whole]
    assert [e.event for e in log if e.event == "recut"] == ["recut"]
    (job,) = lib.jan.jobs()
    assert job.tree == "job_tmp" and job.folder == str(lib.tmp / ".tmpjob")
    shutil.rmtree(lib.tmp / ".tmpjob")
    lib.jan.reap()
    assert lib.jan.jobs() == [] and lib.jan.reservations() == []


def test_a_job_on_a_volume_no_tree_covers_any_more_keeps_its_working_set(swap: Swap) -> None:
    """Every tree on its volume dropped: the job's later cuts still draw on its working set
    (the volume is no longer covered, but a known job stays its job until it ends), and a cut
    past it is held to the numbers of the policy's ``[volume]`` table, as for every volume."""
    from janitor.errors import ReservationRefused
    from janitor.guarding.close import close_writes
    from janitor.guarding.wait import open_writes

    lib = swap.lib
    whole = 2 * MiB
    first = open_writes(lib.jan, lib.cut(".tmpjob", 0, MiB, whole))
    (held,) = first.writes
    fill_file(Path(held.output), MiB)
    close_writes(lib.jan, first.own, first.pins, draws=first.draws)
    swap.drop("job_tmp", "media_cache")
    assert lib.jan.policy.trees == {}
    later = open_writes(lib.jan, lib.cut(".tmpjob", 1, MiB, whole))
    assert [w.reservation for w in later.writes] == [held.reservation]
    fill_file(Path(later.writes[0].output), MiB)
    close_writes(lib.jan, later.own, later.pins, draws=later.draws)
    # Past the working set by more than the volume has above its floor: refused, as growth.
    with pytest.raises(ReservationRefused) as refused:
        open_writes(lib.jan, lib.cut(".tmpjob", 2, free_of(lib.mount), whole))
    assert refused.value.floor == 4 * MiB and refused.value.tree == "job_tmp"
    assert [e.bytes for e in lib.jan.log() if e.event == "grant"] == [whole]
    assert os.path.isdir(lib.tmp / ".tmpjob")
