"""Unit kinds as values (``janitor.cleanup.kinds``): each kind, chosen once by the name a tree's
``units`` gives it, answers on a real tree of its own what the code that switched on that name
answered: a path's key, the units a scan groups into, the size walk's detail and what it tells,
``janitor status``'s usage, the pins that keep a unit, and what a delete removes.

One table, one real tree per kind; every expected value below is what the code before the
kinds (``unit_key_for``, ``group_units``, ``glance``, ``status.tree_usage``, ``Rechecks``,
``Deleter``) gave on the same tree.
"""

from __future__ import annotations

import hashlib
import importlib.util
import stat
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, get_args

import pytest

from janitor.cleanup.deleter import Deleter
from janitor.cleanup.kinds import KINDS, UnitKind, group_units, kind_named, kind_of
from janitor.cleanup.plan import TreePlan
from janitor.cleanup.recheck import Skip
from janitor.cleanup.scan import Snapshot, scan
from janitor.cleanup.units import Unit
from janitor.config.policy import TreePolicy
from janitor.config.unit_rules import UNIT_RULES
from janitor.host.sizewalk import CHILDREN, FILES, SIZE, Folder, Measured, SizeWalk
from janitor.host.space import allocated_size
from tests._enforce_helpers import DAY, HOUR, Hub, KiB, allocated, commit, make_file, set_age

HAVE_HF = importlib.util.find_spec("huggingface_hub") is not None


OLD, MAIN = commit("old"), commit("main")
TINY = "models--org--tiny"


# -- the trees -------------------------------------------------------------------------------------


def media_cache(root: Path) -> None:
    """An entry (its WAV, a leftover .tmp.wav, its lock), a segment, one in a subfolder, and a
    file the group does not name."""
    make_file(root / "a.wav", 32 * KiB, age=3 * DAY)
    make_file(root / "a.tmp.wav", 16 * KiB, age=3 * DAY)
    make_file(root / "a.wav.lock", 0, age=3 * DAY)
    make_file(root / "b.wav", 8 * KiB, age=HOUR)
    make_file(root / "sub" / "c.wav", 4 * KiB, age=5 * DAY)
    make_file(root / "notes.txt", KiB, age=2 * DAY)
    set_age(root / "sub", 5 * DAY)


def job_tmp(root: Path) -> None:
    """Two job folders (a pipeline scope in each), another program's .tmp folder, a loose file."""
    make_file(root / ".tmp1" / "fa_v2" / "audio" / "0.pcm", 64 * KiB)
    make_file(root / ".tmp1" / "fa_v2" / "text" / "0.json", KiB)
    make_file(root / ".tmp2" / "asr_v2" / "audio" / "a.pcm", 8 * KiB)
    make_file(root / ".tmpother" / "stuff.bin", 4 * KiB)
    make_file(root / "loose.txt", KiB)
    for job, age in ((".tmp1", 3 * DAY), (".tmp2", HOUR), (".tmpother", 3 * DAY)):
        for p in sorted((root / job).rglob("*"), key=lambda p: -len(p.parts)):
            set_age(p, age)
        set_age(root / job, age)


def lmdb_cache(root: Path) -> None:
    """Two LMDB environments (1 and 5 days unused), a folder that is none (no data.mdb) and a
    loose file beside them."""
    for env, age in (("cache.lmdb", DAY), ("old.lmdb", 5 * DAY)):
        make_file(root / env / "data.mdb", 64 * KiB, age=age)
        make_file(root / env / "lock.mdb", 8 * KiB, age=age)
        set_age(root / env, age)
    make_file(root / "notes" / "x.txt", KiB, age=10 * DAY)
    set_age(root / "notes", 10 * DAY)
    make_file(root / "cache.redb", KiB, age=10 * DAY)


def hub_cache(root: Path) -> None:
    """org/tiny as huggingface_hub lays it out: an old revision (10 days) and main (1 day, named
    by refs/main), sharing one blob."""
    hub, shared = Hub(root), b"S" * 48 * KiB
    hub.revision(
        "org/tiny",
        "old",
        {"config.json": b"{old}", "model.bin": b"A" * 200 * KiB, "tok.json": shared},
        age_days=10,
    )
    hub.revision("org/tiny", "main", {"config.json": b"{new}", "model.bin": b"B" * 300 * KiB,
                                      "tok.json": shared}, age_days=1, ref="main")  # fmt: skip


def blob(data: bytes) -> str:
    return f"{TINY}/blobs/{hashlib.sha256(data).hexdigest()}"


# -- the table -------------------------------------------------------------------------------------


#: The walk detail a kind asks for, for (role, selects, max_age): a cache, a cache with
#: include, a cache with max_age, a scratch tree, a report. Every kind asks for a report's
#: size, and for the children of a scratch tree or of a cache with max_age; a plain cache of
#: folder units (dir, lmdb) asks for the children too, one of files or revisions for the size
#: alone, or for its files when include selects some.
FOLDER_UNITS = (CHILDREN, CHILDREN, CHILDREN, CHILDREN, SIZE)
FILE_UNITS = (SIZE, FILES, CHILDREN, CHILDREN, SIZE)


@dataclass(frozen=True)
class Case:
    """One kind on its real tree, and what the code before the kinds answered there (the
    defaults: what most kinds answer)."""

    units: str
    role: str
    build: Callable[[Path], None]
    keys: dict[str, str]  # path (relative to the root) -> its unit's key
    members: dict[str, set[str]]  # key -> the unit's entries (relative paths)
    #: cutoffs (days ago) for which some unit may be older, and one for which none is
    older_at: float
    none_older_at: float
    pin: str  # a path that keeps the unit ``pinned`` (and only it)
    pinned: str
    delete: str  # the unit deleted
    gone: set[str]  # what goes with it
    stays: set[str] = field(default_factory=set)  # what stays of it
    details: tuple[int, int, int, int, int] = FOLDER_UNITS
    whole: bool = False  # its units are its whole folder
    keys_extra: dict[str, Any] | None = None


CASES = [
    Case(
        units="file",
        role="cache",
        build=media_cache,
        keys={"a.wav": "a", "a.tmp.wav": "a", "a.wav.lock": "a", "b.wav": "b",
              "sub/c.wav": "sub/c", "notes.txt": "notes.txt", "sub/d/x.tmp.wav": "sub/d/x"},
        members={"a": {"a.wav", "a.tmp.wav", "a.wav.lock"}, "b": {"b.wav"},
                 "sub/c": {"sub/c.wav"}, "notes.txt": {"notes.txt"}},
        details=FILE_UNITS,
        whole=True,
        older_at=2.5,
        none_older_at=6,
        pin="a.tmp.wav",
        pinned="a",
        delete="a",
        gone={"a.wav", "a.tmp.wav"},
        stays={"a.wav.lock"},  # a lock file is never removed
        keys_extra={"group": r"^(?P<key>[^/]+?)(?:\.tmp)?\.wav(?:\.lock)?$",
                    "lock": "{key}.wav.lock", "quota": "1GiB"},
    ),
    Case(
        units="dir",
        role="scratch",
        build=job_tmp,
        keys={".tmp1/fa_v2/audio/0.pcm": ".tmp1", ".tmp2": ".tmp2", "loose.txt": "loose.txt",
              ".tmpnew/fa_v2/x.pcm": ".tmpnew"},
        members={
            ".tmp1": {".tmp1", ".tmp1/fa_v2", ".tmp1/fa_v2/audio", ".tmp1/fa_v2/audio/0.pcm",
                      ".tmp1/fa_v2/text", ".tmp1/fa_v2/text/0.json"},
            ".tmp2": {".tmp2", ".tmp2/asr_v2", ".tmp2/asr_v2/audio", ".tmp2/asr_v2/audio/a.pcm"},
        },
        older_at=2,
        none_older_at=4,
        pin=".tmp1/fa_v2/audio/new.pcm",  # not there yet: below the unit's folder
        pinned=".tmp1",
        delete=".tmp1",
        gone={".tmp1", ".tmp1/fa_v2/audio/0.pcm", ".tmp1/fa_v2/text/0.json"},
        keys_extra={"unit_glob": ".tmp*", "unit_requires": ["fa_v2", "asr_v2"]},
    ),
    Case(
        units="hf_revision",
        role="cache",
        build=hub_cache,
        keys={f"{TINY}/snapshots/{OLD}/model.bin": f"{TINY}/snapshots/{OLD}",
              f"{TINY}/snapshots/{MAIN}": f"{TINY}/snapshots/{MAIN}",
              f"{TINY}/refs/main": f"{TINY}/refs/main",
              blob(b"{old}"): blob(b"{old}")},
        members={
            f"{TINY}/snapshots/{OLD}": {
                f"{TINY}/snapshots/{OLD}", *(f"{TINY}/snapshots/{OLD}/{n}" for n in
                                             ("config.json", "model.bin", "tok.json")),
                blob(b"{old}"), blob(b"A" * 200 * KiB), blob(b"S" * 48 * KiB)},
            f"{TINY}/snapshots/{MAIN}": {
                f"{TINY}/snapshots/{MAIN}", *(f"{TINY}/snapshots/{MAIN}/{n}" for n in
                                              ("config.json", "model.bin", "tok.json")),
                blob(b"{new}"), blob(b"B" * 300 * KiB), blob(b"S" * 48 * KiB),
                f"{TINY}/refs/main", TINY, f"{TINY}/blobs", f"{TINY}/refs",
                f"{TINY}/snapshots"},
        },
        details=FILE_UNITS,
        older_at=5,
        none_older_at=20,
        pin=f"{TINY}/snapshots/{OLD}/new.bin",
        pinned=f"{TINY}/snapshots/{OLD}",
        delete=f"{TINY}/snapshots/{OLD}",
        gone={f"{TINY}/snapshots/{OLD}", blob(b"{old}"), blob(b"A" * 200 * KiB)},
        stays={blob(b"S" * 48 * KiB)},  # main uses it too
    ),
    Case(
        units="lmdb",
        role="cache",
        build=lmdb_cache,
        keys={"cache.lmdb/data.mdb": "cache.lmdb", "old.lmdb": "old.lmdb",
              "cache.redb": "cache.redb"},
        members={"cache.lmdb": {"cache.lmdb", "cache.lmdb/data.mdb", "cache.lmdb/lock.mdb"},
                 "old.lmdb": {"old.lmdb", "old.lmdb/data.mdb", "old.lmdb/lock.mdb"}},
        older_at=2,
        none_older_at=6,
        pin="cache.lmdb/data.mdb",
        pinned="cache.lmdb",
        delete="old.lmdb",
        gone={"old.lmdb", "old.lmdb/data.mdb", "old.lmdb/lock.mdb"},  # whole, nothing aside
        keys_extra={"quota": "1GiB"},
    ),
]  # fmt: skip
IDS = [c.units for c in CASES]


@dataclass
class OnTree:
    case: Case
    tree: TreePolicy
    root: Path
    kind: UnitKind

    def snap(self) -> Snapshot:
        return scan(self.root)

    def units(self) -> dict[str, Unit]:
        return {u.key: u for u in group_units(self.snap(), self.tree)}

    def measured(self, detail: int) -> Measured:
        folder = Folder(str(self.root), detail=detail)
        return SizeWalk.start([folder], count=1).results()[folder]


@pytest.fixture(params=CASES, ids=IDS)
def site(request: pytest.FixtureRequest, tmp_path: Path) -> OnTree:
    case: Case = request.param
    if case.units == "hf_revision" and not HAVE_HF:
        pytest.skip("huggingface_hub is not installed (pip install '.[hf]' or '.[test]')")
    root = tmp_path / "tree"
    root.mkdir()
    case.build(root)
    tree = TreePolicy(name="t", role=case.role, path=root, units=case.units,
                      **(case.keys_extra or {}))  # fmt: skip
    return OnTree(case, tree, root, kind_of(tree))


# -- the choice ------------------------------------------------------------------------------------


def test_each_name_a_policy_may_give_is_one_kind_with_its_rules() -> None:
    names = set(get_args(TreePolicy.model_fields["units"].annotation))
    assert names == set(KINDS) == set(UNIT_RULES) == set(IDS)
    for name, kind in KINDS.items():
        assert kind.name == name and kind.rules is UNIT_RULES[name]
        assert kind_named(name) is kind
    assert kind_named("no such kind") is KINDS["file"]  # a raw policy file's default


def test_the_kind_is_the_trees_and_keys_a_path_as_the_policy_does(site: OnTree) -> None:
    assert site.kind is KINDS[site.case.units]
    for rel, key in site.case.keys.items():
        assert site.kind.key(site.tree, rel) == key, rel
        assert site.tree.unit_key(rel) == key, rel  # the one rule admission asks


# -- grouping, glance, usage ----------------------------------------------------------------------


def test_a_kind_groups_its_real_tree_into_its_units(site: OnTree) -> None:
    units = site.units()
    got = {k: {e.rel for e in u.entries} for k, u in units.items()}
    assert got == site.case.members
    assert {u.kind for u in units.values()} == {site.case.units}
    if site.case.units != "hf_revision":  # a shared blob counts in one revision only
        for u in units.values():
            assert u.size == sum(allocated(e.path) for e in u.entries), u.key


def test_a_kind_tells_what_a_size_walk_must_and_does_tell_of_its_units(site: OnTree) -> None:
    from janitor.cleanup.glance import detail_for, glance, may_free, unit_bytes

    case, tree = site.case, site.tree
    asked = [("cache", False, False), ("cache", True, False), ("cache", False, True),
             ("scratch", False, False), ("report", False, False)]  # fmt: skip
    assert tuple(detail_for(r, case.units, s, a) for r, s, a in asked) == case.details
    m = site.measured(FILES)
    seen = glance(tree, m)
    units = site.units()
    if case.units in ("dir", "lmdb"):
        assert seen.bytes == sum(allocated_size(site.root / k) for k in units)
    else:
        assert seen.bytes == m.bytes  # every file, or (revisions) at least what they add up to
    assert seen.bytes == unit_bytes(tree, m) >= sum(u.size for u in units.values())
    assert seen.whole is case.whole
    now = time.time()
    assert seen.older(now - case.older_at * DAY)
    assert not seen.older(now - case.none_older_at * DAY)
    # What ``janitor status`` shows: the root, the unit folders, or the revisions.
    want = {
        "file": allocated_size(site.root),
        "dir": sum(allocated_size(site.root / k) for k in units),
        "lmdb": sum(allocated_size(site.root / k) for k in units),
        "hf_revision": sum(u.size for u in units.values()),
    }[case.units]
    assert site.kind.usage(tree) == want
    # A walk that told too little cannot rule anything out.
    assert glance(tree, site.measured(SIZE)).older(now - 100 * DAY)
    assert may_free(tree, m, usage=seen.bytes, quota=None, pressed=False, orphans=(), now=now,
                    seen=seen) is (case.role == "scratch")  # fmt: skip


def test_a_cache_of_files_with_include_or_exclude_holds_only_what_they_leave_it(
    tmp_path: Path,
) -> None:
    root = tmp_path / "tree"
    media_cache(root)
    tree = TreePolicy(name="t", role="cache", path=root, exclude=("notes.txt", "sub/*"))
    folder = Folder(str(root), detail=FILES)
    m = SizeWalk.start([folder], count=1).results()[folder]
    from janitor.cleanup.glance import glance

    seen = glance(tree, m)
    names = ("a.wav", "a.tmp.wav", "a.wav.lock", "b.wav")
    assert seen.bytes == sum(allocated(root / n) for n in names)
    assert not seen.whole
    now = time.time()
    assert seen.older(now - 2.5 * DAY) and not seen.older(now - 4 * DAY)  # c.wav is left out


# -- rechecks and delete --------------------------------------------------------------------------


def deleter(site: OnTree, pins: frozenset[str] = frozenset()) -> Deleter:
    snap = site.snap()
    plan = TreePlan(tree="t", role=site.case.role, kind=site.tree.units, root=snap.root,
                    device=snap.device, root_ino=snap.root_ino, usage=0, units=0, quota=None,
                    low_watermark=None, planned=0)  # fmt: skip
    return Deleter(plan, frozenset(), lambda: pins)


def test_a_pin_keeps_the_unit_it_covers_by_its_kind(site: OnTree) -> None:
    units = site.units()
    d = deleter(site, frozenset({str(site.root / site.case.pin)}))
    try:
        for key, unit in units.items():
            if key == site.case.pinned:
                with pytest.raises(Skip, match="pinned"):
                    site.kind.recheck(d.checks, unit)
                with pytest.raises(Skip, match="pinned"):
                    d.delete(unit)
            else:
                site.kind.recheck(d.checks, unit)
    finally:
        d.close()
    assert {p.relative_to(site.root).as_posix() for p in site.root.rglob("*")} >= {
        e.rel for u in units.values() for e in u.entries
    }


def test_a_kind_deletes_its_unit_as_it_did(site: OnTree) -> None:
    case = site.case
    units = site.units()
    unit = units[case.delete]
    sizes = {e.rel: e.size for e in unit.entries}
    d = deleter(site)
    try:
        files, size = d.delete(unit)
    finally:
        d.close()
    left = {p.relative_to(site.root).as_posix() for p in site.root.rglob("*")}
    assert not case.gone & left and case.stays <= left
    gone = {e.rel for e in unit.entries} - left
    assert case.gone <= gone and not gone & case.stays
    kinds = {e.rel: stat.S_ISDIR(e.mode) for e in unit.entries}
    assert files == sum(1 for r in gone if not kinds[r])  # files, not folders
    assert size == sum(sizes[r] for r in gone)
    # Nothing of another unit went.
    for key, other in units.items():
        if key != case.delete:
            assert {e.rel for e in other.entries} <= left, key


# -- the kinds load light --------------------------------------------------------------------------


def test_the_kinds_load_without_numpy_or_pydantic() -> None:
    """``janitor space`` asks a kind how much its walk must tell before the rest loads: the
    kinds (and the glance that asks them) must not pull numpy or pydantic in."""
    code = (
        "import sys, janitor.cleanup.glance, janitor.cleanup.kinds\n"
        "print(sorted(m for m in ('numpy', 'pydantic') if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
