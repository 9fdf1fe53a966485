"""What the daemon's log says of a sweep (issue 24 item 8), read from the real ``daemon.log``.

Started on a policy pointed at folders that already hold too much, the daemon's first sweep
deletes at once; its log line must say how much in human units and why, by tree, and the
first steps (README's quick start, the docs' first guide) must show ``janitor sweep --dry-run``
(which deletes nothing and lists the same units) before the daemon or its service starts.
"""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path

from tests._daemon_helpers import daemon_setup, eventually, running_daemon
from tests._fixtures.space import MiB, fill_file

ROOT = Path(__file__).resolve().parents[2]
#: The first steps a user reads: README's quick start, and the first guide's commands.
FIRST_STEPS = (
    (ROOT / "README.md", "## Quick start"),
    (ROOT / "docs" / "guides" / "batchalign3.md", "The commands a Mac user runs"),
)


def _old(path: Path, age: float) -> None:
    t = time.time() - age
    os.utime(path, (t, t))


def test_the_first_sweep_is_logged_in_human_units_with_its_reasons(tmp_path: Path) -> None:
    with daemon_setup(tmp_path, size="32m", tree={"quota": "4MiB"}) as setup:
        cache = [fill_file(setup.tree / f"e{i}.wav", MiB) for i in range(6)]
        for i, path in enumerate(cache):
            _old(path, 3600 - 60 * i)  # e0 the least recently used
        jobs = setup.mount / "jobs"
        orphan = jobs / ".tmpab12cd"
        fill_file(orphan / "fa_v2" / "audio" / "g0.pcm", MiB)
        for p in (orphan / "fa_v2" / "audio" / "g0.pcm", orphan / "fa_v2" / "audio"):
            _old(p, 7200)
        _old(orphan / "fa_v2", 7200)
        _old(orphan, 7200)
        scratch = {
            "role": "scratch",
            "path": str(jobs),
            "units": "dir",
            "unit_glob": ".tmp*",
            "unit_requires": ["fa_v2"],
            "orphan_age": "1h",
            "min_age": "0s",
        }
        setup.trees["jobs"] = scratch
        setup.write_policy()
        # What a person runs first deletes nothing and lists the same units, with reasons.
        dry = setup.run_cli("sweep", "--dry-run", "--json")
        assert dry.returncode in (0, 1), dry.stderr
        planned = json.loads(dry.stdout)["items"]
        assert sorted((i["tree"], i["reason"]) for i in planned) == [
            ("cache", "quota"),
            ("cache", "quota"),
            ("cache", "quota"),
            ("jobs", "orphan"),
        ]
        assert all(p.exists() for p in cache) and orphan.exists()

        with running_daemon(setup):

            def swept() -> str | None:
                text = setup.log_file.read_text() if setup.log_file.exists() else ""
                return next((ln for ln in text.splitlines() if " swept " in ln), None)

            line = eventually(swept, timeout=20, what="the first sweep's log line")
        assert not orphan.exists() and [p.exists() for p in cache] == [False] * 3 + [True] * 3
        said = line.split(" swept ", 1)[1]
        assert re.fullmatch(
            r"4 units, 4 MiB \(free space \+[\d.]+ MiB\): 3 over quota in cache \(3 MiB\), "
            r"1 orphaned in jobs \(1 MiB\)",
            said,
        ), line
        assert not re.search(r"\d{4,} ?B\b", line), line  # no raw byte counts


def test_the_readme_first_steps_dry_run_a_sweep_before_the_daemon_starts() -> None:
    for page, section in FIRST_STEPS:
        part = page.read_text().split(section, 1)[1].split("```", 2)[1]  # its first code block
        assert "janitor sweep --dry-run" in part, part
        dry = part.index("janitor sweep --dry-run")
        for start in ("janitor daemon", "janitor service install"):
            assert start not in part or part.index(start) > dry, part
