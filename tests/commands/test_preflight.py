"""``janitor run --media``'s pre-flight against the policy (issue 24 item 6), read on the real
command's stderr as a person reads it.

It counts the bytes where batchalign3 will write them, as the command's environment names the
places (``$BATCHALIGN_MEDIA_CACHE_DIR``, ``$TMPDIR``), names the policy's tree that holds each
place, and says so when a place is managed by no tree: then what that means on its volume, and
where the policy's tree for it is.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

from tests._fixtures.pipeline import Pipeline

Cli = Callable[..., subprocess.CompletedProcess[str]]


def _preflight(run_cli: Cli, src: Path, env: dict[str, str]) -> list[str]:
    done = run_cli("run", "--media", src, "--", "true", env={"COLUMNS": "400", **env})
    assert done.returncode == 0, done.stderr
    return [ln.strip() for ln in done.stderr.splitlines()]


def test_the_preflight_names_the_trees_that_hold_where_the_job_writes(
    pipeline: Callable[..., Pipeline], m4a: Callable[[float], Path], run_cli: Cli
) -> None:
    p = pipeline("64m", floor="4MiB")
    env = {"BATCHALIGN_MEDIA_CACHE_DIR": str(p.cache), "TMPDIR": str(p.tmp)}
    lines = _preflight(run_cli, m4a(20), env)
    text = "\n".join(lines)
    assert f"media cache WAVs in {p.cache} (tree media_cache)" in text, text
    assert f"PCM working set in {p.tmp} (tree job_tmp) (x1)" in text, text
    assert "not managed" not in text
    if "blake3 is not installed" in text:  # the extra's name, not eaten as markup
        assert "pip install 'space-janitor[batchalign]'" in lines, text


def test_the_preflight_says_when_no_tree_manages_where_the_job_writes(
    pipeline: Callable[..., Pipeline],
    m4a: Callable[[float], Path],
    run_cli: Cli,
    tmp_path: Path,
) -> None:
    """batchalign3's media cache is elsewhere on the policy's volume, and TMPDIR on a volume
    the policy does not cover: both are counted where they are, each said to be unmanaged."""
    p = pipeline("64m", floor="4MiB")
    elsewhere = p.mount / "other-cache"
    elsewhere.mkdir()
    outside = tmp_path / "outside-tmp"  # not on the tmpfs: a volume no tree is on
    outside.mkdir()
    env = {"BATCHALIGN_MEDIA_CACHE_DIR": str(elsewhere), "TMPDIR": str(outside)}
    lines = _preflight(run_cli, m4a(20), env)
    text = "\n".join(lines)
    assert f"media cache WAVs in {elsewhere} (not managed by the policy)" in text, text
    assert f"PCM working set in {outside} (not managed by the policy) (x1)" in text, text
    cache_note = next(ln for ln in lines if ln.startswith(f"janitor: note: {elsewhere}, where"))
    assert cache_note == (
        f"janitor: note: {elsewhere}, where the job writes its media cache WAVs, is not managed "
        "by the "
        "policy: writes there are held to its volume's floor, and nothing removes what a "
        f"failed job leaves there; the policy's media_cache tree is {p.cache}: set "
        f"BATCHALIGN_MEDIA_CACHE_DIR={p.cache} for the job, or point that tree at {elsewhere}"
    )
    tmp_note = next(ln for ln in lines if ln.startswith(f"janitor: note: {outside}, where"))
    assert tmp_note == (
        f"janitor: note: {outside}, where the job writes its PCM working set, is not managed by "
        "the policy: "
        "its volume is not one the policy covers: nothing there is reserved or removed; the "
        f"policy's job_tmp tree is {p.tmp}: set TMPDIR={p.tmp} for the job, or point that "
        f"tree at {outside}"
    )
    # Each is counted on the volume it is on: the cache on the tmpfs, TMPDIR on the other one.
    rows: dict[str, str] = {}  # what the job writes -> the volume line it is listed under
    volume = ""
    for ln in lines:
        if ": the job writes " in ln:
            volume = ln.split(": the job writes ")[0]
        elif ln.startswith(("media cache WAVs in ", "PCM working set in ")):
            rows[ln.split(" in ")[0]] = volume
    assert rows["media cache WAVs"] == str(p.mount), rows
    assert rows["PCM working set"] not in (str(p.mount), ""), rows


def test_a_tree_above_the_folder_manages_it(
    tmpfs: Callable[..., Path],
    write_policy: Callable[..., Path],
    m4a: Callable[[float], Path],
    run_cli: Cli,
) -> None:
    """A policy whose one scratch tree is the parent of TMPDIR, and no media cache tree at all:
    TMPDIR is managed (by that tree), the cache is not, and there is no tree to point to."""
    mount = tmpfs("64m")
    (mount / "tmp" / "me").mkdir(parents=True)
    (mount / "cache").mkdir()
    write_policy(
        {"scratch": {"role": "scratch", "path": str(mount / "tmp"), "units": "dir"}},
        floor="4MiB",
    )
    env = {"BATCHALIGN_MEDIA_CACHE_DIR": str(mount / "cache"), "TMPDIR": str(mount / "tmp/me")}
    lines = _preflight(run_cli, m4a(20), env)
    text = "\n".join(lines)
    assert f"PCM working set in {mount / 'tmp/me'} (tree scratch)" in text, text
    note = next(ln for ln in lines if ln.startswith(f"janitor: note: {mount / 'cache'}, where"))
    assert note.endswith("nothing removes what a failed job leaves there"), note
