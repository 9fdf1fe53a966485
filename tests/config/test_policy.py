"""Policy files: the minimal one works, sizes and paths resolve, bad ones list every problem.

A bad policy's message names the file, then each problem as ``key = value: what is wanted`` in
the README's words: one line for one problem, a line per problem (at most ten) for several.
"""

from __future__ import annotations

import os
import pickle
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from janitor import Janitor
from janitor.config.policy import MAX_PROBLEMS_SHOWN, load_policy
from janitor.config.settings import shipped_policy_path
from janitor.errors import ConfigError, PolicyError, UnknownTree
from tests._fixtures.env import JanitorEnv
from tests._fixtures.policies import SHIPPED_TREES
from tests._fixtures.space import MiB, total_of

linux_only = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="XDG placeholders are Linux's layout"
)

MINIMAL = """\
[volume]
floor = "4MiB"

[trees.t]
role = "cache"
path = "{path}"
quota = "10MiB"
"""


def _write(tmp_path: Path, text: str, name: str = "p.toml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def _tree_policy(tmp_path: Path, path: str, **keys: str) -> Path:
    extra = "".join(f'{k} = "{v}"\n' for k, v in keys.items())
    return _write(tmp_path, f'[trees.t]\nrole = "cache"\npath = "{path}"\n{extra}')


#: pydantic's and Python's words, which a policy's problems must never be told in.
JARGON = (
    "Input should",
    "Input is",
    "<class",
    "type=",
    "Value error",
    "Field required",
    "Extra inputs",
    "validation error",
    "pydantic",
    "Policy",  # TreePolicy, VolumePolicy: class names
    "PosixPath",
    "('",  # a Python tuple of keys
)


def _assert_plain(message: str) -> None:
    for word in JARGON:
        assert word not in message, (word, message)


def _load_error(path: Path, **kwargs: Path) -> PolicyError:
    with pytest.raises(PolicyError) as info:
        load_policy(path, **kwargs)
    return info.value


def _problems(path: Path, **kwargs: Path) -> tuple[str, ...]:
    """The problems a bad policy has; checks the message lists them, naming the file first."""
    err = _load_error(path, **kwargs)
    assert err.exit_code == 2
    assert isinstance(err, ConfigError) and isinstance(err, ValueError)
    message = str(err)
    _assert_plain(message)
    if len(err.problems) == 1:
        assert message == f"policy file {path}: {err.problems[0]}"
    else:
        lines = message.splitlines()
        assert lines[0] == f"policy file {path} has {len(err.problems)} problems:"
        shown = err.problems[:MAX_PROBLEMS_SHOWN]
        assert lines[1 : 1 + len(shown)] == [f"  {p}" for p in shown]
    return err.problems


def _policy_error(path: Path, **kwargs: Path) -> str:
    """The one line a policy with one problem (or a file that cannot be read) fails with."""
    with pytest.raises(PolicyError) as info:
        load_policy(path, **kwargs)
    message = str(info.value)
    assert "\n" not in message, message
    assert message.startswith(f"policy file {path}"), message
    assert info.value.exit_code == 2
    assert isinstance(info.value, ConfigError)
    _assert_plain(message)
    return message


# -- the minimal policy ----------------------------------------------------------------------


def test_minimal_policy_from_the_issue_loads(tmp_path: Path) -> None:
    tree = tmp_path / "some" / "dir"
    pol = load_policy(_write(tmp_path, MINIMAL.format(path=tree)))
    t = pol.tree("t")
    assert t.name == "t"
    assert t.role == "cache"
    assert t.path == tree
    assert t.quota_bytes(10**12) == 10 * MiB
    assert t.low_bytes(10**12) == 9 * MiB  # default low watermark: 90 % of the quota
    floor, free_low, free_target = pol.volume_policy(os.stat(tmp_path).st_dev).numbers(10**12)
    assert floor == 4 * MiB
    assert (free_low, free_target) == (8 * MiB, 12 * MiB)  # defaults: 2x and 3x the floor


def test_minimal_policy_works_for_a_reservation(tmp_path: Path, janitor_env: JanitorEnv) -> None:
    tree = tmp_path / "cache"
    tree.mkdir()
    path = _write(tmp_path, MINIMAL.format(path=tree))
    jan = Janitor.from_settings(policy=path)
    with jan.reserve("t", "1MiB", path=tree / "f.bin", job="smoke") as r:
        assert jan.get(r.id).state == "live"
        assert [x.id for x in jan.reservations()] == [r.id]
    assert jan.get(r.id).state == "released"
    assert jan.settings.ledger_path == janitor_env.ledger
    assert janitor_env.ledger.is_file()
    with pytest.raises(UnknownTree, match="defines: t"):
        jan.reserve("nope", "1MiB")


def test_write_policy_fixture_writes_a_loadable_policy(
    tmp_path: Path, write_policy: Callable[..., Path]
) -> None:
    path = write_policy(
        {"t": tmp_path / "c", "s": {"role": "scratch", "path": str(tmp_path / "s")}}
    )
    pol = load_policy(path)
    assert pol.trees["t"].role == "cache"
    assert pol.trees["s"].role == "scratch"
    assert os.environ["JANITOR_POLICY"] == str(path)


# -- sizes: percentages of the volume --------------------------------------------------------


def test_percentages_resolve_against_the_volume(
    tmpfs: Callable[..., Path], write_policy: Callable[..., Path]
) -> None:
    mount = tmpfs("64m")
    total = total_of(mount)
    assert total == 64 * MiB
    policy = write_policy(
        {"t": {"role": "cache", "path": str(mount / "t"), "quota": "50%", "low_watermark": "25%"}},
        floor="5%",
        volume={"free_low": "10%", "free_target": "20%"},
    )
    jan = Janitor.from_settings(policy=policy)
    decision = jan.would_fit("t", 1)
    assert decision.floor == int(total * 5 / 100)
    vol = jan.status().volumes[0]
    assert (vol.total, vol.floor) == (total, int(total * 0.05))
    assert (vol.free_low, vol.free_target) == (int(total * 0.10), int(total * 0.20))
    t = jan.status().trees[0]
    assert t.quota == total // 2
    assert t.low_watermark == total // 8  # 25 % of the quota, not of the volume


def test_default_floor_is_ten_percent_of_a_small_volume(
    tmpfs: Callable[..., Path], write_policy: Callable[..., Path]
) -> None:
    mount = tmpfs("64m")
    policy = write_policy({"t": mount / "t"}, floor=None)
    jan = Janitor.from_settings(policy=policy)
    assert jan.would_fit("t", 1).floor == 64 * MiB // 10


@pytest.mark.parametrize("bad", ["150%", "-5%", "x%", "five"])
def test_bad_percentage_is_refused(tmp_path: Path, bad: str) -> None:
    path = _write(tmp_path, f'[volume]\nfloor = "{bad}"\n')
    message = _policy_error(path)
    assert f'volume.floor = "{bad}": ' in message


# -- paths: placeholders and variables ---------------------------------------------------------


@linux_only
def test_placeholders_expand(tmp_path: Path, janitor_env: JanitorEnv) -> None:
    text = "".join(
        f'[trees.{name}]\nrole = "cache"\npath = "{raw}"\n\n'
        for name, raw in {
            "data": "{user_data_dir}/d",
            "cache": "{user_cache_dir}/c",
            "tmp": "{tmp}/x",
            "home": "{home}/h",
            "tilde": "~/t",
        }.items()
    )
    pol = load_policy(_write(tmp_path, text))
    assert pol.trees["data"].path == janitor_env.data_home / "d"
    assert pol.trees["cache"].path == janitor_env.cache_home / "c"
    assert pol.trees["tmp"].path == janitor_env.tmp / "x"
    assert pol.trees["home"].path == janitor_env.home / "h"
    assert pol.trees["tilde"].path == janitor_env.home / "t"


def test_env_variable_with_fallback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, janitor_env: JanitorEnv
) -> None:
    path = _tree_policy(tmp_path, "${JT_CACHE:-{home}/fallback}")
    monkeypatch.delenv("JT_CACHE", raising=False)
    assert load_policy(path).trees["t"].path == janitor_env.home / "fallback"
    monkeypatch.setenv("JT_CACHE", "")
    assert load_policy(path).trees["t"].path == janitor_env.home / "fallback"
    monkeypatch.setenv("JT_CACHE", str(tmp_path / "from-env"))
    assert load_policy(path).trees["t"].path == tmp_path / "from-env"


def test_env_variable_without_fallback_must_be_set(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _tree_policy(tmp_path, "${JT_UNSET_VAR}/x")
    monkeypatch.delenv("JT_UNSET_VAR", raising=False)
    message = _policy_error(path)
    assert "trees.t.path = " in message
    assert "JT_UNSET_VAR" in message


@pytest.mark.parametrize("raw", ["relative/dir", "{nonsense}/x"])
def test_relative_path_or_unknown_placeholder_is_refused(tmp_path: Path, raw: str) -> None:
    assert f'trees.t.path = "{raw}": ' in _policy_error(_tree_policy(tmp_path, raw))


# -- refused roots ---------------------------------------------------------------------------


@pytest.mark.parametrize("root", ["/", "/usr", "/etc/foo", "/System", "/usr/lib/x", "/home"])
def test_system_roots_are_refused(tmp_path: Path, root: str) -> None:
    message = _policy_error(_tree_policy(tmp_path, root))
    assert f'trees.t.path = "{root}": ' in message
    assert "cannot be a tree root" in message


@pytest.mark.parametrize("raw", ["{home}", "~", "{home}/"])
def test_the_home_folder_itself_is_refused(tmp_path: Path, raw: str) -> None:
    message = _policy_error(_tree_policy(tmp_path, raw))
    assert f'trees.t.path = "{raw}": ' in message
    assert str(Path.home()) in message


def test_a_folder_inside_home_is_fine(tmp_path: Path) -> None:
    assert load_policy(_tree_policy(tmp_path, "{home}/.cache/pip")).trees["t"].path.name == "pip"


def test_a_tree_holding_the_state_dir_is_refused(tmp_path: Path, janitor_env: JanitorEnv) -> None:
    # The env's root holds the state dir.
    path = _tree_policy(tmp_path, str(janitor_env.root))
    message = _policy_error(path, state_dir=janitor_env.state_dir)
    assert f'trees.t.path = "{janitor_env.root}": holds the janitor\'s state dir' in message
    assert str(janitor_env.state_dir) in message
    same = _tree_policy(tmp_path, str(janitor_env.state_dir))
    _policy_error(same, state_dir=janitor_env.state_dir)
    # ... and the same through the library's front door (state dir from JANITOR_STATE_DIR).
    with pytest.raises(PolicyError):
        Janitor.from_settings(policy=path)
    # A sibling of the state dir is fine.
    assert load_policy(
        _tree_policy(tmp_path, str(janitor_env.root / "cache")), state_dir=janitor_env.state_dir
    )


# -- bad files ---------------------------------------------------------------------------------


def test_missing_file(tmp_path: Path) -> None:
    message = _policy_error(tmp_path / "nope.toml")
    assert "does not exist" in message


def test_folder_instead_of_file(tmp_path: Path) -> None:
    _policy_error(tmp_path)


def test_bad_toml(tmp_path: Path) -> None:
    path = _write(tmp_path, '[trees.t]\nrole = "cache\n')
    message = _policy_error(path)
    assert message.startswith(f"policy file {path} is not valid TOML: line 2, column 14: ")
    assert "closing quote" in message


def test_a_table_declared_twice_is_named_as_toml_spells_it(tmp_path: Path) -> None:
    path = _write(tmp_path, '[trees.t]\nrole = "cache"\n\n[trees.t]\npath = "/srv/x"\n')
    message = _policy_error(path)
    assert "line 4, column 9: Cannot declare [trees.t] twice" in message


# Each case: a policy with one problem, and the line that must tell it (after "policy file P: ").
TREE = '[trees.t]\nrole = "cache"\npath = "/srv/x/y"\n'
ONE_PROBLEM = [
    # unknown keys: the nearest match, where the key belongs, or the keys allowed
    (TREE + "quota_mb = 5\n", "trees.t.quota_mb = 5: unknown key; did you mean quota?"),
    ('[volumee]\nfloor = "1G"\n', "[volumee]: unknown table; did you mean [volume]?"),
    ('[volume]\nflor = "1G"\n', 'volume.flor = "1G": unknown key; did you mean floor?'),
    ('floor = "1G"\n', 'floor = "1G": unknown key here; floor belongs in [volume]'),
    (
        '[volume]\nquota = "1G"\n',
        'volume.quota = "1G": unknown key here; quota belongs in a [trees',
    ),
    (TREE + "colour = 1\n", "trees.t.colour = 1: unknown key; [trees.NAME] takes role, path, "),
    ("[cache]\n", "[cache]: unknown table; a policy holds the tables [volume], [volumes.NAME]"),
    # sizes
    (TREE + 'quota = "ten"\n', 'trees.t.quota = "ten": not a size; use e.g. "500M", "2G", '),
    ('[volume]\nfloor = "-4MiB"\n', 'volume.floor = "-4MiB": must be zero or positive'),
    ("[volume]\nballast = true\n", "volume.ballast = true: not a size; use e.g."),
    (TREE + 'low_watermark = "x%"\n', 'trees.t.low_watermark = "x%": not a percentage; use e.g.'),
    (TREE + 'quota = "0"\n', 'trees.t.quota = "0": must be positive (leave quota out'),
    # durations
    (TREE + 'min_age = "soon"\n', 'trees.t.min_age = "soon": not a duration; use e.g. "90s", "5m"'),
    ('[volume]\nhorizon = "-5m"\n', 'volume.horizon = "-5m": not a duration; use e.g.'),
    (TREE + "max_age = [1]\n", "trees.t.max_age = [1]: not a duration; use e.g."),
    # enums
    ('[trees.t]\nrole = "archive"\npath = "/srv/x"\n', 'trees.t.role = "archive": wanted "cache"'),
    (
        TREE + 'units = "dirs"\n',
        'trees.t.units = "dirs": wanted "file", "dir", "hf_revision" or "lmdb"',
    ),
    # missing keys
    (
        '[trees.t]\npath = "/srv/x/y"\n',
        'trees.t.role: missing; wanted "cache", "scratch" or "report"',
    ),
    ('[trees.t]\nrole = "cache"\n', "trees.t.path: missing; wanted a folder path in quotes"),
    ('[volumes.big]\nfloor = "1G"\n', "volumes.big.path: missing; wanted any path on the volume"),
    # paths
    ('[trees.t]\nrole = "cache"\npath = 5\n', "trees.t.path = 5: wanted a folder path in quotes"),
    ("[volumes.big]\npath = 5\n", "volumes.big.path = 5: wanted any path on the volume"),
    # globs, lists, regexes and lock names
    (TREE + 'include = "*.wav"\n', 'trees.t.include = "*.wav": wanted a list of globs in quotes'),
    (TREE + 'exclude = ["*.tmp", 7]\n', "trees.t.exclude (item 2) = 7: wanted a glob in quotes"),
    (TREE + "unit_glob = 5\n", 'trees.t.unit_glob = 5: wanted a glob in quotes, e.g. ".tmp*"'),
    (TREE + 'unit_requires = "done"\n', 'trees.t.unit_requires = "done": wanted a list of file'),
    (TREE + "group = '(x'\n", 'trees.t.group = "(x": not a valid regular expression: missing )'),
    (TREE + "group = 'x'\n", 'trees.t.group = "x": needs a named group (?P<key>...)'),
    (TREE + "lock = 7\n", "trees.t.lock = 7: wanted a lock file name in quotes"),
    # tables that are not tables
    ("volume = 3\n", "volume = 3: wanted a table [volume]"),
    ("trees = 3\n", "trees = 3: wanted tables such as [trees.NAME]"),
    ("[trees]\nt = 3\n", "trees.t = 3: wanted a table [trees.t] with a role and a path"),
    # cross-field: validators that look at two keys, or at the tree's name
    (
        TREE + 'quota = "10MiB"\nlow_watermark = "20MiB"\n',
        'trees.t.low_watermark = "20MiB": must not exceed quota (10 MiB)',
    ),
    (
        TREE + 'lock = "{key}.lock"\n',
        'trees.t.lock = "{key}.lock": uses {key} but the tree has no group',
    ),
    (
        '[trees."my cache"]\nrole = "cache"\npath = "/srv/x"\n',
        '[trees."my cache"]: a tree\'s name may hold only letters',
    ),
]


@pytest.mark.parametrize(("text", "line"), ONE_PROBLEM)
def test_one_problem_is_one_line_naming_the_key_the_value_and_what_is_wanted(
    tmp_path: Path, text: str, line: str
) -> None:
    path = _write(tmp_path, text)
    message = _policy_error(path)
    assert message.startswith(f"policy file {path}: {line}")
    assert _problems(path) == (message.removeprefix(f"policy file {path}: "),)


def test_the_issues_policy_lists_both_problems(tmp_path: Path) -> None:
    """``path = 5`` and ``quota = 'lots'``: two lines in our words, not one with "(and 1 more)"."""
    path = _write(
        tmp_path,
        '[volume]\nfloor = "4MiB"\n\n[trees.media]\nrole = "cache"\npath = 5\nquota = \'lots\'\n',
    )
    problems = _problems(path)
    assert len(problems) == 2
    assert problems[0].startswith("trees.media.path = 5: wanted a folder path in quotes, e.g. ")
    assert problems[1].startswith('trees.media.quota = "lots": not a size; use e.g. "500M"')


def test_every_problem_is_listed_in_the_files_order(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "a" / "b"
    text = (
        'floor = "1G"\n'
        '[volume]\nfloor = "lots"\nhorizon = "soon"\n'
        '[volumes.big]\nfloor = "1G"\n'
        f'[trees.outer]\nrole = "archive"\npath = "{a}"\nmin_age = "soon"\nqouta = "1G"\n'
        f'[trees.inner]\nrole = "cache"\npath = "{b}"\n'
        '[trees."x y"]\nrole = "cache"\n'
    )
    problems = _problems(_write(tmp_path, text))
    keys = [p.split(" = ")[0].split(":")[0] for p in problems]
    assert keys == [
        "floor",
        "volume.floor",
        "volume.horizon",
        "volumes.big.path",
        "trees.outer.role",
        "trees.outer.min_age",
        "trees.outer.qouta",
        "trees.inner.path",  # inside outer, whose other keys are bad but whose path is good
        '[trees."x y"]',
        'trees."x y".path',
    ]
    assert f"inside the root of trees.outer ({a}); trees must not overlap" in problems[7]
    assert problems[6].endswith("unknown key; did you mean quota?")


def test_more_than_ten_problems_are_counted_not_listed(tmp_path: Path) -> None:
    text = "".join(f'[trees.t{i}]\nrole = "junk"\npath = "/srv/t{i}"\n' for i in range(13))
    path = _write(tmp_path, text)
    problems = _problems(path)
    assert len(problems) == 13
    lines = str(_load_error(path)).splitlines()
    assert len(lines) == 1 + MAX_PROBLEMS_SHOWN + 1
    assert lines[-1] == "  ... and 3 more problems"
    assert (
        lines[MAX_PROBLEMS_SHOWN]
        == '  trees.t9.role = "junk": wanted "cache", "scratch" or "report"'
    )


def test_policy_error_pickles_with_its_problems(tmp_path: Path) -> None:
    err = _load_error(_write(tmp_path, "[trees.t]\nrole = 1\npath = 2\n"))
    back = pickle.loads(pickle.dumps(err))
    assert type(back) is PolicyError
    assert (str(back), back.problems) == (str(err), err.problems)
    assert len(back.problems) == 2


def test_the_library_raises_the_same_problems(tmp_path: Path, janitor_env: JanitorEnv) -> None:
    path = _write(tmp_path, "[trees.media]\nrole = \"cache\"\npath = 5\nquota = 'lots'\n")
    with pytest.raises(PolicyError) as info:
        Janitor.from_settings(policy=path)
    assert str(info.value) == str(_load_error(path))
    assert not janitor_env.ledger.exists()


def test_the_state_dir_is_checked_beside_other_problems(
    tmp_path: Path, janitor_env: JanitorEnv
) -> None:
    text = f'[trees.t]\nrole = "cache"\npath = "{janitor_env.root}"\nmin_age = "soon"\n'
    problems = _problems(_write(tmp_path, text), state_dir=janitor_env.state_dir)
    # A tree's own keys first, then what is wrong between it and the rest.
    assert [p.split(" = ")[0] for p in problems] == ["trees.t.min_age", "trees.t.path"]
    assert "holds the janitor's state dir" in problems[1]


def test_overlapping_trees_are_refused(tmp_path: Path) -> None:
    text = (
        f'[trees.outer]\nrole = "cache"\npath = "{tmp_path / "a"}"\n\n'
        f'[trees.inner]\nrole = "scratch"\npath = "{tmp_path / "a" / "b"}"\n'
    )
    message = _policy_error(_write(tmp_path, text))
    assert f'trees.inner.path = "{tmp_path / "a" / "b"}": inside the root of trees.outer' in message
    assert "overlap" in message


def test_a_tree_inside_a_tree_that_is_not_its_neighbour_is_refused(tmp_path: Path) -> None:
    """Sorted, /x/a sits between /x and /x/b: /x/b is inside /x all the same."""
    text = "".join(
        f'[trees.{n}]\nrole = "cache"\npath = "{tmp_path / p}"\n\n'
        for n, p in (("top", "x"), ("a", "x/a"), ("b", "x/b"))
    )
    problems = _problems(_write(tmp_path, text))
    assert [p.split(" = ")[0] for p in problems] == ["trees.a.path", "trees.b.path"]
    assert all("inside the root of trees.top" in p for p in problems)


def test_two_trees_on_one_folder_are_refused(tmp_path: Path) -> None:
    text = "".join(
        f'[trees.{n}]\nrole = "cache"\npath = "{tmp_path / "same"}"\n\n' for n in ("a", "b")
    )
    message = _policy_error(_write(tmp_path, text))
    assert "trees.b.path = " in message and "the same folder as the root of trees.a" in message


def test_sibling_trees_with_a_common_prefix_do_not_overlap(tmp_path: Path) -> None:
    text = "".join(
        f'[trees.{n}]\nrole = "cache"\npath = "{tmp_path / n}"\n\n' for n in ("cache", "cache2")
    )
    assert sorted(load_policy(_write(tmp_path, text)).trees) == ["cache", "cache2"]


# -- the shipped policy -------------------------------------------------------------------------


def test_shipped_policy_loads(janitor_env: JanitorEnv) -> None:
    path = shipped_policy_path()
    assert path.is_file(), path
    pol = load_policy(path, state_dir=janitor_env.state_dir)
    assert set(pol.trees) == SHIPPED_TREES
    media, job = pol.trees["media_cache"], pol.trees["job_tmp"]
    assert media.role == "cache"
    assert job.role == "scratch"
    assert job.path == janitor_env.tmp
    assert job.units == "dir"
    rules = dict(job.unit_rules())
    assert "fa_v2" in rules[".tmp*"] and "mono_file.wav" in rules["tmp*"]
    assert media.lock == "{key}.wav.lock"


@linux_only
def test_shipped_media_cache_defaults_to_user_data_dir(janitor_env: JanitorEnv) -> None:
    pol = load_policy(shipped_policy_path())
    expected = janitor_env.data_home / "batchalign3" / "media_cache"
    assert pol.trees["media_cache"].path == expected


def test_shipped_media_cache_follows_the_pipeline_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("BATCHALIGN_MEDIA_CACHE_DIR", str(tmp_path / "mc"))
    pol = load_policy(shipped_policy_path())
    assert pol.trees["media_cache"].path == tmp_path / "mc"


def test_shipped_policy_is_the_default(janitor_env: JanitorEnv) -> None:
    jan = Janitor.from_settings()
    assert jan.policy.source == shipped_policy_path()
    assert set(jan.policy.trees) == SHIPPED_TREES


def test_user_policy_in_the_config_dir_beats_the_shipped_one(
    tmp_path: Path, janitor_env: JanitorEnv
) -> None:
    user = janitor_env.config_file.parent / "policy.toml"
    user.parent.mkdir(parents=True)
    user.write_text(MINIMAL.format(path=tmp_path / "c"))
    jan = Janitor.from_settings()
    assert jan.policy.source == user
    assert list(jan.policy.trees) == ["t"]
