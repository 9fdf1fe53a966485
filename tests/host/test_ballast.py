"""janitor.host.ballast on a real tmpfs: real blocks allocated, real space given back.

Free space is read with statvfs before and after; allocation is read from ``st_blocks``.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from janitor.host.ballast import BALLAST_NAME, Ballast, ballast_path
from tests._fixtures.space import MiB, free_of


def test_create_allocates_real_blocks_and_release_gives_them_back(
    tmpfs: Callable[..., Path],
) -> None:
    mount = tmpfs("16m")
    size = 4 * MiB
    b = Ballast(mount / "ballast", size)
    assert not b.present()
    before = free_of(mount)

    assert b.create() is True
    st = os.lstat(b.path)
    assert st.st_blocks * 512 >= size  # allocated, not sparse
    assert st.st_size >= size
    assert b.present()
    assert before - free_of(mount) >= size  # the volume really lost that much
    assert not b.path.with_name(b.path.name + ".tmp").exists()
    assert oct(st.st_mode & 0o777) == oct(0o600)

    allocated = free_of(mount)
    assert b.create() is True  # already there: nothing more is taken
    assert free_of(mount) == allocated

    freed = b.release()
    assert freed >= size
    assert not b.path.exists() and not b.present()
    assert free_of(mount) == before  # every block came back
    assert b.release() == 0


def test_create_without_room_returns_false_and_leaves_nothing(
    tmpfs: Callable[..., Path], fill: Callable[..., Path]
) -> None:
    mount = tmpfs("8m")
    fill(mount / "filler", 5 * MiB)
    before = free_of(mount)
    b = Ballast(mount / "ballast", 4 * MiB)  # 3 MiB are left

    assert b.create() is False
    assert sorted(p.name for p in mount.iterdir()) == ["filler"]  # no ballast, no .tmp
    assert not b.present()
    assert free_of(mount) == before  # a partial allocation was given back


def test_create_on_a_completely_full_volume(
    tmpfs: Callable[..., Path], fill_until_full: Callable[[Path], int]
) -> None:
    mount = tmpfs("4m")
    fill_until_full(mount / "filler")
    b = Ballast(mount / "ballast", MiB)
    assert b.create() is False
    assert sorted(p.name for p in mount.iterdir()) == ["filler"]


def test_a_sparse_file_at_the_ballast_path_is_not_ballast(tmpfs: Callable[..., Path]) -> None:
    mount = tmpfs("16m")
    path = mount / "ballast"
    with open(path, "wb") as fh:
        fh.truncate(4 * MiB)  # the right size, but no blocks behind it
    b = Ballast(path, 4 * MiB)
    assert not b.present()
    before = free_of(mount)
    assert b.create() is True
    assert b.present()
    assert before - free_of(mount) >= 4 * MiB


def test_ballast_path_prefers_the_state_dir_on_the_same_volume(
    tmpfs: Callable[..., Path], tmp_path: Path
) -> None:
    mount = tmpfs("8m")
    state = mount / "state"
    tree = mount / "cache"
    state.mkdir()
    tree.mkdir()
    dev = os.stat(mount).st_dev
    assert ballast_path(state, [tree], dev) == state / f"ballast-{dev}"

    # The state dir elsewhere: beside (never inside) the first tree root on the volume.
    other_state = tmp_path / "state-elsewhere"
    other_state.mkdir()
    assert ballast_path(other_state, [tree], dev) == mount / BALLAST_NAME

    # Neither on the volume: no place.
    assert ballast_path(other_state, [other_state / "x"], dev) is None
