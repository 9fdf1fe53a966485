"""The package's shape, checked from its source: layers import downwards only, no import cycles
(counting imports inside functions and under ``TYPE_CHECKING``), SQL only in ``janitor.ledger``,
no class longer than 300 lines, and every type the API returns exported.

These read the code with ``ast``; nothing is imported except the package's public names.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

import janitor

PKG = Path(janitor.__file__).parent

#: Each layer may import its own modules and the layers before it, never one after it.
LAYERS = [
    ("janitor.humanize", "janitor.errors", "janitor.sizes"),
    ("janitor.host",),
    ("janitor.config",),
    ("janitor.ledger",),
    ("janitor.admission",),
    ("janitor.cleanup",),
    ("janitor.handles", "janitor.reserving", "janitor.core", "janitor.status", "janitor.usage"),
    ("janitor.guarding",),
    ("janitor.jobs", "janitor.guard"),
    ("janitor.doctor", "janitor.service"),
    ("janitor.daemon",),
    ("janitor.cli", "janitor.__main__"),
]


def module_name(path: Path) -> str:
    rel = path.relative_to(PKG.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {module_name(p): p for p in sorted(PKG.rglob("*.py"))}


def imported(name: str, path: Path) -> Iterator[tuple[str, int]]:
    """Every module of ours that ``name`` imports, anywhere in it, with the line."""
    tree = ast.parse(path.read_text(), str(path))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                mod = ".".join([*base, node.module] if node.module else base)
            else:
                mod = node.module or ""
            # `from janitor.x import y` imports janitor.x.y when y is a module.
            targets = [
                f"{mod}.{a.name}" if f"{mod}.{a.name}" in MODULES else mod for a in node.names
            ]
        else:
            continue
        for t in targets:
            while t and t not in MODULES:
                t = t.rpartition(".")[0]
            if t and t != "janitor" and t != name:
                yield t, node.lineno


GRAPH = {name: sorted({t for t, _ in imported(name, path)}) for name, path in MODULES.items()}


def layer_of(name: str) -> int:
    if name == "janitor":  # the facade: its names load lazily from the layer of Janitor
        return layer_of("janitor.core")
    for rank, members in enumerate(LAYERS):
        if any(name == m or name.startswith(m + ".") for m in members):
            return rank
    raise AssertionError(f"{name} belongs to no layer: add it to LAYERS")


def cycles(graph: dict[str, list[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in graph:
        if v not in index:
            visit(v)
    return out


def test_the_checker_sees_a_cycle_and_a_layer_break() -> None:
    assert cycles({"a": ["b"], "b": ["c"], "c": ["a"], "d": ["a"]}) == [["a", "b", "c"]]
    assert layer_of("janitor.ledger.pins") < layer_of("janitor.admission.reserve")
    # The graph really holds imports made inside functions (the CLI's are all lazy).
    assert "janitor.core" in {
        t for m, ts in GRAPH.items() if m.startswith("janitor.cli") for t in ts
    }


def test_no_import_cycles() -> None:
    assert cycles(GRAPH) == []


def test_layers_import_downwards_only() -> None:
    upward = [
        f"{name}:{line} imports {target}"
        for name, path in MODULES.items()
        for target, line in imported(name, path)
        if layer_of(target) > layer_of(name)
    ]
    assert upward == []


def test_storage_never_knows_janitor() -> None:
    """Storage, admission and cleanup never import ``Janitor``, its parts or the handles."""
    low = [m for m in GRAPH if layer_of(m) <= layer_of("janitor.cleanup")]
    janitor_ = ("janitor.core", "janitor.reserving", "janitor.handles")
    assert [(m, t) for m in low for t in GRAPH[m] if t in janitor_] == []


def test_the_guards_wire_stands_alone() -> None:
    """The guard's client, the protocol and values its front ends share, and the watch of a
    running writer import no other module of ours than the few the guard loads anyway (the
    guarded ffmpeg loads them on every call), and the daemon imports neither the guard nor its
    client: it decides and ends a call's writes through ``janitor.guarding``."""
    assert GRAPH["janitor.jobs.daemon_client"] == []
    assert GRAPH["janitor.guarding.held"] == []
    assert GRAPH["janitor.guarding.protocol"] == []
    assert GRAPH["janitor.guarding.mark"] == []
    assert GRAPH["janitor.jobs.watch"] == ["janitor.jobs.supervise"]
    daemon = {t for m, ts in GRAPH.items() if m.startswith("janitor.daemon") for t in ts}
    assert daemon & {"janitor.jobs.guard", "janitor.jobs.daemon_client"} == set()
    assert {"janitor.guarding.verdict", "janitor.guarding.close"} <= set(
        GRAPH["janitor.daemon.api"]
    )


def test_jobs_holds_only_the_commands_and_the_guarding_layer_decides() -> None:
    """``janitor.jobs`` keeps the commands that stand in for ffmpeg and ffprobe and run them: no
    module of it prepares, grants or waits for a call's writes (the admission of a guarded call
    is ``janitor.guarding``'s), and nothing below the front ends imports them back."""
    admission = {"janitor.admission.reserve", "janitor.admission.queue", "janitor.ledger.tx"}
    jobs = {m: set(ts) for m, ts in GRAPH.items() if m.startswith("janitor.jobs.")}
    assert {m: ts & admission for m, ts in jobs.items() if ts & admission} == {}
    for name in ("call", "writes", "held", "probe_call", "mark", "ffmpeg"):
        assert f"janitor.jobs.{name}" not in MODULES
    guarding = {t for m, ts in GRAPH.items() if m.startswith("janitor.guarding") for t in ts}
    assert {t for t in guarding if t.startswith("janitor.jobs")} == set()


def test_ctypes_is_loaded_only_in_the_host_layer() -> None:
    """Calls into libc (``prctl`` for PR_SET_PDEATHSIG) live in ``janitor.host``, as watchdog
    keeps its inotify calls apart."""
    outside = sorted(
        name
        for name, path in MODULES.items()
        if not name.startswith("janitor.host")
        and any(
            (isinstance(node, ast.Import) and any(a.name == "ctypes" for a in node.names))
            or (isinstance(node, ast.ImportFrom) and (node.module or "").startswith("ctypes"))
            for node in ast.walk(ast.parse(path.read_text()))
        )
    )
    assert outside == []


def sql_literals(path: Path) -> Iterator[int]:
    keywords = ("SELECT ", "INSERT ", "UPDATE ", "DELETE FROM", "CREATE TABLE", "PRAGMA ")
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            text = node.value.upper()
            if any(text.lstrip().startswith(k) for k in keywords):
                yield node.lineno


def sqlite_imports(path: Path) -> Iterator[int]:
    for node in ast.walk(ast.parse(path.read_text())):
        if (isinstance(node, ast.Import) and any(a.name == "sqlite3" for a in node.names)) or (
            isinstance(node, ast.ImportFrom) and node.module == "sqlite3"
        ):
            yield node.lineno


def test_sql_lives_in_the_ledger_package_only() -> None:
    outside = {
        name: lines
        for name, path in MODULES.items()
        if not name.startswith("janitor.ledger")
        and (lines := [*sql_literals(path), *sqlite_imports(path)])
    }
    assert outside == {}


#: Classes known to be longer, each with the issue that cuts it. Remove a line once it is fixed.
LONG_CLASSES_KNOWN: set[tuple[str, str]] = set()


def long_classes(source: str, limit: int = 300) -> dict[str, int]:
    """Each class of ``source`` longer than ``limit`` lines (nested ones too), with its length."""
    return {
        node.name: (node.end_lineno or node.lineno) - node.lineno + 1
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.ClassDef)
        and (node.end_lineno or node.lineno) - node.lineno + 1 > limit
    }


def test_the_class_length_check_counts_lines() -> None:
    body = "    x = 1\n" * 299
    assert long_classes(f"class Short:\n{body}") == {}  # 300 lines in all
    assert long_classes(f"class Long:\n{body}    y = 2\n") == {"Long": 301}
    nested = "class Outer:\n    class Inner:\n" + "        x = 1\n" * 300
    assert long_classes(nested) == {"Outer": 302, "Inner": 301}


@pytest.mark.parametrize("name", sorted(MODULES))
def test_no_class_is_longer_than_300_lines(name: str) -> None:
    long = long_classes(MODULES[name].read_text())
    assert {c: n for c, n in long.items() if (name, c) not in LONG_CLASSES_KNOWN} == {}


def test_the_supervisor_is_short() -> None:
    assert len(MODULES["janitor.daemon.supervisor"].read_text().splitlines()) <= 200


def test_every_type_the_api_returns_is_exported() -> None:
    for name in ("Janitor", "Reservation", "Pin", "PinInfo", "SweepResult", "Status", "Volume"):
        assert name in janitor.__all__
        assert getattr(janitor, name).__name__ == name
    for name in ("UnknownPin", "UnknownReservation", "ReservationRefused", "SpaceRisk"):
        assert issubclass(getattr(janitor, name), janitor.JanitorError)
