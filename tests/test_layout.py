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
    ("janitor.humanize", "janitor.errors", "janitor.error_statuses", "janitor.sizes"),
    ("janitor.host",),
    ("janitor.config",),
    ("janitor.ledger",),
    ("janitor.admission",),
    ("janitor.cleanup",),
    ("janitor.handles", "janitor.reserving", "janitor.core", "janitor.status", "janitor.usage"),
    ("janitor.guarding",),
    ("janitor.commands", "janitor.guard", "janitor.jobs"),
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
    assert GRAPH["janitor.commands.daemon_client"] == []
    assert GRAPH["janitor.guarding.held"] == []
    assert GRAPH["janitor.guarding.protocol"] == []
    assert GRAPH["janitor.guarding.mark"] == []
    assert GRAPH["janitor.commands.watch"] == ["janitor.commands.supervise"]
    daemon = {t for m, ts in GRAPH.items() if m.startswith("janitor.daemon") for t in ts}
    assert daemon & {"janitor.commands.guard", "janitor.commands.daemon_client"} == set()
    assert {"janitor.guarding.verdict", "janitor.guarding.close"} <= set(
        GRAPH["janitor.daemon.routes.guard"]
    )


def test_commands_holds_only_the_commands_and_the_guarding_layer_decides() -> None:
    """``janitor.commands`` keeps the commands that stand in for ffmpeg and ffprobe and run them: no
    module of it prepares, grants or waits for a call's writes (the admission of a guarded call
    is ``janitor.guarding``'s), and nothing below the front ends imports them back."""
    admission = {"janitor.admission.reserve", "janitor.admission.queue", "janitor.ledger.tx"}
    commands = {m: set(ts) for m, ts in GRAPH.items() if m.startswith("janitor.commands.")}
    assert {m: ts & admission for m, ts in commands.items() if ts & admission} == {}
    for name in ("call", "writes", "held", "probe_call", "mark", "ffmpeg"):
        assert f"janitor.commands.{name}" not in MODULES
    guarding = {t for m, ts in GRAPH.items() if m.startswith("janitor.guarding") for t in ts}
    assert {t for t in guarding if t.startswith(("janitor.commands", "janitor.jobs"))} == set()


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


#: The standard modules that call the kernel by hand (``fcntl``: locks, leases; ``ctypes``: libc's
#: functions); only ``janitor.host`` may import them, so every syscall wrapper is found there.
SYSCALL_MODULES = frozenset({"fcntl", "ctypes"})


def syscall_imports(source: str) -> Iterator[tuple[str, int]]:
    """Each import of a module of :data:`SYSCALL_MODULES` (or of one inside it) in ``source``,
    anywhere (in a function too), with its line."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            names = [node.module]
        else:
            continue
        for name in names:
            if name.partition(".")[0] in SYSCALL_MODULES:
                yield name, node.lineno


def test_the_syscall_check_sees_every_form_of_import() -> None:
    source = (
        "import os, fcntl\n"
        "from ctypes import CDLL\n"
        "def f():\n"
        "    import ctypes.util\n"
        "from . import fcntl_helpers\n"  # a module of ours, not the standard one
        "import fcntlish\n"
    )
    assert list(syscall_imports(source)) == [("fcntl", 1), ("ctypes", 2), ("ctypes.util", 4)]


def test_syscalls_live_in_the_host_package_only() -> None:
    """No exception is listed: the last ones (``cleanup/deleter.py``'s tree lock and
    ``commands/supervise.py``'s ``prctl``) moved into ``janitor.host`` with issue 34, item 6."""
    outside = {
        name: lines
        for name, path in MODULES.items()
        if name != "janitor.host"
        and not name.startswith("janitor.host.")
        and (lines := list(syscall_imports(path.read_text())))
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


#: Functions known to be longer, each with its reason. ``_walk`` is the scan's loop, inlined for
#: speed (its docstring says why): every other function is cut into named steps.
LONG_FUNCTIONS_KNOWN: set[tuple[str, str]] = {("janitor.cleanup.scan", "_walk")}


def long_functions(source: str, limit: int = 120) -> dict[str, int]:
    """Each function of ``source`` longer than ``limit`` lines, by its dotted name in the module
    (``Class.method``, ``outer.inner``: a nested function is one of its own too, and counts in
    its outer one), with its length from its first decorator to its last line."""
    found: dict[str, int] = {}

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                name = f"{prefix}{child.name}"
                if not isinstance(child, ast.ClassDef):
                    first = min([child.lineno, *(d.lineno for d in child.decorator_list)])
                    length = (child.end_lineno or child.lineno) - first + 1
                    if length > limit:
                        found[name] = length
                visit(child, f"{name}.")
            else:
                visit(child, prefix)

    visit(ast.parse(source), "")
    return found


def test_the_function_length_check_counts_lines() -> None:
    body = "    x = 1\n" * 119
    assert long_functions(f"def short():\n{body}") == {}  # 120 lines in all
    assert long_functions(f"@decorated\ndef long():\n{body}") == {"long": 121}
    nested = (
        "class C:\n    async def outer(self):\n        def inner():\n" + "            x = 1\n" * 120
    )
    assert long_functions(nested) == {"C.outer": 122, "C.outer.inner": 121}
    inside = "if True:\n    def f():\n" + "        x = 1\n" * 120
    assert long_functions(inside) == {"f": 121}


@pytest.mark.parametrize("name", sorted(MODULES))
def test_no_function_is_longer_than_120_lines(name: str) -> None:
    long = long_functions(MODULES[name].read_text())
    assert {f: n for f, n in long.items() if (name, f) not in LONG_FUNCTIONS_KNOWN} == {}


def test_the_supervisor_is_short() -> None:
    assert len(MODULES["janitor.daemon.supervisor"].read_text().splitlines()) <= 200


def test_every_type_the_api_returns_is_exported() -> None:
    for name in ("Janitor", "Reservation", "Pin", "PinInfo", "SweepResult", "Status", "Volume"):
        assert name in janitor.__all__
        assert getattr(janitor, name).__name__ == name
    for name in ("UnknownPin", "UnknownReservation", "ReservationRefused", "SpaceRisk"):
        assert issubclass(getattr(janitor, name), janitor.JanitorError)


#: The names a tree's ``units`` may give (``TreePolicy.units``). Each is one object of
#: ``janitor.cleanup.kinds``, chosen once by ``KINDS``: no module asks which one a tree is.
KIND_NAMES = frozenset({"file", "dir", "hf_revision"})


def kind_switches(source: str) -> Iterator[int]:
    """The lines of ``source`` that switch on a unit kind's name: a comparison of something
    named ``units`` or ``kind`` with one (``tree.units == "dir"``, ``unit.kind in ("dir",
    "hf_revision")``, ``units != "file"``), a ``match`` on it with one as a case, or a table
    of them looked up in place (``{"dir": ...}[tree.units]``)."""

    def names_a_kind(node: ast.expr) -> bool:
        if isinstance(node, ast.Attribute):
            return node.attr in ("units", "kind")
        return isinstance(node, ast.Name) and node.id in ("units", "kind")

    def a_kind_name(node: ast.expr | None) -> bool:
        if isinstance(node, ast.Constant):
            return isinstance(node.value, str) and node.value in KIND_NAMES
        if isinstance(node, ast.Tuple | ast.List | ast.Set):
            return any(a_kind_name(e) for e in node.elts)
        return False

    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            if any(map(names_a_kind, sides)) and any(map(a_kind_name, sides)):
                yield node.lineno
        elif isinstance(node, ast.Match) and names_a_kind(node.subject):
            for case in node.cases:
                values = [p.value for p in ast.walk(case.pattern) if isinstance(p, ast.MatchValue)]
                if any(map(a_kind_name, values)):
                    yield case.pattern.lineno
        elif (
            isinstance(node, ast.Subscript)
            and isinstance(node.value, ast.Dict)
            and any(map(a_kind_name, node.value.keys))
        ):
            yield node.lineno


def test_the_kind_switch_check_sees_every_form() -> None:
    source = (
        'if tree.units == "dir": pass\n'
        'x = unit.kind in ("dir", "hf_revision")\n'
        'y = "file" != units\n'
        "match self.units:\n"
        '    case "hf_revision": pass\n'
        'z = {"file": 1, "dir": 2}[tree.units]\n'
        'ok = head == "file" or front.kind == "python" or KINDS[tree.units]\n'
    )
    assert sorted(kind_switches(source)) == [1, 2, 3, 5, 6]


def test_no_module_switches_on_a_unit_kinds_name() -> None:
    """A kind is a value (``janitor.cleanup.kinds``: its key, grouping, glance, rechecks and
    delete; ``janitor.config.unit_rules``: what the policy layer asks of it), chosen once from
    ``TreePolicy.units`` by one table: no module, the kinds' own included, compares the name."""
    found = {
        name: lines
        for name, path in MODULES.items()
        if (lines := list(kind_switches(path.read_text())))
    }
    assert found == {}


# -- the tests mirror the package -----------------------------------------------------------------

TESTS = Path(__file__).resolve().parent

#: Test folders that are no layer of janitor/, each with what it holds.
EXTRA_TEST_FOLDERS = {"scenarios": "end-to-end runs that cross layers"}

#: The test files at tests/ top level, each with the top-level module of janitor/ it tests
#: (None: the package as a whole).
TOP_LEVEL_TESTS = {
    "test_layout.py": None,
    "test_names.py": None,
    "test_docs_reference.py": None,
    "test_link_janitor.py": None,  # scripts/link-janitor.sh, the quick start's PATH link
    "test_compare.py": None,  # benchmarks/compare.py, a change's numbers against its base
    "test_error_statuses.py": "error_statuses",
    "test_doctor.py": "doctor",
    "test_service.py": "service",
    "test_sizes.py": "sizes",
    "test_space.py": "usage",
}


def layer_folders(package: Path) -> set[str]:
    """The layers of the package, by folder name: each Python package in it, and the folder of
    C sources (``native``)."""
    return {p.parent.name for p in package.glob("*/__init__.py")} | {
        p.parent.name for p in package.glob("*/*.c")
    }


def misplaced_tests(tests: Path, layers: set[str]) -> list[str]:
    """Why each test file or folder under ``tests`` is not where its layer says, one line each."""
    found = []
    for path in sorted(tests.rglob("test_*.py")):
        rel = path.relative_to(tests)
        if len(rel.parts) == 1 and rel.name not in TOP_LEVEL_TESTS:
            found.append(f"{rel}: at top level, but not a test of a top-level module")
        elif len(rel.parts) > 2:
            found.append(f"{rel}: deeper than tests/<layer>/")
    for folder in sorted(p for p in tests.iterdir() if p.is_dir()):
        if folder.name.startswith(("_", ".")):
            continue
        if folder.name not in layers and folder.name not in EXTRA_TEST_FOLDERS:
            found.append(f"{folder.name}/: neither a layer of janitor/ nor a named extra folder")
        if not (folder / "__init__.py").is_file():
            found.append(f"{folder.name}/: no __init__.py")
    return found


def test_the_test_layout_check_sees_a_stray_file(tmp_path: Path) -> None:
    tests = tmp_path / "tests"
    for rel in ("test_sizes.py", "host/__init__.py", "host/test_owner.py", "test_owner.py",
                "widgets/test_x.py", "host/deep/test_y.py"):  # fmt: skip
        (tests / rel).parent.mkdir(parents=True, exist_ok=True)
        (tests / rel).touch()
    assert misplaced_tests(tests, {"host", "cli"}) == [
        "host/deep/test_y.py: deeper than tests/<layer>/",
        "test_owner.py: at top level, but not a test of a top-level module",
        "widgets/: neither a layer of janitor/ nor a named extra folder",
        "widgets/: no __init__.py",
    ]


def test_every_test_file_sits_in_the_folder_of_its_layer() -> None:
    """tests/ mirrors janitor/ as uvicorn's tests mirror its package: ``tests/<layer>/`` for
    each package (and ``native``), named extra folders for what crosses layers, and at top
    level only the tests of the top-level modules. A new test file goes in its layer's folder."""
    layers = layer_folders(PKG)
    assert {"host", "config", "ledger", "admission", "cleanup", "cli", "native"} <= layers
    assert all(m is None or (PKG / f"{m}.py").is_file() for m in TOP_LEVEL_TESTS.values())
    assert misplaced_tests(TESTS, layers) == []
