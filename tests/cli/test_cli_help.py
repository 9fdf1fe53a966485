"""The command line's edges (issue 24 item 7), each read as a person sees it: the real
``janitor`` console script in a subprocess.

Help names each value in words (``--concurrency N``, ``--policy FILE``), never a Python type,
and its paragraphs wrap evenly; the root options work after the command's name as before it,
and never reach into what follows ``--`` or the command ``run`` runs; ``run --json`` is refused
in one line instead of being run; a policy file that is missing is reported once, with the
one thing to change; ``doctor`` goes on past a policy it cannot load; the command table of
the docs' command line page lists every command there is.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import typer

from janitor.cli.app import app
from janitor.cli.argv import hoist
from janitor.cli.labels import LABELS, finish_help, label, walk
from tests._fixtures.console import janitor_in_process, one_line_error
from tests._fixtures.env import JanitorEnv

Cli = Callable[..., subprocess.CompletedProcess[str]]
#: The command line's page of the docs site, whose table lists every command.
COMMANDS_PAGE = Path(__file__).resolve().parents[2] / "docs" / "cli.md"

#: What typer prints for a value when nothing better is given: ``<bool>``, ``<list[str]>``,
#: ``<int range>``, ``<path>``; and a number range, ``[x>=1]``.
TYPE_LABEL = re.compile(r"<[a-zA-Z_][\w\[\], |.]*>|\[x[<>]=?|\[\d+(\.\d+)?<=x")


def _tree() -> Any:
    return finish_help(typer.main.get_command(app))


def _paths() -> list[tuple[str, ...]]:
    return [path[1:] for path, _ in walk(_tree())]


# -- help ---------------------------------------------------------------------------------------


def test_every_help_page_names_values_in_words(run_cli_many: Any) -> None:
    """Every page, printed by janitor's entry point in this process (a Python start each would
    cost the suite 8 CPU-seconds); the console script prints the same pages (three of them
    checked: the root's, a group's, a command's)."""
    paths = _paths()
    assert ("run",) in paths and ("service", "install") in paths
    env = {**os.environ, "COLUMNS": "100"}
    results = [janitor_in_process(*p, "--help", env=env) for p in paths]
    by_path = dict(zip(paths, results, strict=True))
    sample = [(), ("service",), ("run",)]
    by_script = run_cli_many([(*p, "--help") for p in sample], env={"COLUMNS": "100"})
    for path, done in zip(sample, by_script, strict=True):
        assert (done.returncode, done.stdout, done.stderr) == (
            by_path[path].returncode, by_path[path].stdout, by_path[path].stderr
        ), path  # fmt: skip
    for path, done in zip(paths, results, strict=True):
        page = done.stdout
        assert done.returncode == 0, (path, done.stderr)
        assert "Usage: janitor" in page, path
        found = TYPE_LABEL.findall(page)
        assert not found, f"janitor {' '.join(path)} --help shows {found}:\n{page}"
        assert "...}..." not in page and "<" not in page, page
    page = {path: done.stdout for path, done in by_path.items()}
    lines = {ln.strip("│ ").split()[0]: ln for ln in page[("run",)].splitlines() if "--" in ln}
    assert re.search(r"--concurrency\s+N\s+Files", lines["--concurrency"])
    assert re.search(r"--media\s+PATH\s+Media", lines["--media"])
    assert re.search(r"--keep\s+Leave", lines["--keep"])  # a flag: no label at all
    assert "Usage: janitor run [OPTIONS] -- {COMMAND}..." in page[("run",)]
    assert re.search(r"--policy\s+FILE\s+Policy file", page[()])
    assert re.search(r"--ttl\s+DURATION\s+", page[("reserve",)])
    assert "Usage: janitor reserve [OPTIONS] {TREE} {SIZE}" in page[("reserve",)]


def test_every_option_that_takes_a_value_has_a_label() -> None:
    """A new option must get its word in janitor.cli.labels.LABELS, or its help shows a type."""
    missing = []
    for path, command in walk(_tree()):
        for param in command.params:
            try:
                label(param)
            except KeyError:
                missing.append(f"{' '.join(path)} {param.opts}")
    assert missing == []
    assert all(word == word.upper() or "|" in word for word in LABELS.values())


def _paragraphs(page: str) -> list[list[str]]:
    """The command's description: the lines between the usage line and the first box."""
    body = page.split("╭")[0].splitlines()
    start = next(i for i, ln in enumerate(body) if ln.strip().startswith("Usage:")) + 1
    paragraphs: list[list[str]] = [[]]
    for line in body[start:]:
        if line.strip():
            paragraphs[-1].append(line.rstrip())
        elif paragraphs[-1]:
            paragraphs.append([])
    return [p for p in paragraphs if p]


@pytest.mark.parametrize("command", [("run",), ("sweep",), ("reserve",), ("space",)])
def test_help_paragraphs_wrap_evenly(run_cli: Cli, command: tuple[str, ...]) -> None:
    """Every line of a paragraph but its last fills the width, less a word: the docstring's
    own line breaks (at 95 columns in the source) are not kept."""
    done = run_cli(*command, "--help", env={"COLUMNS": "100"})
    paragraphs = _paragraphs(done.stdout)
    assert len(paragraphs) >= 2, done.stdout  # the summary line and at least one paragraph
    for para in paragraphs:
        for line in para[:-1]:
            assert len(line) >= 100 - 20, f"ragged line {line!r} in:\n{done.stdout}"


# -- the root options after the command's name ----------------------------------------------------


def test_hoist_moves_root_options_only_before_the_command_and_dashes() -> None:
    root = _tree()
    cases = [
        (["status", "--policy", "p"], ["--policy", "p", "status"]),
        (["status", "--json", "--policy=p"], ["--policy=p", "status", "--json"]),
        (
            ["--policy", "a", "status", "--policy", "b"],
            ["--policy", "a", "--policy", "b", "status"],
        ),
        (
            ["shim", "status", "--config", "c", "--json"],
            ["--config", "c", "shim", "status", "--json"],
        ),
        (["status", "--version"], ["--version", "status"]),
        # The value of the command's own option stays with it, even when it looks like ours.
        (["reserve", "t", "1M", "--job", "--policy"], ["reserve", "t", "1M", "--job", "--policy"]),
        # From `--` on, and from the command `run` runs, nothing is ours.
        (
            ["exec", "t", "1M", "--policy", "p", "--", "x", "--policy", "q"],
            ["--policy", "p", "exec", "t", "1M", "--", "x", "--policy", "q"],
        ),
        (
            ["run", "--media", "m", "--policy", "p", "cmd", "--policy", "q"],
            ["--policy", "p", "run", "--media", "m", "cmd", "--policy", "q"],
        ),
        (["run", "--", "cmd", "--config", "c"], ["run", "--", "cmd", "--config", "c"]),
        (
            ["service", "logs", "-n", "5", "--policy", "p"],
            ["--policy", "p", "service", "logs", "-n", "5"],
        ),
        # No command, or an unknown one: left to click, which says what is wrong.
        (["--policy", "p"], ["--policy", "p"]),
        (["nosuch", "--policy", "p"], ["nosuch", "--policy", "p"]),
        (["shim", "--policy", "p"], ["shim", "--policy", "p"]),
    ]
    for argv, want in cases:
        assert hoist(root, argv) == want, argv


def test_root_options_work_after_the_command(
    run_cli_many: Any, write_policy: Callable[..., Path], tmp_path: Path, janitor_env: JanitorEnv
) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    pa = write_policy({"a": tmp_path / "a"}, name="a.toml", activate=False)
    pb = write_policy({"b": tmp_path / "b"}, name="b.toml", activate=False)
    config = tmp_path / "config.toml"
    config.write_text("default_ttl_s = 60\n")
    results = run_cli_many(
        [
            ("paths", "--json", "--policy", pa),
            ("paths", "--policy=" + str(pb), "--json"),
            ("--policy", pa, "paths", "--policy", pb, "--json"),  # the later one wins
            ("status", "--json", "--policy", pb),
            ("policy", "show", "--json", "--policy", pa),
            ("paths", "--json", "--config", config),
            ("status", "--version"),
        ]
    )
    for done in results:
        assert done.returncode == 0, done.stderr
    data = [json.loads(d.stdout) for d in results[:6]]
    assert [data[i]["policy"] for i in range(3)] == [str(pa), str(pb), str(pb)]
    assert data[3]["policy"] == str(pb) and [t["name"] for t in data[3]["trees"]] == ["b"]
    assert list(data[4]["trees"]) == ["a"]
    assert data[5]["config"] == str(config)
    assert results[6].stdout.startswith("space-janitor ")


_ARGV = "import json, sys; print(json.dumps(sys.argv[1:]))"


def test_what_follows_dashes_or_runs_command_is_the_commands(
    run_cli_many: Any, write_policy: Callable[..., Path], tmp_path: Path
) -> None:
    (tmp_path / "c").mkdir()
    policy = write_policy({"c": tmp_path / "c"}, activate=False)
    tail = ["--policy", "theirs.toml", "--json", "--media", "x"]
    results = run_cli_many(
        [
            ("run", "--policy", policy, "--", sys.executable, "-c", _ARGV, *tail),
            ("run", "--policy", policy, sys.executable, "-c", _ARGV, *tail),
        ]
    )
    for done in results:
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout.splitlines()[0]) == tail


def test_run_refuses_an_option_it_does_not_have_in_one_line(
    run_cli_many: Any, write_policy: Callable[..., Path], tmp_path: Path
) -> None:
    (tmp_path / "c").mkdir()
    write_policy({"c": tmp_path / "c"})
    marker = tmp_path / "ran"
    cmd = ["sh", "-c", f'touch "{marker}"']
    results = run_cli_many(
        [
            ("run", "--json", "--", *cmd),
            ("run", "--json", *cmd),
            ("run", "--bogus", "--", *cmd),
            ("run", "--concurrency", "0", "--", *cmd),
            ("estimate", "--rate", "0", "x.wav"),
        ]
    )
    for done in results:
        assert done.returncode == 2, (done.stdout, done.stderr)
    lines = [one_line_error(d.stderr) for d in results]
    assert "--json is not an option of janitor run" in lines[0]
    assert "before the command" in lines[0]
    assert lines[1] == lines[0]
    assert "--bogus is not an option of janitor run" in lines[2]
    assert lines[3] == "janitor: error: --concurrency 0 must be at least 1"
    assert lines[4] == "janitor: error: --rate 0 must be at least 1"
    assert not marker.exists()


# -- a policy file that is not there ---------------------------------------------------------------


def test_a_missing_policy_is_named_once_with_its_one_fix(
    run_cli_many: Any, tmp_path: Path, janitor_env: JanitorEnv
) -> None:
    missing = tmp_path / "nope.toml"
    janitor_env.config_file.parent.mkdir(parents=True)
    janitor_env.config_file.write_text(f'policy = "{missing}"\n')
    results = run_cli_many(
        [
            (("status",), {"JANITOR_POLICY": str(missing)}),
            ("status", "--policy", missing),
            ("--policy", missing, "status"),
            ("status",),  # the config file names it
        ]
    )
    lines = [one_line_error(d.stderr) for d in results]
    assert all(d.returncode == 2 for d in results)
    env_line, opt_line, opt_first, config_line = lines
    assert env_line == (
        f"janitor: error: policy file {missing} does not exist (JANITOR_POLICY names it); "
        "point JANITOR_POLICY at a policy file, or unset it for the default policy"
    )
    assert opt_line == opt_first
    assert "JANITOR_POLICY" not in opt_line and "--policy" not in opt_line, opt_line
    assert opt_line.endswith("does not exist; name one that does, or none for the default policy")
    assert f"(config file {janitor_env.config_file} names it)" in config_line
    assert "`policy`" in config_line and "JANITOR_POLICY" not in config_line


def test_doctor_goes_on_past_a_missing_policy(run_cli: Cli, tmp_path: Path) -> None:
    env = {"JANITOR_POLICY": str(tmp_path / "nope.toml"), "COLUMNS": "300"}
    done = run_cli("doctor", "--json", env=env)
    assert done.returncode == 1, done.stderr
    checks = {c["name"]: c for c in json.loads(done.stdout)}
    assert checks["policy"]["verdict"] == "fail"
    assert {"config", "policy", "ledger", "daemon", "batchalign3 server", "guard"} <= set(checks)
    assert checks["policy"]["fix"].startswith("point JANITOR_POLICY at a policy file")
    assert "JANITOR_POLICY" not in checks["policy"]["message"].split("(")[0]
    human = run_cli("doctor", env=env).stdout
    assert human.count("point JANITOR_POLICY") == 1 and "validate FILE" not in human, human
    assert "ledger:" in human and "guard:" in human


# -- the docs list every command ---------------------------------------------------------------


def test_the_docs_command_table_lists_every_command() -> None:
    text = COMMANDS_PAGE.read_text()
    table = text.split("# Command line", 1)[1].split("\n\n", 2)[1]
    rows = [ln for ln in table.splitlines() if ln.startswith("| `janitor ")]
    spans = re.findall(r"`([^`]*)`", " ".join(rows))

    def listed(words: str) -> bool:
        return any(
            s in (words, f"janitor {words}") or s.startswith((f"{words} ", f"janitor {words} "))
            for s in spans
        )

    leaves = [" ".join(p[1:]) for p, c in walk(_tree()) if not getattr(c, "commands", None)]
    missing = [words for words in leaves if not listed(words)]
    assert missing == [], f"commands missing from docs/cli.md's command table: {missing}"
