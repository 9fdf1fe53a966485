"""The ledger's writer lock, with real processes: exclusion, arrival order, timeouts, crashes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from janitor.errors import LedgerError
from janitor.ledger.writelock import FairQueueWriterLock, WriterLock
from janitor.ledger.writelock.fairqueue import _COUNTER

needs_queue = pytest.mark.skipif(
    WriterLock is not FairQueueWriterLock, reason="the arrival-order queue needs Linux OFD locks"
)

# A child that takes the lock, appends its name to a file while holding it, then lets go.
CHILD = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from janitor.ledger.writelock import WriterLock
    lock = WriterLock(Path(sys.argv[1]), timeout=30)
    lock.acquire()
    with open(sys.argv[2], "a") as out:
        out.write(sys.argv[3] + "\\n")
    time.sleep(float(sys.argv[4]))
    lock.release()
    """
)


def _ticket(path: Path) -> int:
    raw = path.read_bytes()[_COUNTER : _COUNTER + 8] if path.exists() else b""
    return int.from_bytes(raw, "little") if len(raw) == 8 else 0


def _bell(lock: Path, ticket: int) -> bytes:
    """The abstract socket name of ``ticket``'s doorbell on this lock file."""
    st = lock.stat()
    return b"\0space-janitor/%x/%x/%x" % (st.st_dev, st.st_ino, ticket)


def _child(lock: Path, out: Path, name: str, hold: float = 0.0) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-c", CHILD, str(lock), str(out), name, str(hold)],
    )


def _wait_for(cond: object, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise AssertionError("timed out waiting")
        time.sleep(0.01)


@needs_queue
def test_writers_get_the_lock_in_arrival_order(tmp_path: Path) -> None:
    path, out = tmp_path / "ledger.lock", tmp_path / "order"
    lock = WriterLock(path, timeout=30)
    lock.acquire()
    children = []
    for i in range(6):
        before = _ticket(path)
        children.append(_child(path, out, f"w{i}"))
        _wait_for(lambda b=before: _ticket(path) > b)  # queued before the next one starts
    assert not out.exists()  # nobody got in while we hold it
    lock.release()
    for c in children:
        assert c.wait(30) == 0
    assert out.read_text().split() == [f"w{i}" for i in range(6)]


def test_only_one_holder_at_a_time(tmp_path: Path) -> None:
    path, out = tmp_path / "ledger.lock", tmp_path / "order"
    lock = WriterLock(path, timeout=30)
    lock.acquire()
    child = _child(path, out, "child")
    time.sleep(0.3)
    assert not out.exists()
    lock.release()
    assert child.wait(30) == 0
    assert out.read_text() == "child\n"


def test_a_held_lock_times_out_with_a_clear_error_then_works_again(tmp_path: Path) -> None:
    path, out = tmp_path / "ledger.lock", tmp_path / "order"
    holder = _child(path, out, "holder", hold=1.5)
    _wait_for(out.exists)
    lock = WriterLock(path, timeout=0.3)
    t0 = time.monotonic()
    with pytest.raises(LedgerError, match=r"stayed held for 0.3s.*lock_timeout_s"):
        lock.acquire()
    assert time.monotonic() - t0 < 1.2
    assert holder.wait(30) == 0
    lock.timeout = 5
    lock.acquire()  # the abandoned wait let go of what it got late
    lock.release()
    other = _child(path, out, "after")
    assert other.wait(30) == 0
    assert out.read_text().split() == ["holder", "after"]


def test_a_killed_holder_does_not_block_the_next_writer(tmp_path: Path) -> None:
    path, out = tmp_path / "ledger.lock", tmp_path / "order"
    holder = _child(path, out, "holder", hold=60)
    _wait_for(out.exists)
    os.kill(holder.pid, signal.SIGKILL)
    holder.wait(10)
    lock = WriterLock(path, timeout=5)
    t0 = time.monotonic()
    lock.acquire()
    assert time.monotonic() - t0 < 1.0
    lock.release()


def test_threads_of_one_process_exclude_each_other(tmp_path: Path) -> None:
    import threading

    lock = WriterLock(tmp_path / "ledger.lock", timeout=30)
    inside = 0
    worst = 0
    guard = threading.Lock()

    def work() -> None:
        nonlocal inside, worst
        for _ in range(200):
            lock.acquire()
            with guard:
                inside += 1
                worst = max(worst, inside)
            time.sleep(0)
            with guard:
                inside -= 1
            lock.release()
        lock.close()

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert worst == 1


def _helper_threads() -> set[int]:
    """The lock's helper threads alive in this process (earlier tests may have left some)."""
    import threading

    return {id(t) for t in threading.enumerate() if t.name == "janitor-ledger-lock"}


@needs_queue
def test_a_waiter_is_let_in_by_its_doorbell_on_its_own_thread(tmp_path: Path) -> None:
    """A queued writer sleeps on its doorbell, not in a helper thread blocked on the slot."""
    path, out = tmp_path / "ledger.lock", tmp_path / "order"
    holder = _child(path, out, "holder", hold=0.5)
    _wait_for(out.exists)
    lock = WriterLock(path, timeout=30)
    helpers = _helper_threads()
    lock.acquire()  # queued behind the holder until it leaves and rings
    assert _helper_threads() == helpers
    with open(out, "a") as fh:
        fh.write("parent\n")
    lock.release()
    lock.close()
    assert holder.wait(30) == 0
    assert out.read_text().split() == ["holder", "parent"]


@needs_queue
def test_a_writer_killed_while_others_wait_on_it_lets_the_queue_go_on(tmp_path: Path) -> None:
    """A dead predecessor never rings: its successor finds the slot free on its own."""
    path, out = tmp_path / "ledger.lock", tmp_path / "order"
    holder = _child(path, out, "holder", hold=60)
    _wait_for(out.exists)
    before = _ticket(path)
    waiter = _child(path, out, "waiter")
    _wait_for(lambda: _ticket(path) > before)  # queued behind the holder
    os.kill(holder.pid, signal.SIGKILL)
    holder.wait(10)
    assert waiter.wait(30) == 0
    assert out.read_text().split() == ["holder", "waiter"]


@needs_queue
def test_a_doorbell_name_taken_by_a_stranger_falls_back_to_blocking(tmp_path: Path) -> None:
    import socket

    path, out = tmp_path / "ledger.lock", tmp_path / "order"
    holder = _child(path, out, "holder", hold=0.5)
    _wait_for(out.exists)
    stranger = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    # The name the next ticket's doorbell would take.
    stranger.bind(_bell(path, _ticket(path)))
    try:
        lock = WriterLock(path, timeout=30)
        helpers = _helper_threads()
        lock.acquire()
        assert _helper_threads() - helpers  # it waited the old way, in a helper thread
        lock.release()
        lock.close()
    finally:
        stranger.close()
    assert holder.wait(30) == 0
    after = _child(path, out, "after")
    assert after.wait(30) == 0
    assert out.read_text().split() == ["holder", "after"]


@needs_queue
def test_the_holder_tells_its_successor_to_get_ready_then_to_go(tmp_path: Path) -> None:
    """On taking the lock a writer rings the next ticket's doorbell "ready" (it stays awake
    for about a turn), on leaving it rings "go"."""
    import socket

    from janitor.ledger.writelock.fairqueue import _GO, _READY

    path = tmp_path / "ledger.lock"
    path.touch()
    ticket = _ticket(path)
    successor = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    successor.bind(_bell(path, ticket + 1))
    successor.settimeout(5)
    lock = WriterLock(path, timeout=30)
    try:
        lock.acquire()
        assert successor.recv(16) == _READY
        lock.release()
        assert successor.recv(16) == _GO
    finally:
        lock.close()
        successor.close()


# A waiter that would sleep a minute between looks at its slot unless told to stay awake, and
# stays awake for as long as the test needs when told.
PATIENT_CHILD = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    import janitor.ledger.writelock as w
    w._RECHECK_S, w._SPIN_S = 60.0, 30.0
    lock = w.WriterLock(Path(sys.argv[1]), timeout=120)
    lock.acquire()
    with open(sys.argv[2], "a") as out:
        out.write("waiter\\n")
    lock.release()
    """
)


@needs_queue
def test_a_successor_told_to_get_ready_takes_the_lock_without_the_go(tmp_path: Path) -> None:
    """After "ready" the next writer polls its predecessor's slot: it gets in the moment the
    slot is let go, with no "go" rung (here none is: the holder is this test, by hand)."""
    import socket

    from janitor.host.ofdlock import lock_byte, unlock_byte
    from janitor.ledger.writelock.fairqueue import _READY, _SLOTS

    path, out = tmp_path / "ledger.lock", tmp_path / "order"
    path.touch()
    fd = os.open(path, os.O_RDWR)  # ticket 0, held by hand
    os.pwrite(fd, (1).to_bytes(8, "little"), _COUNTER)
    lock_byte(fd, _SLOTS)
    waiter = subprocess.Popen([sys.executable, "-c", PATIENT_CHILD, str(path), str(out)])
    ringer = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    try:
        _wait_for(lambda: _ticket(path) == 2)  # it took ticket 1

        def rung() -> bool:
            try:
                ringer.sendto(_READY, _bell(path, 1))
            except OSError:
                return False  # its doorbell is not bound yet
            return True

        _wait_for(rung)
        time.sleep(0.2)  # it is polling now; let it see the slot held a while
        unlock_byte(fd, _SLOTS)  # leave, ringing nothing
        assert waiter.wait(30) == 0  # without the polling it would sleep a minute
        assert out.read_text().split() == ["waiter"]
    finally:
        ringer.close()
        os.close(fd)
        if waiter.poll() is None:
            waiter.kill()
            waiter.wait()


@needs_queue
def test_a_writer_that_times_out_rings_no_ready_and_lets_the_next_one_go(tmp_path: Path) -> None:
    """Only a writer that got the lock tells its successor to get ready; one that gave up
    says "go" (its turn passes on), never "ready"."""
    import fcntl
    import socket

    from janitor.ledger.writelock.fairqueue import _GO

    path = tmp_path / "ledger.lock"
    path.touch()
    squatter = os.open(path, os.O_RDWR)  # holds the flock outside the queue
    fcntl.flock(squatter, fcntl.LOCK_EX)
    successor = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    successor.bind(_bell(path, _ticket(path) + 1))
    successor.settimeout(5)
    lock = WriterLock(path, timeout=0.2)
    try:
        with pytest.raises(LedgerError, match="stayed held"):
            lock.acquire()
        assert successor.recv(16) == _GO
        successor.settimeout(0.3)
        with pytest.raises(TimeoutError):
            successor.recv(16)
    finally:
        lock.close()
        successor.close()
        os.close(squatter)
