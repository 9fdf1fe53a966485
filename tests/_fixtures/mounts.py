"""Mounts made for a test (root only; skipped otherwise): a fresh tmpfs, a bind mount, a
remount with new options. Each is undone at teardown."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

__all__ = ["bind", "mount_tmpfs", "remount", "remount_tmpfs", "tmpfs", "unmount"]


def mount_tmpfs(where: Path, size: str | int = "64m", options: str = "") -> Path:
    """``mount -t tmpfs -o size=SIZE[,OPTIONS] tmpfs WHERE`` (made first); skips the test,
    with the reason, when not root or when the mount fails (an unprivileged container)."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    where.mkdir(parents=True, exist_ok=True)
    opts = f"size={size}" + (f",{options}" if options else "")
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", opts, "tmpfs", str(where)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs at {where}: {done.stderr.strip()}")
    return where


def unmount(mount: Path) -> None:
    """Unmount ``mount``; lazily if something still holds it."""
    done = subprocess.run(["umount", str(mount)], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        # Something (a leaked SQLite connection, a killed child's open file) still holds it:
        # detach now, the kernel frees it once the last user lets go.
        subprocess.run(["umount", "-l", str(mount)], capture_output=True, check=False)


@pytest.fixture
def tmpfs(tmp_path: Path) -> Iterator[Callable[..., Path]]:
    """Factory: ``tmpfs(size="64m", name=None, options="") -> Path`` mounts a fresh tmpfs.

    ``size`` is anything mount(8) takes (``"64m"``, ``"1m"``, bytes as int). ``options`` are
    extra comma-separated mount options (e.g. ``"ro"``). Each mount lives under ``tmp_path``
    and is unmounted at teardown (lazily if still busy). Skips the test when not root or when
    the mount fails (e.g. in an unprivileged container), with the reason.
    """
    mounted: list[Path] = []

    def mount(size: str | int = "64m", name: str | None = None, options: str = "") -> Path:
        where = mount_tmpfs(tmp_path / (name or f"tmpfs{len(mounted)}"), size, options)
        mounted.append(where)
        return where

    yield mount
    for where in reversed(mounted):
        unmount(where)


@pytest.fixture
def bind(tmp_path: Path) -> Iterator[Callable[[Path, Path], Path]]:
    """``bind(outside, where)``: ``mount --bind outside where`` (root only), undone at the end."""
    made: list[Path] = []

    def mount(outside: Path, where: Path) -> Path:
        if os.geteuid() != 0:
            pytest.skip("a bind mount needs root")
        where.mkdir(parents=True, exist_ok=True)
        done = subprocess.run(["mount", "--bind", str(outside), str(where)], capture_output=True,
                              text=True)  # fmt: skip
        if done.returncode != 0:
            pytest.skip(f"cannot bind-mount here: {done.stderr.strip()}")
        made.append(where)
        return where

    yield mount
    for where in reversed(made):
        subprocess.run(["umount", "-l", str(where)], capture_output=True)


def remount(mount: Path, options: str) -> None:
    """``mount -o remount,OPTIONS MOUNT`` (e.g. ``"ro"``); fails the test if it does not work."""
    subprocess.run(["mount", "-o", f"remount,{options}", str(mount)], check=True)


@pytest.fixture
def remount_tmpfs() -> Callable[[Path, str], None]:
    """``remount_tmpfs(mount, "ro")``: remount a tmpfs from :func:`tmpfs` with new options."""
    return remount
