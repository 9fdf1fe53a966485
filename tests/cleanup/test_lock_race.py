"""Converters racing the janitor on one media-cache entry, in real processes.

batchalign3's converter opens ``{fp}.wav.lock`` (creating it), takes an exclusive ``flock``,
converts only if ``{fp}.wav`` is missing, and never checks that the inode it locked is still the
one the name points at. So the lock works only while the lock file is never unlinked: a converter
that opened it just before an unlink locks a dead inode while the next one creates a new file,
and both convert at once. These tests run such converters against an evicting janitor.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from janitor import Janitor
from janitor.cleanup.apply import apply
from janitor.cleanup.kinds import group_units
from janitor.cleanup.plan import Protection, plan_tree
from janitor.cleanup.scan import scan
from janitor.host.inuse import prepare_leases
from janitor.host.space import volume_stats
from tests._enforce_helpers import cache_tree, fp

#: A converter as batchalign3 writes one: lock, re-check, convert under the lock, unlock. It
#: counts the times it found another conversion of the same entry running (the O_EXCL marker
#: already there) or its own output gone before the rename: either means the lock was broken.
_CONVERTER = r"""
import fcntl, os, random, sys, time
folder, key, stop, limit = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
lock, wav, tmp = (os.path.join(folder, key + s) for s in (".wav.lock", ".wav", ".tmp.wav"))
rng = random.Random(os.getpid())
converted = clashes = 0
while not os.path.exists(stop) and time.time() < limit:
    fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        if not os.path.exists(wav):
            try:
                out = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
            except FileExistsError:
                clashes += 1  # another converter is converting this entry right now
            else:
                os.write(out, b"\x01" * 16384)
                time.sleep(0.002)  # ffmpeg takes a while
                os.close(out)
                try:
                    os.rename(tmp, wav)
                    converted += 1
                except FileNotFoundError:
                    clashes += 1  # removed under us while we held the lock
        fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)
    time.sleep(rng.uniform(0, 0.002))
print(converted, clashes, flush=True)
"""

CONVERTERS = 4
RUN_S = 3.0  # at least; then on until both sides have done it 20 times (at most LIMIT_S)
LIMIT_S = 120.0


def test_evicting_an_entry_never_breaks_the_converters_lock(
    tmp_path: Path, write_policy: Callable[..., Path]
) -> None:
    """Converters loop on one entry while the janitor evicts it as fast as it can (quota of one
    byte, no minimum age): no two converters ever convert it at once, and neither side starves.
    """
    root = tmp_path / "media_cache"
    root.mkdir()
    key = fp(7)
    policy = write_policy(
        {"cache": cache_tree(root, quota="1", low_watermark="0%", min_age="0s")}, floor="1MiB"
    )
    jan = Janitor.from_settings(policy=policy)
    tree = jan.policy.tree("cache")
    total = volume_stats(root).total
    prepare_leases()  # write leases, as in a sweep: the late opener waits on them
    start = time.time()
    stop = tmp_path / "stop"  # the converters loop until it exists
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _CONVERTER, str(root), key, str(stop), repr(start + LIMIT_S)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(CONVERTERS)
    ]
    evicted = rounds = 0
    try:
        # A fixed time is not enough on a loaded machine: on until 20 evictions (each needs a
        # conversion first), bounded by LIMIT_S.
        while time.time() < start + RUN_S or (evicted < 20 and time.time() < start + LIMIT_S):
            snap = scan(root)
            plan = plan_tree(
                snap,
                group_units(snap, tree),
                tree,
                volume_total=total,
                protection=Protection(),  # the deleter's own checks only: the lock, leases
                now=time.time(),
            )
            evicted += apply(plan, ledger=None).deleted_units
            rounds += 1
        stop.touch()
        results = [p.communicate(timeout=30) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
            p.wait()
        jan.ledger.close()
    converted = clashes = 0
    for p, (out, err) in zip(procs, results, strict=True):
        assert p.returncode == 0, err
        c, k = map(int, out.split())
        converted += c
        clashes += k
    assert clashes == 0, (
        f"{clashes} conversions ran while another converter of the same entry was converting "
        f"({converted} conversions, {evicted} evictions in {rounds} rounds): the lock was broken"
    )
    # Both sides really ran: the race was there to be lost.
    assert evicted >= 20 and converted >= 20, (evicted, converted, rounds)
    assert os.path.exists(root / f"{key}.wav.lock")
