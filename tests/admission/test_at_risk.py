"""Stop the fewest jobs, and only while needed: the at-risk decision on a real tmpfs.

Below its floor a volume must still hold what running jobs will write plus half the floor; the
fewest reservations whose stopping covers what is missing are put at risk (most outstanding
bytes first, then the newest), after caches were evicted; every mark is cleared the moment free
space is back above the floor. Admission and the decision read the same numbers, so status, the
API, ``check --reservation`` and ``Reservation.check()`` agree. The reservations belong to real
processes; the outside writer is a real file on the tmpfs.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from janitor import Janitor, SpaceRisk
from janitor.admission.risk import Claim, choose_at_risk, stop_deficit
from tests._daemon_helpers import daemon_setup, eventually, running_daemon
from tests._fixtures import forkserver
from tests._fixtures.console import JANITOR_BIN
from tests._fixtures.holder import Holder
from tests._fixtures.space import MiB, fill_file, free_of
from tests._fixtures.volumes import Volume

MakeVolume = Callable[..., Volume]
HolderFor = Callable[[Path, str, int], Holder]


# -- the rule, as a pure function ---------------------------------------------------------------


def test_nobody_is_chosen_above_the_floor_or_while_running_jobs_still_fit() -> None:
    assert stop_deficit(free=10 * MiB, floor=8 * MiB, reserved=50 * MiB) == 0  # above the floor
    # 7 MiB free holds 3 MiB still to write plus half the 8 MiB floor: a dip, nobody stops.
    assert stop_deficit(free=7 * MiB, floor=8 * MiB, reserved=3 * MiB) == 0
    assert stop_deficit(free=7 * MiB, floor=8 * MiB, reserved=5 * MiB) == 2 * MiB


def test_the_fewest_are_chosen_most_outstanding_first_then_newest() -> None:
    claims = [
        Claim("old-big", 6, created=1.0),
        Claim("small", 2, created=2.0),
        Claim("new-big", 6, created=3.0),
        Claim("done", 0, created=4.0, written=50),  # nothing left to write: never chosen
    ]
    assert choose_at_risk(0, claims) == ()
    assert choose_at_risk(5, claims) == ("new-big",)
    assert choose_at_risk(7, claims) == ("new-big", "old-big")
    assert choose_at_risk(1000, claims) == ("new-big", "old-big", "small")
    # Written bytes count as freed (a stopped job removes its partial output).
    written = [Claim("a", 2, 1.0, written=10), Claim("b", 3, 2.0)]
    assert choose_at_risk(9, written) == ("b", "a")
    assert choose_at_risk(3, written) == ("b",)
    # Already at risk comes first, so a job already stopping is not joined by another.
    sticky = [Claim("told", 1, 1.0, at_risk=True), Claim("big", 9, 2.0)]
    assert choose_at_risk(1, sticky) == ("told",)


# -- real processes, no daemon: Reservation.check() decides ----------------------------------


def _fill_to(vol: Volume, free: int, name: str = "outside") -> Path:
    """An outside writer: a file on the tmpfs, outside every tree, leaving ``free`` free."""
    path = vol.mount / name
    need = free_of(vol.mount) - free
    assert need > 0
    fill_file(path, need)
    return path


@pytest.fixture
def vol(managed_volume: MakeVolume) -> Volume:
    """64 MiB tmpfs, floor 8 MiB (so half the floor is 4 MiB), cache tree ``t``."""
    return managed_volume(size="64m", floor="8MiB", quota="32MiB")


def _risky(jan: Janitor, ids: list[str]) -> list[str]:
    out = []
    for rid in ids:
        try:
            jan.check_risk(jan.get(rid))
        except SpaceRisk:
            out.append(rid)
    return out


def test_a_dip_below_the_floor_stops_only_the_fewest_and_clears_at_once(
    vol: Volume, holder: HolderFor
) -> None:
    a = holder(vol.policy, "t", 3 * MiB)
    b = holder(vol.policy, "t", 6 * MiB)
    c = holder(vol.policy, "t", 6 * MiB)
    jan = vol.janitor()
    ids = [a.id, b.id, c.id]
    assert _risky(jan, ids) == []
    outside = _fill_to(vol, 7 * MiB)  # 1 MiB below the floor
    # 7 MiB must hold 15 MiB still to write + 4 MiB: 12 MiB missing. c (newest of the two
    # 6 MiB jobs) and b cover it; a goes on.
    assert _risky(jan, ids) == [b.id, c.id]
    st = jan.status()
    assert st.level == "critical"
    assert sorted(r.id for r in st.reservations if r.at_risk) == sorted([b.id, c.id])
    # c stops and releases: what it freed counts, and nobody else is told.
    c.release()
    assert _risky(jan, [a.id, b.id]) == [b.id]
    # Free space back above the floor: nobody at risk, at once, everywhere.
    os.truncate(outside, os.path.getsize(outside) - 2 * MiB)
    assert _risky(jan, [a.id, b.id]) == []
    st = jan.status()
    assert st.level != "critical" and all(r.at_risk is None for r in st.reservations)
    assert jan.get(b.id).at_risk is None
    events = [e.event for e in jan.log() if e.event in ("at-risk", "risk-cleared")]
    assert events.count("at-risk") == 2


def test_caches_are_evicted_before_any_job_is_stopped(vol: Volume, holder: HolderFor) -> None:
    """Rebuildable bytes go first: a cache holding more than the deficit, and nobody stops."""
    old = time.time() - 86400
    for i in range(6):
        entry = vol.tree / f"{i:024x}.wav"
        fill_file(entry, 2 * MiB)
        os.utime(entry, (old, old))
    r = holder(vol.policy, "t", 6 * MiB)
    jan = vol.janitor()
    _fill_to(vol, 7 * MiB)  # 7 MiB must hold 6 + 4: 3 MiB missing
    assert _risky(jan, [r.id]) == []
    left = sorted(p.name for p in vol.tree.iterdir())
    assert len(left) < 6  # evicted, oldest first
    assert free_of(vol.mount) >= 7 * MiB + 2 * MiB
    assert [e.event for e in jan.log() if e.event == "at-risk"] == []


def test_check_reservation_and_status_json_agree(
    vol: Volume, holder: HolderFor, run_cli: Callable[..., subprocess.CompletedProcess[str]]
) -> None:
    small = holder(vol.policy, "t", 1 * MiB)
    big = holder(vol.policy, "t", 8 * MiB)
    outside = _fill_to(vol, 6 * MiB)  # 6 MiB must hold 9 + 4: 7 MiB missing, big covers it
    assert run_cli("check", "--reservation", big.id).returncode == 75
    assert run_cli("check", "--reservation", small.id).returncode == 0
    st = json.loads(run_cli("status", "--json").stdout)
    assert st["level"] == "critical"
    assert {r["id"]: bool(r["at_risk"]) for r in st["reservations"]} == {
        small.id: False,
        big.id: True,
    }
    os.unlink(outside)
    st = json.loads(run_cli("status", "--json").stdout)
    assert st["level"] == "ok" and all(r["at_risk"] is None for r in st["reservations"])
    assert run_cli("check", "--reservation", big.id).returncode == 0


# -- the daemon ----------------------------------------------------------------------------------


def test_a_reservation_granted_after_the_dip_is_not_stopped_by_a_lagging_level(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The damped level stays critical for settle_s after the dip; admission and the at-risk
    decision read free space itself, so a job granted meanwhile runs on."""
    with (
        daemon_setup(
            tmp_path, size="64m", volume={"floor": "8MiB"}, settings={"JANITOR_SETTLE_S": "30"}
        ) as setup,
        running_daemon(setup) as d,
    ):
        setup.apply_env(monkeypatch)
        jan = Janitor.from_settings()
        try:
            early = jan.reserve("cache", "6MiB", job="early")
            with d.events() as ev:
                outside = setup.mount / "outside"
                fill_file(outside, free_of(setup.mount) - 7 * MiB)
                ev.wait_for("at-risk", lambda e: e["reservation"] == early.id)
                with pytest.raises(SpaceRisk):
                    early.check()
                early.release()  # the job stopped
                os.unlink(outside)
                late = jan.reserve("cache", "20MiB", job="late")  # fits: 64 - 20 - 8 > 0
                seen = (d.volume_status() or {})["updated"]
                eventually(
                    lambda: (d.volume_status() or {}).get("updated", 0) > seen + 1.0,
                    what="more samples",
                )
                vs = d.volume_status() or {}
                assert vs["alert_level"] == "critical"  # damped: still settling
                assert vs["level"] == "ok" and vs["at_risk"] == 0
                late.check()
                with d.client() as c:
                    st = c.get("/v1/status").json()
                    assert st["level"] == "ok"
                    assert all(r["at_risk"] is None for r in st["reservations"])
                    metrics = c.get("/metrics").text
                mount = str(setup.mount)
                assert f'janitor_volume_level{{volume="{mount}"}} 0.0' in metrics
                assert f'janitor_volume_alert_level{{volume="{mount}"}} 2.0' in metrics
                assert f'janitor_reservations_at_risk{{volume="{mount}"}} 0.0' in metrics
                assert not [e for e in ev.find("at-risk") if e.data["reservation"] == late.id]
                late.release()
        finally:
            jan.ledger.close()


def test_a_restarted_daemon_clears_marks_it_cannot_justify(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with daemon_setup(tmp_path, size="64m", volume={"floor": "8MiB"}) as setup:
        setup.apply_env(monkeypatch)
        jan = Janitor.from_settings()
        try:
            r = jan.reserve("cache", "6MiB", job="j")
            outside = setup.mount / "outside"
            fill_file(outside, free_of(setup.mount) - 7 * MiB)
            with running_daemon(setup) as d:
                eventually(lambda: jan.get(r.id).at_risk is not None, what="marked")
                d.proc.send_signal(signal.SIGKILL)  # a crash: the mark stays in the ledger
                d.proc.wait()
            os.unlink(outside)
            assert _raw_flag(setup.ledger, r.id) is not None
            with running_daemon(setup):
                eventually(
                    lambda: _raw_flag(setup.ledger, r.id) is None, what="the stale mark cleared"
                )
            r.check()
            r.release()
        finally:
            jan.ledger.close()


def _raw_flag(ledger: Path, rid: str) -> str | None:
    """The reservation's at_risk column as stored, read on a connection of our own."""
    conn = sqlite3.connect(f"file:{ledger}?mode=ro", uri=True)
    try:
        row = conn.execute("SELECT at_risk FROM reservations WHERE id = ?", (rid,)).fetchone()
    finally:
        conn.close()
    return None if row is None else row[0]


# -- janitor exec: only the job that must stop is stopped -----------------------------------------

SLOW_WRITER = textwrap.dedent(
    """
    import os, sys, time
    out, total, marker = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    block = b"x" * 65536
    blocks = total // len(block)
    with open(out, "wb") as fh:
        for i in range(blocks):
            while i == blocks - 1 and os.path.exists(marker):
                time.sleep(0.02)  # the last block waits for the marker to go: still writing
            fh.write(block)
            fh.flush()
            os.fsync(fh.fileno())
            if os.path.exists(marker):
                time.sleep(0.02)
    """
)


def test_exec_stops_the_job_that_covers_the_deficit_and_lets_the_other_finish(
    vol: Volume, tmp_path: Path
) -> None:
    script = tmp_path / "w.py"
    script.write_text(SLOW_WRITER)
    slow = tmp_path / "slow"  # while it exists, writers pause, and hold their last block
    slow.touch()

    def start(name: str, size: int) -> subprocess.Popen[str]:
        out = vol.tree / name
        return forkserver.JanitorPopen(
            [str(JANITOR_BIN), "exec", "t", str(size), "--path", str(out), "--poll", "50ms",
             "--cleanup-on-fail", "--", sys.executable, str(script), str(out), str(size),
             str(slow)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip

    small = start("small.bin", 2 * MiB)
    big = start("big.bin", 12 * MiB)
    try:
        eventually(
            lambda: (vol.tree / "big.bin").exists() and (vol.tree / "small.bin").exists(),
            what="both writing",
        )
        # 6 MiB free must hold what both still write (~13 MiB) + 4: the big job covers it.
        outside = _fill_to(vol, 6 * MiB)
        _, err = big.communicate(timeout=60)
        assert big.returncode == 75, err
        assert "critical" in err and "fewest" in err
        assert not (vol.tree / "big.bin").exists()  # its partial output removed
        os.unlink(outside)
        slow.unlink()
        _, err = small.communicate(timeout=60)
        assert small.returncode == 0, err
        assert os.path.getsize(vol.tree / "small.bin") == 2 * MiB
    finally:
        for p in (small, big):
            if p.poll() is None:
                p.kill()
                p.wait()
