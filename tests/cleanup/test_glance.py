"""``janitor.cleanup.glance`` against the dry-run sweep it stands in for, on real random trees:
whenever a sweep would free something in a tree, ``may_free`` says so, and ``unit_bytes`` is
the sweep's ``usage`` to the byte. Then the early walk of ``janitor space``: the folders it
plans from the raw policy file are the ones the loaded policy asks for (or it is not used).
"""

from __future__ import annotations

import os
import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from janitor import Janitor
from janitor.admission.volume import Volume
from janitor.cleanup.glance import may_free, orphaned_jobs, unit_bytes
from janitor.cli.quick import SpaceArgs, space_args
from janitor.config.glimpse import raw_trees
from janitor.config.settings import shipped_policy_path
from janitor.host.batchalign3 import known_paths
from janitor.host.sizewalk import SizeWalk
from janitor.usage import TreeSpec, plan_folders, tree_specs
from tests.cleanup.conftest import JanFor

DAY = 86400.0


def _age(path: Path, days: float) -> None:
    when = time.time() - days * DAY
    os.utime(path, (when, when), follow_symlinks=False)


def _file(path: Path, rng: random.Random, days: float) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"\0" * rng.choice([0, 100, 5000, 70_000]))
    _age(path, days)
    return path


AGES = [0.0, 0.2, 0.9, 1.1, 2.5, 9.0]  # days; the policies below cut at 1 and 2 days


def _job_tmp(root: Path, rng: random.Random) -> None:
    """Job folders (.tmp* holding fa_v2), look-alikes without it, other programs' files."""
    for j in range(rng.randint(0, 6)):
        head = root / f".tmp{j:03d}"
        inner = head / rng.choice(["fa_v2", "fa_v2", "other"]) / "audio"
        inner.mkdir(parents=True)
        age = rng.choice(AGES)  # mostly one age per job folder: some are orphans

        def some() -> float:
            return age if rng.random() < 0.8 else rng.choice(AGES)  # noqa: B023

        for k in range(rng.randint(0, 3)):
            _file(inner / f"{k}.pcm", rng, some())
        if rng.random() < 0.15:
            mine = next(inner.iterdir(), None)
            if mine is not None:
                os.link(mine, root / f"linked-{j}.pcm")
        for p in (inner, inner.parent, head):
            _age(p, some())
    for k in range(rng.randint(0, 4)):
        _file(root / "other-program" / f"x{k}", rng, rng.choice(AGES))


def _logs(root: Path, rng: random.Random) -> None:
    for name in ["server.log", "server.log.1", "server.yaml", "jobs.db"]:
        if rng.random() < 0.7:
            _file(root / name, rng, rng.choice(AGES))
    for k in range(rng.randint(0, 5)):
        _file(root / rng.choice(["logs", "bug-reports", "jobs/j1"]) / f"run-{k}.jsonl", rng,
              rng.choice(AGES))  # fmt: skip
    for k in range(rng.randint(0, 2)):
        _file(root / "logs" / f"keep-{k}.log", rng, rng.choice(AGES))


def _cache(root: Path, rng: random.Random) -> None:
    for k in range(rng.randint(0, 8)):
        key = f"{k:024x}"
        _file(root / f"{key}.wav", rng, rng.choice(AGES))
        if rng.random() < 0.3:
            _file(root / f"{key}.wav.lock", rng, rng.choice(AGES))
        if rng.random() < 0.2:
            _file(root / "sub" / f"{key}.wav", rng, rng.choice(AGES))


def _trees(base: Path, quota: str) -> dict[str, Any]:
    return {
        "jobs": {"role": "scratch", "path": str(base / "tmp"), "units": "dir",
                 "unit_glob": ".tmp*", "unit_requires": ["fa_v2"], "orphan_age": "1d",
                 "min_age": "0s"},
        "logs": {"role": "scratch", "path": str(base / "state"),
                 "include": ["server.log", "server.log.*", "logs/*", "bug-reports/*"],
                 "exclude": ["jobs/*", "logs/keep-*"], "orphan_age": "1d", "min_age": "0s"},
        "aged": {"role": "cache", "path": str(base / "aged"), "quota": "1GiB", "max_age": "2d",
                 "min_age": "0s", "group": r"^(?P<key>[^/]+?)\.wav(?:\.lock)?$",
                 "lock": "{key}.wav.lock"},
        "small": {"role": "cache", "path": str(base / "small"), "quota": quota, "min_age": "0s"},
        "models": {"role": "report", "path": str(base / "models")},
    }  # fmt: skip


@pytest.mark.parametrize("seed", range(20))
def test_a_tree_a_sweep_frees_from_is_never_ruled_out(
    seed: int, tmp_path: Path, jan_for: JanFor
) -> None:
    rng = random.Random(seed)
    base = tmp_path / "w"
    _job_tmp(base / "tmp", rng)
    _logs(base / "state", rng)
    _cache(base / "aged", rng)
    _cache(base / "small", rng)
    _file(base / "models" / "m.bin", rng, 30)
    for d in ("tmp", "state", "aged", "small"):
        (base / d).mkdir(parents=True, exist_ok=True)
    jan = jan_for(_trees(base, rng.choice(["1KiB", "100KiB", "1MiB"])))
    specs = tree_specs(jan.policy)
    plan = plan_folders(specs, [])
    measured = SizeWalk.start(plan.folders, count=2).results()
    with jan.ledger.read() as tx:
        orphans = orphaned_jobs(tx.jobs.active())
    sweep = jan.sweep(dry_run=True)
    planned: dict[str, int] = {}
    for item in sweep.plan.items:
        planned[item.tree] = planned.get(item.tree, 0) + item.size
    usage = {tp.tree: tp.usage for tp in sweep.plan.trees}
    now = time.time()
    for name, tree in jan.policy.trees.items():
        m = measured[plan.trees[name]]
        vol = Volume.at(jan.policy, tree.path)
        used = unit_bytes(tree, m)
        linked = any(c.linked for c in m.children)
        if name in usage and not linked:
            if tree.units == "file" and not tree.include and not tree.exclude:
                # Every file is the tree's: the report counts its folders too (never less)
                assert used == m.bytes >= usage[name], name
            else:
                assert used == usage[name], name
        doubt = may_free(tree, m, usage=used, quota=tree.quota_bytes(vol.total),
                         pressed=vol.free < vol.free_low, orphans=orphans, now=now)  # fmt: skip
        if planned.get(name, 0):
            assert doubt, (name, planned[name])


def test_fresh_trees_need_no_sweep_and_old_ones_do(tmp_path: Path, jan_for: JanFor) -> None:
    rng = random.Random(1)
    base = tmp_path / "w"
    for d in ("tmp", "state", "aged", "small", "models"):
        (base / d).mkdir(parents=True)
    job = base / "tmp" / ".tmpabc" / "fa_v2"
    _file(job / "1.pcm", rng, 0)
    _file(base / "tmp" / "old-other-program-file", rng, 30)  # not a unit: changes nothing
    _file(base / "state" / "server.yaml", rng, 30)  # not included: changes nothing
    _file(base / "state" / "server.log", rng, 0)
    _file(base / "aged" / ("a" * 24 + ".wav"), rng, 0)
    jan = jan_for(_trees(base, "1MiB"))
    plan = plan_folders(tree_specs(jan.policy), [])

    def doubts() -> set[str]:
        measured = SizeWalk.start(plan.folders, count=2).results()
        out = set()
        for name, tree in jan.policy.trees.items():
            m = measured[plan.trees[name]]
            vol = Volume.at(jan.policy, tree.path)
            if may_free(tree, m, usage=unit_bytes(tree, m), quota=tree.quota_bytes(vol.total),
                        pressed=False, orphans=[], now=time.time()):  # fmt: skip
                out.add(name)
        return out

    assert doubts() == set()
    for p in (job / "1.pcm", job, job.parent):
        _age(p, 3)
    _age(base / "state" / "server.log", 3)
    _age(base / "aged" / ("a" * 24 + ".wav"), 3)
    assert doubts() == {"jobs", "logs", "aged"}


def _folders_from_glimpse(config: str | None = None, policy: str | None = None) -> Any:
    trees = raw_trees(config, policy)
    assert trees is not None
    from janitor.cleanup.glance import detail_for

    specs = [TreeSpec(t.name, t.path, detail_for(t.role, t.units, t.selects, t.max_age))
             for t in trees]  # fmt: skip
    return plan_folders(specs, [(k.name, str(k.path)) for k in known_paths()]).folders


def _folders_loaded(jan: Janitor) -> Any:
    known = [(k.name, str(k.path)) for k in known_paths()]
    return plan_folders(tree_specs(jan.policy), known).folders


def test_the_early_walk_plans_what_the_loaded_policy_asks_for(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, write_policy: Callable[..., Path]
) -> None:
    monkeypatch.delenv("JANITOR_POLICY", raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setenv("BATCHALIGN_STATE_DIR", str(tmp_path / "ba3"))
    shipped = Janitor.from_settings()
    assert shipped.policy.source == shipped_policy_path()
    assert _folders_from_glimpse() == _folders_loaded(shipped)
    # --policy, and a config file that names the policy
    mine = write_policy({"c": {"role": "cache", "path": "${HOME}/c", "quota": "1GiB",
                               "max_age": "3d"}}, activate=False)  # fmt: skip
    by_flag = Janitor.from_settings(policy=mine)
    assert _folders_from_glimpse(policy=str(mine)) == _folders_loaded(by_flag)
    config = tmp_path / "config.toml"
    config.write_text(f'policy = "{mine}"\n')
    by_config = Janitor.from_settings(config=config)
    assert by_config.policy.source == mine
    assert _folders_from_glimpse(config=str(config)) == _folders_loaded(by_config)
    for jan in (shipped, by_flag, by_config):
        jan.ledger.close()


@pytest.mark.parametrize(
    ("argv", "args"),
    [
        (["space"], SpaceArgs(None, None)),
        (["space", "--json"], SpaceArgs(None, None, as_json=True)),
        (["space", "--fresh", "--json"], SpaceArgs(None, None, as_json=True, fresh=True)),
        (["--policy", "p.toml", "space"], SpaceArgs(None, "p.toml")),
        (["--config=c.toml", "space", "--json"], SpaceArgs("c.toml", None, as_json=True)),
        (["space", "--help"], None),
        (["space", "--jsn"], None),
        (["--help"], None),
        (["status"], None),
        (["--version", "space"], None),
        (["--policy"], None),
        ([], None),
    ],
)
def test_only_a_plain_space_command_line_skips_typer(
    argv: list[str], args: SpaceArgs | None
) -> None:
    assert space_args(argv) == args
