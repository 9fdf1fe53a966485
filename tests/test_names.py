"""One meaning for each name, checked from the tree of ``janitor/``: no two modules of a package
a reader cannot tell apart (``delete`` beside ``deleter``), one ``server`` (the daemon's), a
``job`` that is only ever the pipeline's job, and no docstring or comment that sends the reader
to a file outside the repository.

These read file names and source text; nothing is imported.
"""

from __future__ import annotations

import re
from itertools import permutations
from pathlib import Path

PKG = Path(__file__).resolve().parent.parent / "janitor"

#: Endings that make a second name of the same word: ``delete``/``deleter``, ``sweep``/``sweeper``,
#: ``unit``/``units``, ``guard``/``guarding``.
SUFFIXES = ("r", "er", "or", "s", "es", "ed", "ing", "ion")

#: Pairs kept on purpose, each with why. ``janitor.guard`` is the guard's old address, which
#: guards written by an early ``janitor shim install`` import and users may call.
NEAR_NAMES_KEPT = {("janitor.guard", "janitor.guarding")}


def modules() -> list[str]:
    """Every module and package of ``janitor``, dotted (``janitor.cleanup.apply``)."""
    names = []
    for path in sorted(PKG.rglob("*.py")):
        parts = list(path.relative_to(PKG.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        names.append(".".join(parts))
    return names


def near_names(names: list[str]) -> set[tuple[str, str]]:
    """Pairs of ``names`` in one package whose last parts differ only by an ending of
    :data:`SUFFIXES`, the shorter first."""
    return {
        (a, b)
        for a, b in permutations(names, 2)
        if a.rpartition(".")[0] == b.rpartition(".")[0]
        and any(b.rpartition(".")[2] == a.rpartition(".")[2] + s for s in SUFFIXES)
    }


def test_the_checker_sees_names_that_differ_by_an_ending() -> None:
    names = [
        "j.cleanup.delete", "j.cleanup.deleter", "j.cleanup.hf_delete", "j.daemon.sweeper",
        "j.cleanup.sweep", "j.daemon.metrics", "j.daemon.metrics_app", "j.ledger.pins",
        "j.cleanup.pin", "j.guard", "j.guarding",
    ]  # fmt: skip
    assert near_names(names) == {
        ("j.cleanup.delete", "j.cleanup.deleter"),
        ("j.guard", "j.guarding"),
    }


def test_no_two_modules_of_a_package_differ_only_by_an_ending() -> None:
    assert near_names(modules()) - NEAR_NAMES_KEPT == set()


def test_the_only_server_is_the_daemons() -> None:
    """``janitor.daemon.server`` serves the API; what says where batchalign3's ffmpeg runs is a
    route (``janitor.commands.ffmpeg_route``), not a server."""
    assert [m for m in modules() if m.rpartition(".")[2] == "server"] == ["janitor.daemon.server"]


#: Where "job" is in a module's name: the pipeline's job (a recording's ``.tmpXXXXXX`` folder,
#: its writers and sources), and ``janitor.jobs``: the old addresses of ``janitor.commands``.
JOB_MODULES = {
    "janitor.admission.jobs": "job folders: recorded, ended, orphaned",
    "janitor.ledger.jobs": "the jobs tables",
    "janitor.jobs": "old addresses",
    "janitor.jobs.estimate": "old address",
    "janitor.jobs.guard": "old address",
    "janitor.jobs.probe_guard": "old address",
}


def test_a_job_is_the_pipelines_job() -> None:
    """The commands that stand in for ffmpeg and ffprobe and run a writer are
    ``janitor.commands``; ``janitor.jobs`` keeps only their old addresses, each importing
    nothing but the module it stands for."""
    named = {m for m in modules() if any(re.fullmatch(r"jobs?", p) for p in m.split("."))}
    assert named == set(JOB_MODULES)
    for name in ("estimate", "guard", "probe_guard"):
        source = (PKG / "jobs" / f"{name}.py").read_text()
        imports = re.findall(r"^(?:from|import) (\S+)", source, re.MULTILINE)
        assert set(imports) == {"__future__", f"janitor.commands.{name}"}, (name, imports)


#: What sends a reader outside the repository: the project's brief and notes beside it.
OUTSIDE = re.compile(r"BRIEF|\.\./shared|/work/")


def test_no_docstring_or_comment_points_outside_the_repository() -> None:
    found = [
        f"{path.relative_to(PKG.parent)}:{n}"
        for path in sorted(PKG.rglob("*"))
        if path.suffix in (".py", ".c", ".h")
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if OUTSIDE.search(line)
    ]
    assert found == []
