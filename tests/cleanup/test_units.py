"""Units: how the shipped policy groups real files into cache entries and job folders."""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from janitor.cleanup.kinds import group_units, kind_of
from janitor.cleanup.scan import Entry, Snapshot, scan
from janitor.cleanup.units import Unit, UnitTable
from janitor.config.policy import Policy, TreePolicy, load_policy
from janitor.config.settings import shipped_policy_path
from tests._enforce_helpers import DAY, HOUR, KiB, allocated, fp, make_file, make_job, set_age
from tests._fixtures.env import JanitorEnv


@pytest.fixture
def shipped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, janitor_env: JanitorEnv) -> Policy:
    """The shipped batchalign3 policy with its media cache under tmp_path and TMPDIR isolated."""
    cache = tmp_path / "media_cache"
    cache.mkdir()
    monkeypatch.setenv("BATCHALIGN_MEDIA_CACHE_DIR", str(cache))
    policy = load_policy(shipped_policy_path())
    assert policy.trees["media_cache"].path == cache
    assert policy.trees["job_tmp"].path == janitor_env.tmp
    return policy


def _units(tree: TreePolicy, touches: dict[str, float] | None = None) -> dict[str, Unit]:
    units = group_units(scan(tree.path), tree, touches)
    by_key = {u.key: u for u in units}
    assert len(by_key) == len(units), "two units share a key"
    return by_key


def _names(unit: Unit) -> set[str]:
    return {e.rel for e in unit.entries}


# -- the media cache -------------------------------------------------------------------------------


def test_a_cache_entry_is_its_wav_tmp_wav_and_lock(shipped: Policy) -> None:
    tree = shipped.trees["media_cache"]
    root = tree.path
    key = fp(1)
    wav = make_file(root / f"{key}.wav", 32 * KiB)
    tmp = make_file(root / f"{key}.tmp.wav", 16 * KiB)
    lock = make_file(root / f"{key}.wav.lock", 0)
    units = _units(tree)
    assert set(units) == {key}
    unit = units[key]
    assert unit.kind == "file"
    assert _names(unit) == {f"{key}.wav", f"{key}.tmp.wav", f"{key}.wav.lock"}
    assert unit.lock == str(root / f"{key}.wav.lock")
    assert unit.size == allocated(wav) + allocated(tmp) + allocated(lock)


def test_segment_files_are_units_of_their_own(shipped: Policy) -> None:
    tree = shipped.trees["media_cache"]
    root = tree.path
    entry = fp(1)
    make_file(root / f"{entry}.wav", 8 * KiB)
    make_file(root / f"{entry}.wav.lock", 0)
    segments = [fp(100 + i) for i in range(3)]
    for s in segments:
        make_file(root / f"{s}.wav", 4 * KiB)
    units = _units(tree)
    assert set(units) == {entry, *segments}
    for s in segments:
        assert _names(units[s]) == {f"{s}.wav"}
        assert units[s].path == str(root / f"{s}.wav")
    assert _names(units[entry]) == {f"{entry}.wav", f"{entry}.wav.lock"}


def test_a_leftover_tmp_wav_or_lock_alone_is_a_unit(shipped: Policy) -> None:
    tree = shipped.trees["media_cache"]
    root = tree.path
    killed, stale = fp(1), fp(2)
    make_file(root / f"{killed}.tmp.wav", 4 * KiB)  # a killed conversion
    make_file(root / f"{stale}.wav.lock", 0)  # a lock file nobody removed
    units = _units(tree)
    assert _names(units[killed]) == {f"{killed}.tmp.wav"}
    assert units[killed].lock == str(root / f"{killed}.wav.lock")
    assert _names(units[stale]) == {f"{stale}.wav.lock"}
    assert units[stale].lock == str(root / f"{stale}.wav.lock")


@pytest.mark.parametrize(
    "layout", ["only-locks", "pairs-and-leftovers", "only-wavs", "nested-leftovers"]
)
def test_lock_only_units_are_found_in_every_layout(shipped: Policy, layout: str) -> None:
    """The units that are nothing but their lock file, whichever path the grouping takes: all
    names one suffix (a cache whose every entry was evicted, or one with no lock files), or
    entries grouped with their lock files beside leftovers, in subfolders too."""
    tree = shipped.trees["media_cache"]
    root = tree.path
    sub = "" if layout != "nested-leftovers" else "sub/"
    for i in range(6):
        if layout != "only-wavs":
            make_file(root / f"{sub}{fp(i)}.wav.lock", 0)
        if layout == "only-wavs" or (layout != "only-locks" and i % 2):
            make_file(root / f"{sub}{fp(i)}.wav", 4 * KiB)
    table = group_units(scan(root), tree)
    idle = {table.key(i) for i in table.lock_only().tolist()}
    expected = {
        "only-locks": set(range(6)),
        "pairs-and-leftovers": {0, 2, 4},
        "only-wavs": set(),
        "nested-leftovers": {0, 2, 4},
    }[layout]
    assert idle == {f"{sub}{fp(i)}" for i in expected}
    for i in table.lock_only().tolist():
        (e,) = table.members(i)
        assert e.path == table.lock(i)


def test_a_cache_entry_is_reported_by_its_wav(shipped: Policy) -> None:
    """The unit's path (what `sweep` prints and the log records) is the entry ``{fp}.wav``.

    Whatever order the folder lists its files in, an entry must not be shown as its
    ``.wav.lock`` or ``.tmp.wav`` companion.
    """
    tree = shipped.trees["media_cache"]
    root = tree.path
    keys = [fp(i) for i in range(8)]
    for key in keys:
        # Companions first, so creation order does not favour the .wav.
        make_file(root / f"{key}.wav.lock", 0)
        make_file(root / f"{key}.tmp.wav", KiB)
        make_file(root / f"{key}.wav", KiB)
    units = _units(tree)
    wrong = sorted(
        os.path.basename(u.path) for k, u in units.items() if u.path != str(root / f"{k}.wav")
    )
    assert not wrong, f"entries reported by a companion file: {wrong}"


def test_last_use_is_the_latest_mtime_or_atime_in_the_entry(shipped: Policy) -> None:
    tree = shipped.trees["media_cache"]
    root = tree.path
    key = fp(1)
    wav = make_file(root / f"{key}.wav", 4 * KiB)
    lock = make_file(root / f"{key}.wav.lock", 0)
    set_age(wav, 5 * DAY)
    set_age(lock, 5 * DAY)
    now = os.stat(wav).st_mtime + 5 * DAY
    read_at = now - HOUR
    os.utime(wav, (read_at, now - 5 * DAY))  # read an hour ago, written five days ago
    assert _units(tree)[key].last_use == pytest.approx(read_at)


def test_a_recorded_touch_counts_as_use(shipped: Policy) -> None:
    tree = shipped.trees["media_cache"]
    root = tree.path
    key = fp(1)
    wav = make_file(root / f"{key}.wav", 4 * KiB, age=3 * DAY)
    old = _units(tree)[key].last_use
    touched = old + DAY
    assert _units(tree, {str(wav): touched})[key].last_use == touched
    assert _units(tree, {str(wav): old - DAY})[key].last_use == old


def test_grouping_is_policy_data_not_batchalign_code(tmp_path: Path) -> None:
    root = tmp_path / "models"
    make_file(root / "bert.bin", 4 * KiB)
    make_file(root / "bert.json", 100)
    make_file(root / "gpt.bin", 4 * KiB)
    make_file(root / "notes.txt", 10)
    tree = TreePolicy.model_validate(
        {
            "name": "models",
            "role": "cache",
            "path": str(root),
            "group": r"^(?P<key>[^.]+)\.(?:bin|json)$",
            "lock": "{key}.lock",
        }
    )
    units = _units(tree)
    assert set(units) == {"bert", "gpt", "notes.txt"}
    assert _names(units["bert"]) == {"bert.bin", "bert.json"}
    assert units["bert"].lock == str(root / "bert.lock")
    assert units["notes.txt"].lock is None  # no key: no lock file to name
    assert kind_of(tree).key(tree, "bert.json") == "bert"


def test_include_and_exclude_limit_what_is_managed(tmp_path: Path) -> None:
    root = tmp_path / "c"
    make_file(root / "a.wav", 10)
    make_file(root / "b.wav", 10)
    make_file(root / "keep.txt", 10)
    tree = TreePolicy.model_validate(
        {
            "name": "c",
            "role": "cache",
            "path": str(root),
            "include": ["*.wav"],
            "exclude": ["b.*"],
        }
    )
    assert set(_units(tree)) == {"a.wav"}


# -- job temp folders ------------------------------------------------------------------------------


def test_job_folders_with_a_pipeline_scope_are_units(
    shipped: Policy, janitor_env: JanitorEnv
) -> None:
    tree = shipped.trees["job_tmp"]
    tmp = janitor_env.tmp
    fa = make_job(tmp, ".tmpab12cd", "fa_v2", age=2 * DAY)
    avqi = make_job(tmp, ".tmpef34gh", "avqi_v2_3", age=2 * DAY)
    # Not ours: another program's .tmp folder, an empty one, loose files, a non-.tmp folder.
    make_file(tmp / ".tmpzz99yy" / "cache" / "x.bin", 4 * KiB)
    (tmp / ".tmpempty").mkdir()
    make_file(tmp / ".tmploose", 10)
    make_file(tmp / "loose.pcm", 10)
    make_file(tmp / "notatmp" / "fa_v2" / "audio" / "0.pcm", 10)
    units = _units(tree)
    assert set(units) == {".tmpab12cd", ".tmpef34gh"}
    for unit, folder in ((units[".tmpab12cd"], fa), (units[".tmpef34gh"], avqi)):
        assert unit.kind == "dir"
        assert unit.path == str(folder)
        on_disk = {str(p) for p in folder.rglob("*")} | {str(folder)}
        assert {e.path for e in unit.entries} == on_disk
        assert unit.size == sum(allocated(p) for p in on_disk)
        assert unit.lock is None


def test_job_folder_last_activity_is_its_newest_mtime(
    shipped: Policy, janitor_env: JanitorEnv
) -> None:
    tree = shipped.trees["job_tmp"]
    job = make_job(janitor_env.tmp, ".tmpab12cd", "asr_v2", age=3 * DAY)
    newest = job / "asr_v2" / "audio" / "1.pcm"
    fresh = set_age(newest, HOUR)
    # A recent read (atime) does not make a job folder active: only writes do.
    older = job / "asr_v2" / "text" / "0.json"
    os.utime(older, (fresh + 60, os.stat(older).st_mtime))
    unit = _units(tree)[".tmpab12cd"]
    assert unit.last_use == pytest.approx(fresh)
    assert unit.newest_mtime == pytest.approx(fresh)


def test_unit_keys_of_paths(shipped: Policy) -> None:
    cache = shipped.trees["media_cache"]
    jobs = shipped.trees["job_tmp"]
    key = fp(7)
    assert kind_of(cache).key(cache, f"{key}.tmp.wav") == key
    assert kind_of(cache).key(cache, f"{key}.wav.lock") == key
    assert kind_of(cache).key(cache, f"sub/{key}.wav") == f"sub/{key}"
    assert kind_of(jobs).key(jobs, ".tmpab12cd/fa_v2/audio/0.pcm") == ".tmpab12cd"


# -- grouping a million names: the fast path agrees with the regex, name by name ------------------

_FILE = stat.S_IFREG | 0o644
_PIECES = ["a", "b7", ".", ".wav", ".tmp", ".lock", "wav", "tmp", "é", " "]
_GROUPS = [
    r"^(?P<key>[^/]+?)(?:\.tmp)?\.wav(?:\.lock)?$",  # the shipped policy's
    r"^(?P<key>.*?)(?:\.tmp)?\.wav(?:\.lock)?\Z",
    r"(?P<key>.+?)\.(?:wav|bin)(\.lock){0,2}$",
    r"^(?P<key>[^.]+)\.(?:wav|lock)$",  # another shape: matched name by name
]


@settings(max_examples=300, deadline=None)
@given(
    names=st.lists(
        st.lists(st.sampled_from(_PIECES), min_size=1, max_size=6).map("".join),
        unique=True,
        max_size=25,
    ),
    folders=st.lists(st.sampled_from(["", "sub", "sub/deep", "x.wav"]), min_size=25, max_size=25),
    group=st.sampled_from(_GROUPS),
    lock=st.sampled_from(["{key}.wav.lock", "locks/{key}.lck", "all.lock", None]),
    newline=st.booleans(),
)
def test_file_units_group_exactly_as_the_regex_matches_each_name(
    names: list[str], folders: list[str], group: str, lock: str | None, newline: bool
) -> None:
    root = "/data/cache"
    if newline:  # a name with a newline: every name is matched one by one
        names = [*names[:24], "x\n.wav"]
    rels = [f"{d}/{n}" if d else n for n, d in zip(names, folders, strict=False)]
    entries = tuple(
        Entry(f"{root}/{rel}", rel, 4096 * (i + 1), 100 + i, 7, 1e9 + i, 1e9, 1e9, 0, _FILE, 9)
        for i, rel in enumerate(rels)
    )
    tree = TreePolicy.model_validate(
        {"name": "c", "role": "cache", "path": root, "group": group, "lock": lock}
    )
    units = group_units(Snapshot(root, 7, 1, 0.0, entries), tree)
    # The reference: each name's key from re.match, grouped in walk order.
    expected: dict[str, list[Entry]] = {}
    for e in entries:
        expected.setdefault(kind_of(tree).key(tree, e.rel), []).append(e)
    assert [u.key for u in units] == list(expected)
    for u in units:
        members = expected[u.key]
        assert u.entries == tuple(members)
        assert u.size == sum(e.size for e in members)
        assert u.last_use == max(e.mtime for e in members)
        assert u.path == min(members, key=lambda e: (len(e.rel), e.rel)).path
        folder, _, key_name = u.key.rpartition("/")
        matched = any(re.match(group, e.rel.rpartition("/")[2]) for e in members)
        if lock is None or ("{key}" in lock and not matched):
            assert u.lock is None
        else:
            name = lock.replace("{key}", key_name)
            assert u.lock == (f"{root}/{folder}/{name}" if folder else f"{root}/{name}")
    # Units that are nothing but their own lock file (what eviction leaves), by definition.
    idle = [i for i, u in enumerate(units) if u.lock and all(e.path == u.lock for e in u.entries)]
    assert units.lock_only().tolist() == idle
    assert UnitTable.of(list(units), root).lock_only().tolist() == idle
