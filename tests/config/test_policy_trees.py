"""Which tree holds a path, and which trees share a volume: ``tree_holding`` and
``trees_by_device``, the one place each question is answered (admission, the guard's writes,
pins and touches, sweeps, make-room, emergency, `janitor space`, doctor and the daemon ask)."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from janitor.config.policy import TreePolicy, tree_holding, trees_by_device


def tree(name: str, path: Path, **extra: object) -> TreePolicy:
    return TreePolicy.model_validate({"name": name, "role": "cache", "path": path, **extra})


# -- tree_holding --------------------------------------------------------------------------------


def test_a_path_below_a_root_is_held_by_its_tree_and_recorded_under_that_root(
    tmp_path: Path,
) -> None:
    a, b = tree("a", tmp_path / "a"), tree("b", tmp_path / "b")
    (tmp_path / "b" / "sub").mkdir(parents=True)
    inside = tree_holding([a, b], tmp_path / "b" / "sub" / "x.wav")
    assert inside is not None
    assert inside.tree is b and inside.name == "b"
    assert inside.path == str(tmp_path / "b" / "sub" / "x.wav")
    # A file not written yet, in a folder not made yet, is held all the same.
    later = tree_holding([a, b], str(tmp_path / "a" / "new" / "deeper" / "y.pcm"))
    assert later is not None and later.name == "a"


def test_a_path_outside_every_tree_is_held_by_none(tmp_path: Path) -> None:
    trees = [tree("cache", tmp_path / "cache"), tree("tmp", tmp_path / "tmp")]
    (tmp_path / "cache").mkdir()
    assert tree_holding(trees, tmp_path / "elsewhere" / "x") is None
    assert tree_holding(trees, tmp_path) is None
    # A name that only starts like a root is not inside it.
    assert tree_holding(trees, tmp_path / "cache2" / "x") is None
    assert tree_holding(trees, str(tmp_path / "cachex")) is None
    # A root is no path of its tree (nothing is reserved or pinned on a whole tree).
    assert tree_holding(trees, tmp_path / "cache") is None
    assert tree_holding(trees, f"{tmp_path}/cache/") is None
    assert tree_holding(trees, f"{tmp_path}/cache/\0x") is None
    assert tree_holding([], tmp_path / "cache" / "x") is None


@pytest.mark.parametrize("outer_first", [True, False])
def test_nested_trees_the_innermost_holds_its_paths_whatever_the_order(
    tmp_path: Path, outer_first: bool
) -> None:
    """The shipped policy nests batchalign3's staging folder inside its state folder, which
    leaves it out with ``exclude``: a path there is the staging tree's."""
    state = tmp_path / ".batchalign3"
    (state / "jobs" / "j1").mkdir(parents=True)
    outer = tree("logs", state, role="scratch", exclude=["jobs/*"])
    inner = tree("jobs", state / "jobs", role="scratch", units="dir")
    trees = [outer, inner] if outer_first else [inner, outer]
    job_file = tree_holding(trees, state / "jobs" / "j1" / "upload.wav")
    assert job_file is not None and job_file.name == "jobs"
    assert job_file.path == str(state / "jobs" / "j1" / "upload.wav")
    log = tree_holding(trees, state / "server.log")
    assert log is not None and log.name == "logs"
    # The inner root itself lies in the outer tree's folder.
    root = tree_holding(trees, state / "jobs")
    assert root is not None and root.name == "logs"


def test_symlinks_are_resolved_for_the_test_and_the_path_recorded_under_the_root(
    tmp_path: Path,
) -> None:
    real = tmp_path / "real"
    (real / "sub").mkdir(parents=True)
    (tmp_path / "alias").symlink_to(real)
    outside = tmp_path / "outside"
    outside.mkdir()
    (real / "escape").symlink_to(outside)
    cache = tree("cache", tmp_path / "alias")  # the policy names the root through a symlink
    through = tree_holding([cache], real / "sub" / "x")
    assert through is not None
    assert through.path == str(tmp_path / "alias" / "sub" / "x")  # as a scan of it sees it
    # A symlink inside the tree that leads out of it leads out of the tree.
    assert tree_holding([cache], tmp_path / "alias" / "escape" / "x") is None
    assert tree_holding([tree("real", real)], real / "escape" / "x") is None


def test_a_relative_path_is_taken_from_the_working_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "cache" / "d").mkdir(parents=True)
    monkeypatch.chdir(tmp_path / "cache")
    inside = tree_holding([tree("cache", tmp_path / "cache")], "d/../d/x.wav")
    assert inside is not None and inside.path == str(tmp_path / "cache" / "d" / "x.wav")


# -- trees_by_device -----------------------------------------------------------------------------


def test_two_trees_on_one_volume_are_one_group_in_the_order_given(tmp_path: Path) -> None:
    a, b, c = (tree(n, tmp_path / n) for n in ("a", "b", "c"))
    for t in (a, b):
        t.path.mkdir()
    # c is not created yet: it is on the volume of its nearest existing folder.
    device = os.stat(tmp_path).st_dev
    assert trees_by_device([b, a, c]) == {device: [b, a, c]}
    assert trees_by_device([]) == {}


def test_trees_on_other_volumes_are_grouped_apart(
    tmp_path: Path, tmpfs: Callable[..., Path]
) -> None:
    mount = tmpfs("4m")
    here = tree("here", tmp_path / "here")
    there = tree("there", mount / "cache")
    also_there = tree("also_there", mount / "not-yet" / "tmp")
    groups = trees_by_device([here, there, also_there])
    assert groups == {
        os.stat(tmp_path).st_dev: [here],
        os.stat(mount).st_dev: [there, also_there],
    }
    # A nested tree goes with the volume its own root is on, not its outer tree's.
    inner = tree("inner", mount)
    outer = tree("outer", tmp_path, exclude=[f"{mount.name}/*"])
    nested = trees_by_device([outer, inner])
    assert nested == {os.stat(tmp_path).st_dev: [outer], os.stat(mount).st_dev: [inner]}


def test_a_path_through_a_symlink_and_dotdot_is_where_the_kernel_goes(tmp_path: Path) -> None:
    """``tree/link/../x`` with link -> elsewhere/d opens elsewhere/x: outside the tree."""
    root, elsewhere = tmp_path / "tree", tmp_path / "elsewhere"
    (elsewhere / "d").mkdir(parents=True)
    root.mkdir()
    (root / "link").symlink_to(elsewhere / "d")
    trees = [tree("t", root)]
    assert tree_holding(trees, f"{root}/link/../x") is None
    inside = tree_holding(trees, f"{root}/sub/../x")
    assert inside is not None and inside.path == str(root / "x")
