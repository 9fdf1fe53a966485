"""`janitor space`: what takes each volume's space, on real files under the test's HOME and
TMPDIR with the shipped policy (or one without the model trees), and a real tmpfs mounted
inside a tree (root only) that the report must not descend into. Nothing may change on disk.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from janitor.host.fdwalk import tree_size
from tests._fixtures.space import MiB

Cli = Callable[..., subprocess.CompletedProcess[str]]

SHIPPED = Path(__file__).resolve().parent.parent / "policies" / "batchalign3.toml"


def put(path: Path, nbytes: int, *, age_days: float = 0.0) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(os.urandom(nbytes))
    when = time.time() - age_days * 86400
    os.utime(path, (when, when))
    return path


def space(run_cli: Cli, **env: str) -> list[dict[str, Any]]:
    done = run_cli("space", "--json", env=env or None)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    return list(json.loads(done.stdout)["volumes"])


def rows_by_name(volume: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {r["name"]: r for r in volume["rows"]}


def listing(root: Path) -> list[tuple[str, int]]:
    return sorted(
        (str(p), p.stat().st_size) for p in root.rglob("*") if p.is_file() and not p.is_symlink()
    )


def test_each_tree_the_unmanaged_part_of_tmpdir_and_the_rest_largest_first(
    run_cli: Cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("JANITOR_POLICY", str(SHIPPED))
    home, tmp = Path.home(), Path(os.environ["TMPDIR"])
    cache = Path(os.environ["XDG_DATA_HOME"]) / "batchalign3" / "media_cache"
    put(cache / ("a" * 24 + ".wav"), 3 * MiB)
    put(home / ".cache" / "huggingface" / "hub" / "models--x" / "blobs" / "b", 2 * MiB)
    job = put(tmp / ".tmpabc123" / "fa_v2" / "audio" / "1.pcm", MiB, age_days=2).parents[2]
    for p in (job / "fa_v2" / "audio", job / "fa_v2", job):
        os.utime(p, (time.time() - 2 * 86400,) * 2)
    put(tmp / "someone-elses.iso", 4 * MiB)
    watched = (home, tmp, cache)

    def everything() -> list[list[tuple[str, int]]]:
        return [listing(w) for w in watched]

    before = everything()

    (vol,) = space(run_cli)
    rows = rows_by_name(vol)
    assert [r["bytes"] for r in vol["rows"][:-1]] == sorted(
        (r["bytes"] for r in vol["rows"][:-1]), reverse=True
    )
    assert vol["rows"][-1]["name"] == "everything else on the volume"
    # Below the tree's root (the root folder's own block is the volume's rest)
    assert rows["media_cache"]["bytes"] == tree_size(cache) - cache.lstat().st_blocks * 512
    assert rows["media_cache"]["managed"] and rows["media_cache"]["role"] == "cache"
    assert rows["hf_hub"]["role"] == "report" and rows["hf_hub"]["bytes"] >= 2 * MiB
    assert rows["job_tmp"]["bytes"] == tree_size(job)
    assert rows["job_tmp"]["frees"] == tree_size(job)  # an orphan by age: a sweep frees it
    other = rows["TMPDIR: other programs' files"]
    assert not other["managed"] and 4 * MiB <= other["bytes"] < 4 * MiB + 64 * 1024
    listed = sum(r["bytes"] for r in vol["rows"])
    assert listed == vol["used"] == vol["total"] - vol["free"]
    assert vol["frees"] == sum(r["frees"] for r in vol["rows"])
    assert everything() == before  # nothing changed


def test_the_pipelines_folders_no_tree_manages_are_named_not_managed(
    run_cli: Cli, write_policy: Callable[..., Path]
) -> None:
    tmp = Path(os.environ["TMPDIR"])
    write_policy({"t": {"role": "scratch", "path": str(tmp), "units": "dir", "unit_glob": ".tmp*"}})
    stanza = put(Path.home() / "stanza_resources" / "en" / "pos.pt", 3 * MiB).parents[1]
    (vol,) = space(run_cli)
    row = rows_by_name(vol)["Stanza (not managed)"]
    assert row["bytes"] == tree_size(stanza) and not row["managed"]
    assert row["path"] == str(stanza)


def test_it_never_descends_into_a_mount_inside_a_tree(
    run_cli: Cli, tmpfs: Callable[..., Path], write_policy: Callable[..., Path]
) -> None:
    vol_root = tmpfs("64m")
    tree = vol_root / "cache"
    put(tree / "a.bin", 2 * MiB)
    inner = tree / "inner"
    inner.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(inner)], check=True)
    try:
        put(inner / "big.bin", 8 * MiB)
        write_policy({"c": {"role": "cache", "path": str(tree), "quota": "60MiB"}})
        found = [v for v in space(run_cli) if v["volume"] == str(vol_root)]
        assert len(found) == 1, found
        row = rows_by_name(found[0])["c"]
        assert 2 * MiB <= row["bytes"] < 3 * MiB, row
        assert (inner / "big.bin").exists()
    finally:
        subprocess.run(["umount", str(inner)], check=False)


def test_the_table_names_each_row_and_the_sweep(
    run_cli: Cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("JANITOR_POLICY", str(SHIPPED))
    put(Path(os.environ["TMPDIR"]) / "other.bin", MiB)
    done = run_cli("space", env={"COLUMNS": "200"})
    assert done.returncode == 0, done.stderr
    for text in ("TMPDIR: other programs' files", "everything else on the volume", "sweep frees"):
        assert text in done.stdout, done.stdout


# -- with a daemon --------------------------------------------------------------------------------


def _rows(out: dict[str, Any]) -> list[tuple[str, int, int]]:
    """Each volume's rows but the rest of the volume (free space moves), as (name, bytes, frees)."""
    return sorted(
        (r["name"], r["bytes"], r["frees"])
        for v in out["volumes"]
        for r in v["rows"]
        if r["path"] is not None
    )


def test_with_a_daemon_it_shows_the_daemons_report_unless_fresh(tmp_path: Path) -> None:
    from ._daemon_helpers import daemon_setup, running_daemon, uds_client

    with daemon_setup(tmp_path, tree={"quota": "20MiB"}) as setup:
        put(setup.tree / ("b" * 24 + ".wav"), 3 * MiB)
        put(setup.root / "home" / "tmp" / "theirs.bin", MiB)
        with running_daemon(setup):

            def space_json(*args: str, **env: str | None) -> dict[str, Any]:
                done = setup.run_cli("space", "--json", *args, **env)
                assert done.returncode == 0, done.stderr
                return dict(json.loads(done.stdout))

            served = space_json()
            assert served["source"] == "daemon"
            assert time.time() - served["measured_at"] < 60
            fresh = space_json("--fresh")
            assert fresh["source"] == "walk" and fresh["measured_at"] >= served["measured_at"]
            assert _rows(served) == _rows(fresh)
            table = setup.run_cli("space", COLUMNS="200")
            assert "measured by the daemon" in table.stdout, table.stdout
            assert table.returncode == 0, table.stderr

            # Asked for a report no older than 0 s, the daemon measures again
            with uds_client(setup.socket) as client:
                again = client.get("/v1/space", params={"max_age": 0}).json()
                assert again["measured_at"] > served["measured_at"]
                assert client.get("/v1/space", params={"max_age": -1}).status_code == 422
            # Another environment (TMPDIR elsewhere): not what the daemon measured
            other = tmp_path / "other-tmp"
            other.mkdir()
            assert space_json(TMPDIR=str(other))["source"] == "walk"
            # The policy file changed since the daemon's report: the command never shows that
            # report. It measures, unless the daemon has already reloaded the new file and
            # measured again (its policy watch may beat the command on a loaded machine).
            changed_at = time.time()
            setup.write_policy(trees={"cache": {**setup.trees["cache"], "quota": "30MiB"}})
            after = space_json()
            assert after["source"] == "walk" or after["measured_at"] >= changed_at, after


def test_a_bad_policy_is_one_line_and_exit_2(run_cli: Cli, tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text(f'[trees.x]\nrole = "cache"\npath = "{tmp_path / "x"}"\nquota = "lots"\n')
    for args in (("--policy", str(bad), "space", "--json"), ("--policy", str(bad), "space")):
        done = run_cli(*args)
        assert done.returncode == 2, done
        assert done.stdout == "" and "Traceback" not in done.stderr
        assert done.stderr.startswith("janitor: error: policy file"), done.stderr
        assert done.stderr.count("\n") == 1
