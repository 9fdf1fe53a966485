"""The docs site's reference pages are the code's own words (issue 35 item 4).

``scripts/gen_reference.py`` writes ``docs/reference/`` from the typer app, the policy and
settings models and the daemon app's OpenAPI document. Here it runs, as a contributor runs it,
into a temporary folder, and every page must be the one committed: a help string, a policy
key, a setting or a route changed without the pages regenerated fails, naming the command.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "gen_reference.py"
COMMITTED = ROOT / "docs" / "reference"
#: What a stale page asks for.
FIX = "run `python scripts/gen_reference.py` and commit docs/reference/"


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("reference")
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return out


def test_every_generated_page_is_committed_as_generated(generated: Path) -> None:
    names = sorted(p.name for p in generated.iterdir())
    assert {"cli.md", "policy.md", "settings.md", "http-api.md", "openapi.json"} <= set(names)
    stale = [
        name
        for name in names
        if not (COMMITTED / name).is_file()
        or (COMMITTED / name).read_text(encoding="utf-8")
        != (generated / name).read_text(encoding="utf-8")
    ]
    assert not stale, f"docs/reference/{', '.join(stale)} stale: {FIX}"


def test_no_page_under_reference_is_left_from_an_older_generation(generated: Path) -> None:
    made = {p.name for p in generated.iterdir()}
    left = sorted(p.name for p in COMMITTED.iterdir() if p.name not in made)
    assert not left, f"docs/reference/{', '.join(left)} is generated no more: remove it, or {FIX}"


def test_the_pages_cover_every_command_policy_key_setting_and_route(generated: Path) -> None:
    """What the pages are generated from is all there: a page that skipped a command or a
    key would be regenerated as wrong as it was."""
    import typer

    from janitor.cli.app import app
    from janitor.cli.labels import finish_help, walk
    from janitor.config.policy import TreePolicy, VolumePolicy
    from janitor.config.settings import Settings

    cli = (generated / "cli.md").read_text()
    for path, command in walk(finish_help(typer.main.get_command(app))):
        if command.hidden:
            continue
        assert f"## {' '.join(path)}\n" in cli, path
        for param in command.params:
            if not param.hidden and param.param_type_name == "option":
                assert f"`{param.opts[0]}`" in cli, (path, param.opts)
    policy = (generated / "policy.md").read_text()
    for key in {*TreePolicy.model_fields, *VolumePolicy.model_fields} - {"name"}:
        assert f"| `{key}` |" in policy, key
    settings = (generated / "settings.md").read_text()
    for key in Settings.model_fields:
        assert f"| `{key}` | `JANITOR_{key.upper()}` |" in settings, key
    http = (generated / "http-api.md").read_text()
    for route in ("POST /v1/reservations", "GET /v1/status", "POST /v1/guard/call", "GET /metrics"):
        assert f"## {route} " in http, route
