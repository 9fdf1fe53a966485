"""A Hugging Face hub cache under a quota (``units = "hf_revision"``), on a real cache layout.

The cache is built as huggingface_hub lays it out: ``models--org--name/`` with ``blobs/`` named
by content hash, ``refs/main`` holding a commit, and ``snapshots/<commit>/`` of relative
symlinks into ``blobs/``. huggingface_hub's own ``scan_cache_dir`` reads it back as a valid
cache (checked), and its ``DeleteCacheStrategy`` does the deleting, after the janitor's checks.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from janitor.cleanup.kinds import group_units
from janitor.cleanup.plan import Protection, plan_pressure
from janitor.cleanup.scan import scan
from janitor.config.policy import TreePolicy, load_policy
from janitor.errors import PolicyError
from tests._enforce_helpers import DAY, Hub, commit
from tests._fixtures.space import KiB

HAVE_HF = importlib.util.find_spec("huggingface_hub") is not None
needs_hf = pytest.mark.skipif(
    not HAVE_HF, reason="huggingface_hub is not installed (pip install '.[hf]' or '.[test]')"
)
Cli = Callable[..., subprocess.CompletedProcess[str]]


@pytest.fixture
def hub(tmp_path: Path) -> Hub:
    return Hub(tmp_path / "hf" / "hub")


def tree(hub: Hub, **keys: Any) -> TreePolicy:
    body: dict[str, Any] = {"units": "hf_revision", **keys}
    return TreePolicy(name="hf", role="cache", path=hub.root, **body)


def units_of(hub: Hub) -> dict[str, Any]:
    t = tree(hub)
    return {u.key.rpartition("/")[2]: u for u in group_units(scan(t.path), t)}


def hf_policy(write_policy: Callable[..., Path], hub: Hub, **keys: Any) -> Path:
    body = {"role": "cache", "path": str(hub.root), "units": "hf_revision", "min_age": "1m"}
    body.update(keys)
    return write_policy({"hf": body})


def sweep(run_cli: Cli, *args: str) -> dict[str, Any]:
    done = run_cli("sweep", "hf", "--json", *args)
    assert done.returncode in (0, 1), done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    return dict(json.loads(done.stdout))


def hf_revisions(hub: Hub) -> dict[str, set[str]]:
    """What huggingface_hub itself reads from the cache: each commit's blob files; and it
    finds the cache valid (no warnings)."""
    from huggingface_hub import scan_cache_dir

    info = scan_cache_dir(hub.root)
    assert not info.warnings, info.warnings
    return {
        rev.commit_hash: {str(f.blob_path) for f in rev.files}
        for repo in info.repos
        for rev in repo.revisions
    }


SHARED = b"S" * 48 * KiB  # a tokenizer both revisions of "org/tiny" use


def two_models(hub: Hub) -> dict[str, Path]:
    """org/tiny: an old revision (10 days) and main (1 day) sharing one blob; org/other: one
    revision, 5 days old."""
    return {
        "old": hub.revision(
            "org/tiny",
            "old",
            {"config.json": b"{old}", "model.bin": b"A" * 200 * KiB, "tok.json": SHARED},
            age_days=10,
        ),
        "main": hub.revision(
            "org/tiny",
            "main",
            {"config.json": b"{new}", "model.bin": b"B" * 300 * KiB, "tok.json": SHARED},
            age_days=1,
            ref="main",
        ),
        "other": hub.revision(
            "org/other", "other", {"weights/model.bin": b"C" * 100 * KiB}, age_days=5, ref="main"
        ),
    }


# -- units -----------------------------------------------------------------------------------------


@needs_hf
def test_each_revision_is_a_unit_and_their_sizes_add_up_to_the_cache(hub: Hub) -> None:
    snaps = two_models(hub)
    (hub.root / ".locks" / "models--org--tiny").mkdir(parents=True)
    units = units_of(hub)
    assert set(units) == {commit("old"), commit("main"), commit("other")}
    assert set(units) == set(hf_revisions(hub))
    old, main = units[commit("old")], units[commit("main")]
    assert old.kind == "hf_revision" and old.path == str(snaps["old"])
    # Each unit holds what its links lead to, as huggingface_hub resolves them ...
    for c, blobs in hf_revisions(hub).items():
        assert blobs <= {e.path for e in units[c].entries}
    shared = str(hub.blob(hub.repo("org/tiny"), SHARED))
    assert shared in {e.path for e in old.entries} and shared in {e.path for e in main.entries}
    # ... but a blob both use counts in the newer one only, and the repository folder (refs,
    # blobs/, snapshots/) with its last revision: the sizes add up to the repositories.
    total = sum(u.size for u in units.values())
    repos = (
        scan(hub.root).total
        - scan(hub.root / ".locks").total
        - os.lstat(hub.root / ".locks").st_blocks * 512
    )
    assert total == repos
    assert old.last_use < units[commit("other")].last_use < main.last_use
    assert str(hub.repo("org/tiny") / "refs" / "main") in {e.path for e in main.entries}


def test_a_link_that_leaves_the_tree_makes_no_unit(hub: Hub, tmp_path: Path) -> None:
    secret = tmp_path / "outside" / "secret.bin"
    secret.parent.mkdir()
    secret.write_bytes(b"keep me" * 1000)
    snap = hub.revision("org/ok", "ok", {"a.bin": b"ok" * 1000}, age_days=3)
    bad = hub.repo("org/bad") / "snapshots" / commit("bad")
    bad.mkdir(parents=True)
    (bad / "a.bin").symlink_to(os.path.relpath(secret, bad))
    # A blob that is itself a link out of the tree (a second hop) is no better.
    hop = hub.repo("org/hop")
    (hop / "blobs").mkdir(parents=True)
    (hop / "blobs" / "abc").symlink_to(secret)
    (hop / "snapshots" / commit("hop")).mkdir(parents=True)
    (hop / "snapshots" / commit("hop") / "a.bin").symlink_to("../../blobs/abc")
    units = units_of(hub)
    assert set(units) == {commit("ok")} and units[commit("ok")].path == str(snap)


# -- sweeps ----------------------------------------------------------------------------------------


def quota_for(hub: Hub, keep: list[str]) -> int:
    """A quota that the revisions in ``keep`` fit under exactly."""
    units = units_of(hub)
    return sum(units[commit(k)].size for k in keep)


@needs_hf
def test_over_quota_the_least_recently_used_revision_goes_whole_and_a_shared_blob_stays(
    hub: Hub, write_policy: Callable[..., Path], run_cli: Cli
) -> None:
    snaps = two_models(hub)
    repo = hub.repo("org/tiny")
    old_only = hub.blob(repo, b"A" * 200 * KiB)
    shared = hub.blob(repo, SHARED)
    units = units_of(hub)
    usage = sum(u.size for u in units.values())
    hf_policy(write_policy, hub, quota=quota_for(hub, ["main", "other"]), low_watermark="100%")

    dry = sweep(run_cli, "--dry-run")
    assert [(i["path"], i["kind"], i["reason"], i["deleted"]) for i in dry["items"]] == [
        (str(snaps["old"]), "hf_revision", "quota", False)
    ]
    assert dry["items"][0]["bytes"] == units[commit("old")].size
    assert dry["trees"][0]["usage"] == usage
    assert snaps["old"].exists() and old_only.exists()  # a dry run deletes nothing

    status = json.loads(run_cli("status", "--json").stdout)
    assert {t["name"]: t["usage"] for t in status["trees"]} == {"hf": usage}
    space = json.loads(run_cli("space", "--json").stdout)
    row = next(r for v in space["volumes"] for r in v["rows"] if r["tree"] == "hf")
    assert row["frees"] == units[commit("old")].size

    done = sweep(run_cli)
    assert [(i["path"], i["deleted"], i["skipped"]) for i in done["items"]] == [
        (str(snaps["old"]), True, None)
    ]
    assert not snaps["old"].exists() and not old_only.exists()
    assert shared.exists() and snaps["main"].exists() and snaps["other"].exists()
    # huggingface_hub still reads a valid cache, with the two revisions kept whole.
    assert set(hf_revisions(hub)) == {commit("main"), commit("other")}
    assert done["deleted_bytes"] == units[commit("old")].size

    log = json.loads(run_cli("log", "--json").stdout)
    rows = [(r["event"], r["path"], r["detail"].get("reason")) for r in log]
    assert ("delete", str(snaps["old"]), "quota") in rows
    assert not [r for r in rows if r[0] == "deleting"]  # confirmed, none left pending


@needs_hf
def test_the_last_revision_of_a_repository_takes_its_folder_with_it(
    hub: Hub, write_policy: Callable[..., Path], run_cli: Cli
) -> None:
    two_models(hub)
    (hub.repo("org/other") / ".no_exist" / commit("other")).mkdir(parents=True)
    (hub.repo("org/other") / ".no_exist" / commit("other") / "missing.json").touch()
    hf_policy(write_policy, hub, quota=quota_for(hub, ["main"]), low_watermark="100%")
    done = sweep(run_cli)
    assert [i["path"].split("/")[-3] for i in done["items"] if i["deleted"]] == [
        "models--org--tiny",
        "models--org--other",
    ]
    assert not hub.repo("org/other").exists()
    assert set(hf_revisions(hub)) == {commit("main")}


def shared_store(hub: Hub, data: bytes, *users: tuple[str, str, float]) -> Path:
    """huggingface_hub 2.x's shared blob store: one payload at ``blobs/<xx>/<hash>`` with its
    manifest, reached from each user's repository blob (a symlink) by its snapshot link; each
    user is (repository, commit tag, age in days)."""
    store = hub.root / "blobs"
    store.mkdir(exist_ok=True)
    (store / ".huggingface-shared-blobs").write_text("1\n")
    digest = hashlib.sha256(data).hexdigest()
    payload = store / digest[:2] / digest
    payload.parent.mkdir(exist_ok=True)
    payload.write_bytes(data)
    refs = []
    for name, tag, age_days in users:
        repo = hub.repo(name)
        etag = hashlib.sha1(data + name.encode()).hexdigest()
        blob = repo / "blobs" / etag
        blob.parent.mkdir(parents=True, exist_ok=True)
        blob.symlink_to(os.path.relpath(payload, blob.parent))
        refs.append(f"{repo.name}/blobs/{etag}\n")
        snap = repo / "snapshots" / commit(tag)
        snap.mkdir(parents=True)
        (snap / "model.safetensors").symlink_to(os.path.relpath(blob, snap))
        when = time.time() - age_days * DAY
        for p in (blob, snap / "model.safetensors", snap):
            os.utime(p, (when, when), follow_symlinks=False)
    (payload.parent / f"{digest}.refs").write_text("".join(refs))
    old = time.time() - 30 * DAY
    os.utime(payload, (old, old))
    return payload


@needs_hf
def test_a_payload_of_the_shared_store_goes_with_the_last_revision_that_uses_it(
    hub: Hub, write_policy: Callable[..., Path], run_cli: Cli
) -> None:
    from huggingface_hub.utils import _cache_manager

    if not hasattr(_cache_manager, "_shared_blobs"):
        pytest.skip("this huggingface_hub has no shared blob store")
    payload = shared_store(hub, b"W" * 256 * KiB, ("org/a", "a", 10), ("org/b", "b", 5))
    main = hub.revision("org/c", "c", {"x.bin": b"c" * 64 * KiB}, age_days=1)
    units = units_of(hub)
    assert {str(payload)} <= {e.path for e in units[commit("a")].entries}
    # The payload counts once, in the newer of its two users.
    assert units[commit("b")].size - units[commit("a")].size >= 256 * KiB
    hf_policy(write_policy, hub, quota=quota_for(hub, ["b", "c"]), low_watermark="100%")
    first = sweep(run_cli)
    assert [i["path"] for i in first["items"] if i["deleted"]] == [
        str(hub.repo("org/a") / "snapshots" / commit("a"))
    ]
    assert payload.exists() and not hub.repo("org/a").exists()
    hf_policy(write_policy, hub, quota=quota_for(hub, ["c"]), low_watermark="100%")
    second = sweep(run_cli)
    assert [i["path"] for i in second["items"] if i["deleted"]] == [
        str(hub.repo("org/b") / "snapshots" / commit("b"))
    ]
    assert not payload.exists() and main.exists()
    assert set(hf_revisions(hub)) == {commit("c")}


@needs_hf
def test_the_intent_is_in_the_ledger_before_huggingface_hub_deletes(
    hub: Hub, write_policy: Callable[..., Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    from huggingface_hub import DeleteCacheStrategy

    from janitor import Janitor

    snaps = two_models(hub)
    hf_policy(write_policy, hub, quota=quota_for(hub, ["main", "other"]), low_watermark="100%")
    jan = Janitor.from_settings()
    seen: list[list[tuple[str, str | None]]] = []
    run = DeleteCacheStrategy.execute

    def execute(self: DeleteCacheStrategy) -> None:
        with jan.ledger.read() as tx:
            seen.append([(r.event, r.path) for r in tx.log.entries(events=("deleting", "delete"))])
        run(self)

    monkeypatch.setattr(DeleteCacheStrategy, "execute", execute)
    try:
        result = jan.sweep("hf")
    finally:
        jan.ledger.close()
    assert [o.deleted for o in result.report.outcomes] == [True]
    assert seen == [[("deleting", str(snaps["old"]))]]


OPENER = r"""
import mmap, sys
f = open(sys.argv[1], "rb")
if sys.argv[2] == "mmap":  # mapped, its descriptor closed: only /proc/PID/maps shows it
    m = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ)
    f.close()
print("ready", flush=True)
sys.stdin.read()
"""


@pytest.fixture
def opener() -> Iterator[Callable[[Path, str], None]]:
    """``opener(path, how)``: another process holds ``path`` open (``how="open"``) or mapped
    (``"mmap"``) until the test ends."""
    procs: list[subprocess.Popen[str]] = []

    def start(path: Path, how: str) -> None:
        proc = subprocess.Popen(
            [sys.executable, "-c", OPENER, str(path), how],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        procs.append(proc)
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"

    yield start
    for proc in procs:
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.close()
        proc.wait(timeout=30)
        proc.stdout.close()


@needs_hf
@pytest.mark.parametrize("how", ["open", "mmap"])
def test_a_revision_whose_blob_is_open_or_mapped_is_never_deleted(
    hub: Hub,
    write_policy: Callable[..., Path],
    opener: Callable[[Path, str], None],
    how: str,
) -> None:
    from janitor import Janitor
    from janitor.cleanup.apply import apply

    snaps = two_models(hub)
    hf_policy(write_policy, hub, quota=quota_for(hub, ["main", "other"]), low_watermark="100%")
    jan = Janitor.from_settings()
    try:
        # Planned while nothing was open; opened before the delete: the deleter's own check.
        plan = jan.sweep("hf", dry_run=True).plan
        assert [i.unit.path for i in plan.items] == [str(snaps["old"])]
        opener(snaps["old"] / "model.bin", how)  # through the snapshot link, as a loader does
        report = apply(plan, ledger=jan.ledger)
        assert [(o.deleted, o.skipped) for o in report.outcomes] == [
            (False, "open in another process")
        ]
        # Planned while it is open: kept, and counted as such (the quota takes the others).
        again = jan.sweep("hf", dry_run=True).plan
        assert str(snaps["old"]) not in {i.unit.path for i in again.items}
        assert dict(again.trees[0].kept) == {"open": 1}
    finally:
        jan.ledger.close()
    assert set(hf_revisions(hub)) == {commit("old"), commit("main"), commit("other")}


@needs_hf
def test_a_blob_another_revision_keeps_still_keeps_the_revision_while_it_is_open(
    hub: Hub, write_policy: Callable[..., Path], opener: Callable[[Path, str], None]
) -> None:
    from janitor import Janitor
    from janitor.cleanup.apply import apply

    snaps = two_models(hub)
    hf_policy(write_policy, hub, quota=quota_for(hub, ["main", "other"]), low_watermark="100%")
    jan = Janitor.from_settings()
    try:
        plan = jan.sweep("hf", dry_run=True).plan
        opener(snaps["old"] / "tok.json", "open")  # the blob main uses too: it would stay
        report = apply(plan, ledger=jan.ledger)
    finally:
        jan.ledger.close()
    assert [(o.deleted, o.skipped) for o in report.outcomes] == [(False, "open in another process")]
    assert snaps["old"].exists()


@needs_hf
def test_a_pinned_revision_or_a_download_in_progress_is_left_alone(
    hub: Hub, write_policy: Callable[..., Path], opener: Callable[[Path, str], None]
) -> None:
    from janitor import Janitor
    from janitor.cleanup.apply import apply

    snaps = two_models(hub)
    hf_policy(write_policy, hub, quota=quota_for(hub, ["main", "other"]), low_watermark="100%")
    jan = Janitor.from_settings()
    try:
        plan = plan_with_old(jan)
        assert [i.unit.path for i in plan.items] == [str(snaps["old"])]
        with jan.pin(snaps["old"]):
            kept = jan.sweep("hf", dry_run=True).plan
            assert str(snaps["old"]) not in {i.unit.path for i in kept.items}
            assert dict(kept.trees[0].kept) == {"pinned": 1}
            report = apply(plan, ledger=jan.ledger)  # pinned after planning
            assert [o.skipped for o in report.outcomes] == ["pinned"]
        lock = hub.root / ".locks" / "models--org--tiny" / "abc.lock"
        lock.parent.mkdir(parents=True)
        lock.touch()
        held = subprocess.Popen(
            [sys.executable, "-c", FLOCKER, str(lock)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        try:
            assert held.stdout is not None and held.stdout.readline().strip() == b"ready"
            report = apply(plan, ledger=jan.ledger)
        finally:
            assert held.stdin is not None
            held.stdin.close()
            held.wait(timeout=30)
    finally:
        jan.ledger.close()
    assert [o.skipped for o in report.outcomes] == [
        "locked: huggingface_hub is downloading into this repository"
    ]
    assert snaps["old"].exists()


def plan_with_old(jan: Any) -> Any:
    """A dry run's plan, cut to its first item (the oldest revision) alone."""
    from janitor.cleanup.plan import Plan

    plan = jan.sweep("hf", dry_run=True).plan
    return Plan(tuple(plan.items)[:1], plan.trees)


FLOCKER = r"""
import fcntl, sys
fd = open(sys.argv[1], "rb")
fcntl.flock(fd, fcntl.LOCK_EX)  # what huggingface_hub's FileLock takes while it downloads
print("ready", flush=True)
sys.stdin.read()
"""


@needs_hf
def test_a_link_out_of_the_tree_is_never_followed_by_a_sweep(
    hub: Hub, write_policy: Callable[..., Path], run_cli: Cli, tmp_path: Path
) -> None:
    secret = tmp_path / "outside" / "model.bin"
    secret.parent.mkdir()
    secret.write_bytes(b"E" * 64 * KiB)
    old = time.time() - 30 * DAY
    os.utime(secret, (old, old))
    bad = hub.repo("org/escape") / "snapshots" / commit("escape")
    bad.mkdir(parents=True)
    (bad / "model.bin").symlink_to(os.path.relpath(secret, bad))
    os.utime(bad, (old, old))
    snaps = two_models(hub)
    hf_policy(write_policy, hub, quota="1", low_watermark="100%")
    done = sweep(run_cli)
    assert {i["path"] for i in done["items"] if i["deleted"]} == {str(s) for s in snaps.values()}
    assert secret.read_bytes() == b"E" * 64 * KiB
    assert (bad / "model.bin").is_symlink()


@needs_hf
def test_a_link_swapped_out_of_the_tree_after_planning_stops_the_delete(
    hub: Hub, write_policy: Callable[..., Path], tmp_path: Path
) -> None:
    from janitor import Janitor
    from janitor.cleanup.apply import apply

    secret = tmp_path / "outside" / "model.bin"
    secret.parent.mkdir()
    secret.write_bytes(b"E" * 64 * KiB)
    snaps = two_models(hub)
    hf_policy(write_policy, hub, quota=quota_for(hub, ["main", "other"]), low_watermark="100%")
    jan = Janitor.from_settings()
    try:
        plan = plan_with_old(jan)
        link = snaps["old"] / "model.bin"
        link.unlink()
        link.symlink_to(secret)  # huggingface_hub's strategy would delete the target
        report = apply(plan, ledger=jan.ledger)
    finally:
        jan.ledger.close()
    [outcome] = report.outcomes
    assert not outcome.deleted and "outside the tree" in (outcome.skipped or "")
    assert secret.read_bytes() == b"E" * 64 * KiB and snaps["old"].is_dir()


@needs_hf
def test_a_revision_with_a_mount_inside_is_never_deleted(
    hub: Hub, write_policy: Callable[..., Path], run_cli: Cli, tmpfs: Callable[..., Path]
) -> None:
    snaps = two_models(hub)
    hf_policy(write_policy, hub, quota=quota_for(hub, ["main", "other"]), low_watermark="100%")
    mount = tmpfs("1m", name=str((snaps["old"] / "mnt").relative_to(hub.root.parents[1])))
    (mount / "theirs.bin").write_bytes(b"M" * 4096)
    then = time.time() - 10 * DAY
    os.utime(snaps["old"], (then, then))  # making the mount point changed it
    done = sweep(run_cli)
    assert [(i["path"], i["deleted"]) for i in done["items"]] == [(str(snaps["old"]), False)]
    assert "another filesystem mounted there" in done["items"][0]["skipped"]
    assert (mount / "theirs.bin").read_bytes() == b"M" * 4096 and snaps["old"].is_dir()


@needs_hf
def test_the_daemon_evicts_the_oldest_revision_once_a_download_takes_the_cache_past_its_quota(
    tmp_path: Path,
) -> None:
    from tests._daemon_helpers import daemon_setup, eventually, running_daemon

    keys = {"units": "hf_revision", "quota": "1GiB", "low_watermark": "100%", "min_age": "0s"}
    with daemon_setup(tmp_path / "d", tree=keys) as setup:
        hub = Hub(setup.tree)
        snaps = two_models(hub)
        quota = quota_for(hub, ["old", "main", "other"])
        setup.write_policy(trees={"cache": {**setup.trees["cache"], "quota": quota}})
        with running_daemon(setup) as d:
            eventually(
                lambda: any(t.get("last_sweep") for t in (d.status_json() or {}).get("trees", [])),
                what="the daemon's first sweep",
            )
            assert all(s.exists() for s in snaps.values())  # within its quota: nothing goes
            fresh = hub.revision(
                "org/other", "fresh", {"weights/model.bin": b"F" * 100 * KiB}, age_days=0
            )
            eventually(lambda: not snaps["old"].exists(), what="the oldest revision evicted")
            assert snaps["main"].exists() and snaps["other"].exists() and fresh.exists()
        assert set(hf_revisions(hub)) == {commit("main"), commit("other"), commit("fresh")}


def test_pressure_and_make_room_never_evict_revisions(hub: Hub) -> None:
    two_models(hub)
    t = tree(hub, quota="10GiB")
    snap = scan(t.path)
    plan = plan_pressure([(snap, group_units(snap, t), t)], 10**9, protection=Protection())
    assert plan.items == ()
    assert not t.evicts_for_room and tree(hub, units="file").evicts_for_room


# -- the policy ------------------------------------------------------------------------------------


def test_a_revision_cache_is_a_cache_of_whole_revisions(tmp_path: Path) -> None:
    bad = tmp_path / "p.toml"
    bad.write_text(
        f'[trees.hf]\nrole = "scratch"\npath = "{tmp_path / "hub"}"\nunits = "hf_revision"\n'
        'group = "(?P<key>.*)"\n'
    )
    with pytest.raises(PolicyError) as err:
        load_policy(bad)
    assert list(err.value.problems) == [
        'trees.hf.units = "hf_revision": applies to role = "cache" only (with a quota: whole '
        "revisions are evicted)",
        'trees.hf.group = "(?P<key>.*)": does not apply to units = "hf_revision" (a unit is a '
        "whole revision)",
    ]


def test_the_shipped_policy_reports_models_and_its_commented_example_is_a_revision_cache(
    tmp_path: Path,
) -> None:
    shipped = Path(__file__).resolve().parents[2] / "policies" / "batchalign3.toml"
    policy = load_policy(shipped)
    assert policy.trees["hf_hub"].role == "report" and policy.trees["stanza"].role == "report"
    text = shipped.read_text()
    block = text[text.index("# [trees.hf_hub]") :].split("\n\n")[0]
    mine = tmp_path / "mine.toml"
    mine.write_text(
        text.replace('[trees.hf_hub]\nrole = "report"\npath = ', "# the report tree, out: ")
        + "\n"
        + "\n".join(line.removeprefix("# ") for line in block.splitlines())
    )
    if not HAVE_HF:
        with pytest.raises(PolicyError, match="pip install 'space-janitor"):
            load_policy(mine)
        return
    t = load_policy(mine).trees["hf_hub"]
    assert (t.role, t.units, t.exclude) == (
        "cache",
        "hf_revision",
        ("models--openai--whisper-large-v3",),
    )


MISSING = r"""
import sys
sys.modules["huggingface_hub"] = None  # as if the hf extra were not installed
from janitor.cli.app import main
sys.argv = ["janitor", *sys.argv[1:]]
main()
"""


@pytest.mark.parametrize("command", [["sweep"], ["status"], ["policy", "validate", "{policy}"]])
def test_without_the_extra_a_revision_cache_is_one_line_and_exit_2(
    hub: Hub, write_policy: Callable[..., Path], command: list[str]
) -> None:
    snaps = two_models(hub)
    policy = hf_policy(write_policy, hub, quota="1", low_watermark="100%")
    args = [a.replace("{policy}", str(policy)) for a in command]
    done = subprocess.run(
        [sys.executable, "-c", MISSING, *args], capture_output=True, text=True, check=False
    )
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert "trees.hf.units" in lines[0] and "pip install 'space-janitor[hf]'" in lines[0]
    assert all(s.exists() for s in snaps.values())
