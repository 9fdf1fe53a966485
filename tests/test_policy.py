"""Policy files: the minimal one works, sizes and paths resolve, bad ones fail with one line."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from janitor import Janitor
from janitor.errors import ConfigError, PolicyError, UnknownTree
from janitor.policy import load_policy
from janitor.settings import shipped_policy_path

from .conftest import JanitorEnv, MiB, total_of

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


def _policy_error(path: Path, **kwargs: Path) -> str:
    with pytest.raises(PolicyError) as info:
        load_policy(path, **kwargs)
    message = str(info.value)
    assert "\n" not in message, message
    assert str(path) in message, message
    assert info.value.exit_code == 2
    assert isinstance(info.value, ConfigError)
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
    decision = jan.check("t", 1)
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
    assert jan.check("t", 1).floor == 64 * MiB // 10


@pytest.mark.parametrize("bad", ["150%", "-5%", "x%", "five"])
def test_bad_percentage_is_refused(tmp_path: Path, bad: str) -> None:
    path = _write(tmp_path, f'[volume]\nfloor = "{bad}"\n')
    message = _policy_error(path)
    assert "'volume.floor'" in message


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
    assert "'trees.t.path'" in message
    assert "JT_UNSET_VAR" in message


@pytest.mark.parametrize("raw", ["relative/dir", "{nonsense}/x"])
def test_relative_path_or_unknown_placeholder_is_refused(tmp_path: Path, raw: str) -> None:
    assert "'trees.t.path'" in _policy_error(_tree_policy(tmp_path, raw))


# -- refused roots ---------------------------------------------------------------------------


@pytest.mark.parametrize("root", ["/", "/usr", "/etc/foo", "/System", "/usr/lib/x", "/home"])
def test_system_roots_are_refused(tmp_path: Path, root: str) -> None:
    message = _policy_error(_tree_policy(tmp_path, root))
    assert "'trees.t.path'" in message
    assert "cannot be a tree root" in message


@pytest.mark.parametrize("raw", ["{home}", "~", "{home}/"])
def test_the_home_folder_itself_is_refused(tmp_path: Path, raw: str) -> None:
    message = _policy_error(_tree_policy(tmp_path, raw))
    assert "'trees.t.path'" in message
    assert str(Path.home()) in message


def test_a_folder_inside_home_is_fine(tmp_path: Path) -> None:
    assert load_policy(_tree_policy(tmp_path, "{home}/.cache/pip")).trees["t"].path.name == "pip"


def test_a_tree_holding_the_state_dir_is_refused(tmp_path: Path, janitor_env: JanitorEnv) -> None:
    # The env's root holds the state dir.
    path = _tree_policy(tmp_path, str(janitor_env.root))
    message = _policy_error(path, state_dir=janitor_env.state_dir)
    assert "'trees.t.path'" in message
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
    message = _policy_error(_write(tmp_path, '[trees.t]\nrole = "cache\n'))
    assert "TOML" in message


@pytest.mark.parametrize(
    ("text", "key", "reason"),
    [
        (
            '[trees.t]\nrole = "cache"\npath = "/srv/x/y"\nquota_mb = 5\n',
            "trees.t.quota_mb",
            "unknown key",
        ),
        ('[volumee]\nfloor = "1G"\n', "volumee", "unknown key"),
        ('[volume]\nflor = "1G"\n', "volume.flor", "unknown key"),
        (
            '[trees.t]\nrole = "cache"\npath = "/srv/x/y"\nquota = "ten"\n',
            "trees.t.quota",
            "not a size",
        ),
        ('[volume]\nfloor = "-4MiB"\n', "volume.floor", "size"),
        ('[trees.t]\npath = "/srv/x/y"\n', "trees.t.role", "missing"),
        ('[trees.t]\nrole = "cache"\n', "trees.t.path", "missing"),
        ('[trees.t]\nrole = "archive"\npath = "/srv/x/y"\n', "trees.t.role", ""),
        (
            '[trees.t]\nrole = "cache"\npath = "/srv/x/y"\nmin_age = "soon"\n',
            "trees.t.min_age",
            "duration",
        ),
        ('[trees.t]\nrole = "cache"\npath = "/srv/x/y"\nquota = "0"\n', "trees.t", "quota"),
    ],
)
def test_bad_values_name_the_file_and_the_key(
    tmp_path: Path, text: str, key: str, reason: str
) -> None:
    message = _policy_error(_write(tmp_path, text))
    assert f"key '{key}'" in message
    assert reason in message


def test_overlapping_trees_are_refused(tmp_path: Path) -> None:
    text = (
        f'[trees.outer]\nrole = "cache"\npath = "{tmp_path / "a"}"\n\n'
        f'[trees.inner]\nrole = "scratch"\npath = "{tmp_path / "a" / "b"}"\n'
    )
    message = _policy_error(_write(tmp_path, text))
    assert "'outer'" in message and "'inner'" in message
    assert "overlap" in message


def test_two_trees_on_one_folder_are_refused(tmp_path: Path) -> None:
    text = "".join(
        f'[trees.{n}]\nrole = "cache"\npath = "{tmp_path / "same"}"\n\n' for n in ("a", "b")
    )
    assert "overlap" in _policy_error(_write(tmp_path, text))


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
    assert set(pol.trees) == {"media_cache", "job_tmp"}
    media, job = pol.trees["media_cache"], pol.trees["job_tmp"]
    assert media.role == "cache"
    assert job.role == "scratch"
    assert job.path == janitor_env.tmp
    assert job.units == "dir"
    assert job.unit_glob == ".tmp*"
    assert "fa_v2" in job.unit_requires
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
    assert set(jan.policy.trees) == {"media_cache", "job_tmp"}


def test_user_policy_in_the_config_dir_beats_the_shipped_one(
    tmp_path: Path, janitor_env: JanitorEnv
) -> None:
    user = janitor_env.config_file.parent / "policy.toml"
    user.parent.mkdir(parents=True)
    user.write_text(MINIMAL.format(path=tmp_path / "c"))
    jan = Janitor.from_settings()
    assert jan.policy.source == user
    assert list(jan.policy.trees) == ["t"]
