"""Building a C helper with the machine's compiler (janitor.host.cbuild), for real.

Every test that compiles uses the compiler this machine has (``.ci/run`` installs gcc where it
is missing) and is skipped, saying so, where there is none.
"""

from __future__ import annotations

import multiprocessing
import os
import pickle
import stat
import subprocess
from pathlib import Path

import pytest

from janitor.host import cbuild
from janitor.host.cbuild import BuildFailed, Compiler, NoCompiler

CC = cbuild.compiler()
needs_cc = pytest.mark.skipif(CC is None, reason=f"{cbuild.why_not()}")

HELLO = b"""#include <stdio.h>
int main(int argc, char **argv) {
    (void)argv;
    printf("hello %d\\n", argc);
    return 0;
}
"""


def _src(tmp_path: Path, text: bytes = HELLO, name: str = "hello.c") -> Path:
    path = tmp_path / name
    path.write_bytes(text)
    return path


@needs_cc
def test_it_builds_runs_and_reuses_a_build(tmp_path: Path) -> None:
    src = _src(tmp_path)
    into = tmp_path / "bin"
    exe = cbuild.build(src, into, "hello")
    assert exe.parent == into and exe.name.startswith("hello-") and len(exe.name) == 6 + 16
    assert subprocess.run([exe, "a"], capture_output=True, text=True).stdout == "hello 2\n"
    mode = exe.stat().st_mode
    assert stat.S_ISREG(mode) and mode & 0o777 == 0o755
    assert stat.S_IMODE(into.stat().st_mode) == 0o700
    before = exe.stat()
    again = cbuild.build(src, into, "hello")
    assert again == exe and again.stat().st_ino == before.st_ino  # reused, not rebuilt
    assert cbuild.built_path(src, into, "hello") == exe
    assert sorted(p.name for p in into.iterdir()) == [exe.name]  # no temporary left behind


@needs_cc
def test_a_change_of_source_flags_or_compiler_builds_anew(tmp_path: Path) -> None:
    assert CC is not None
    src = _src(tmp_path)
    into = tmp_path / "bin"
    first = cbuild.build(src, into, "hello")
    src.write_bytes(HELLO.replace(b"hello", b"howdy"))
    second = cbuild.build(src, into, "hello")
    assert second != first
    assert subprocess.run([second], capture_output=True, text=True).stdout == "howdy 1\n"
    third = cbuild.build(src, into, "hello", flags=["-DX=1"])
    assert third not in (first, second)
    other = Compiler(CC.path, CC.version + " (upgraded)", CC.command)
    fourth = cbuild.build(src, into, "hello", cc=other)
    assert fourth not in (first, second, third)


@needs_cc
def test_a_warning_fails_the_build_with_one_line(tmp_path: Path) -> None:
    src = _src(tmp_path, b"int main(void) { int unused; return 0; }\n", "warn.c")
    with pytest.raises(BuildFailed) as caught:
        cbuild.build(src, tmp_path / "bin", "warn")
    reason = caught.value.reason
    assert "\n" not in reason and "unused" in reason and "warn.c" in reason, reason
    assert str(tmp_path / "bin") not in reason  # the source's name, not our temporary copy
    assert [p for p in (tmp_path / "bin").iterdir()] == []  # nothing half-made left
    # picklable, as a worker process hands it back
    again = pickle.loads(pickle.dumps(caught.value))
    assert isinstance(again, BuildFailed) and again.reason == reason


@needs_cc
def test_an_error_line_is_the_compilers_first_error(tmp_path: Path) -> None:
    src = _src(tmp_path, b"int main(void) { return nope; }\n", "broken.c")
    with pytest.raises(BuildFailed, match="nope"):
        cbuild.build(src, tmp_path / "bin", "broken")


def test_no_compiler_and_unreadable_sources_fail_in_one_line(tmp_path: Path) -> None:
    empty = {"PATH": str(tmp_path)}
    found = cbuild.find_compiler(empty, platform_name="linux")
    assert isinstance(found, NoCompiler) and "apt-get install gcc" in found.reason
    found = cbuild.find_compiler({**empty, "CC": "no-such-cc"}, platform_name="linux")
    assert isinstance(found, NoCompiler) and "CC=no-such-cc" in found.reason
    # a cc that does not answer --version is not taken
    fake = tmp_path / "cc"
    fake.write_text("#!/bin/sh\nexit 1\n")
    fake.chmod(0o755)
    found = cbuild.find_compiler(empty, platform_name="linux")
    assert isinstance(found, NoCompiler) and str(fake) in found.reason
    if CC is not None:
        with pytest.raises(BuildFailed, match="cannot read"):
            cbuild.build(tmp_path / "missing.c", tmp_path / "bin", "x", cc=CC)
        with pytest.raises(BuildFailed, match="bad helper name"):
            cbuild.build(_src(tmp_path), tmp_path / "bin", "../x", cc=CC)


def test_on_macos_without_the_command_line_tools_there_is_none(tmp_path: Path) -> None:
    folder = tmp_path / "path"
    folder.mkdir()
    for name, code in (("xcode-select", 2), ("cc", 0)):
        tool = folder / name
        tool.write_text(f"#!/bin/sh\necho 'Apple clang version 15'\nexit {code}\n")
        tool.chmod(0o755)
    found = cbuild.find_compiler({"PATH": str(folder)}, platform_name="darwin")
    assert isinstance(found, NoCompiler) and "xcode-select --install" in found.reason
    (folder / "xcode-select").write_text("#!/bin/sh\necho /Library/Developer\n")
    found = cbuild.find_compiler({"PATH": str(folder)}, platform_name="darwin")
    assert isinstance(found, Compiler) and found.version == "Apple clang version 15"
    assert found.path == str(folder / "cc")


@needs_cc
def test_cc_with_words_is_honoured(tmp_path: Path) -> None:
    assert CC is not None
    found = cbuild.find_compiler({"PATH": os.environ["PATH"], "CC": f"{CC.path} -DFROM_CC=1"})
    assert isinstance(found, Compiler) and found.argv == (CC.path, "-DFROM_CC=1")
    src = _src(tmp_path, b'#include <stdio.h>\nint main(void){printf("%d\\n", FROM_CC);}\n')
    exe = cbuild.build(src, tmp_path / "bin", "cc", cc=found)
    assert subprocess.run([exe], capture_output=True, text=True).stdout == "1\n"


def _build_in_child(args: tuple[str, str]) -> str:
    src, into = args
    exe = cbuild.build(Path(src), Path(into), "hello")
    return subprocess.run([exe], capture_output=True, text=True, check=True).stdout + str(exe)


@needs_cc
def test_processes_building_at_once_all_end_with_a_working_binary(tmp_path: Path) -> None:
    src = _src(tmp_path)
    into = tmp_path / "bin"
    with multiprocessing.get_context("spawn").Pool(4) as pool:
        outs = pool.map(_build_in_child, [(str(src), str(into))] * 4)
    assert len({o for o in outs}) == 1 and outs[0].startswith("hello 1\n"), outs
    assert [p.name for p in into.iterdir()] == [Path(outs[0].splitlines()[1]).name]


@needs_cc
def test_a_file_at_the_name_that_is_not_a_build_of_ours_is_replaced(tmp_path: Path) -> None:
    src = _src(tmp_path)
    into = tmp_path / "bin"
    exe = cbuild.built_path(src, into, "hello")
    assert exe is not None
    into.mkdir()
    (tmp_path / "elsewhere").write_text("x")
    exe.symlink_to(tmp_path / "elsewhere")  # a link there is never run
    built = cbuild.build(src, into, "hello")
    assert built == exe and not built.is_symlink()
    assert (tmp_path / "elsewhere").read_text() == "x"
    assert subprocess.run([built], capture_output=True, text=True).stdout == "hello 1\n"


# -- a program is its main file and every file it includes --------------------------------------

GREET_MAIN = b"""#include <stdio.h>
#include "lib/greet.c"
int main(void) { greet(); return 0; }
"""
GREET_H = b"""#ifndef GREET_H
#define GREET_H
#define WORD "hello"
void greet(void);
#endif
"""
GREET_C = b"""#include <stdio.h>
#include "greet.h"
void greet(void) { printf("%s\\n", WORD); }
"""


def _program(tmp_path: Path) -> Path:
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "greet.h").write_bytes(GREET_H)
    (tmp_path / "lib" / "greet.c").write_bytes(GREET_C)
    return _src(tmp_path, GREET_MAIN, "main.c")


def test_a_program_is_its_file_and_what_it_includes_as_the_compiler_finds_it(
    tmp_path: Path,
) -> None:
    src = _program(tmp_path)
    files = cbuild.program_files(src)
    # greet.c's "greet.h" is found beside greet.c; <stdio.h> is the system's, not ours.
    assert [f.name for f in files] == ["main.c", "lib/greet.c", "lib/greet.h"]
    assert files[2].data == GREET_H
    # One not found beside its includer is left to the compiler (a system header, or its error).
    src.write_bytes(b'#include "stdio.h"\n' + GREET_MAIN)
    assert [f.name for f in cbuild.program_files(src)] == ["main.c", "lib/greet.c", "lib/greet.h"]


@needs_cc
def test_a_change_to_an_included_header_builds_anew(tmp_path: Path) -> None:
    src = _program(tmp_path)
    into = tmp_path / "bin"
    first = cbuild.build(src, into, "greet")
    assert subprocess.run([first], capture_output=True, text=True).stdout == "hello\n"
    assert cbuild.built_path(src, into, "greet") == first
    (tmp_path / "lib" / "greet.h").write_bytes(GREET_H.replace(b'"hello"', b'"howdy"'))
    assert cbuild.built_path(src, into, "greet") != first
    second = cbuild.build(src, into, "greet")
    assert second != first
    assert subprocess.run([second], capture_output=True, text=True).stdout == "howdy\n"
    assert sorted(p.name for p in into.iterdir()) == sorted([first.name, second.name])


@needs_cc
def test_an_error_in_an_included_file_is_named_as_in_the_package(tmp_path: Path) -> None:
    src = _program(tmp_path)
    (tmp_path / "lib" / "greet.c").write_bytes(GREET_C + b"int broken(void) { return nope; }\n")
    with pytest.raises(BuildFailed) as caught:
        cbuild.build(src, tmp_path / "bin", "greet")
    reason = caught.value.reason
    assert reason.startswith("greet: lib/greet.c:4:") and "nope" in reason, reason
    assert [p for p in (tmp_path / "bin").iterdir()] == []  # the copy is gone too


def test_an_include_outside_the_folder_fails_in_one_line(tmp_path: Path) -> None:
    folder = tmp_path / "native"
    folder.mkdir()
    (tmp_path / "elsewhere.h").write_text("#define X 1\n")
    src = _src(folder, b'#include "../elsewhere.h"\nint main(void) { return X; }\n', "x.c")
    with pytest.raises(BuildFailed) as caught:
        cbuild.program_files(src)
    assert "x.c includes ../elsewhere.h, outside" in caught.value.reason
    assert "\n" not in caught.value.reason
    if CC is not None:
        assert cbuild.built_path(src, tmp_path / "bin", "x", cc=CC) is None
        with pytest.raises(BuildFailed, match="outside"):
            cbuild.build(src, tmp_path / "bin", "x", cc=CC)


def test_the_shipped_helpers_keys_cover_the_library_they_include(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """guard.c and sizewalk.c include jlib's files: an edit to one of its headers is a new
    build of both (cbuild's key), and a new walker (nativewalk's own key, asked at every
    ``janitor space`` without a compiler)."""
    import shutil

    from janitor.host import nativewalk

    native = tmp_path / "native"
    shutil.copytree(cbuild.NATIVE_DIR, native)
    guard_files = {f.name for f in cbuild.program_files(native / "guard.c")}
    walk_files = {f.name for f in cbuild.program_files(native / "sizewalk.c")}
    assert {"jlib/buf.h", "jlib/buf.c", "jlib/json.c", "jlib/http.c"} <= guard_files
    assert {"jlib/buf.h", "jlib/buf.c"} <= walk_files
    # The package ships every file they include (the wheel takes janitor/native whole).
    assert all((cbuild.NATIVE_DIR / name).is_file() for name in guard_files | walk_files)
    cc = CC or Compiler("/usr/bin/cc", "cc 1.0")  # nothing is compiled here
    monkeypatch.setattr(nativewalk, "SOURCE", native / "sizewalk.c")
    before = (
        cbuild.built_path(native / "guard.c", tmp_path, "guard", cc=cc),
        cbuild.built_path(native / "sizewalk.c", tmp_path, "sizewalk", cc=cc),
        nativewalk._key(),
    )
    header = native / "jlib" / "buf.h"
    header.write_bytes(header.read_bytes() + b"/* edited */\n")
    after = (
        cbuild.built_path(native / "guard.c", tmp_path, "guard", cc=cc),
        cbuild.built_path(native / "sizewalk.c", tmp_path, "sizewalk", cc=cc),
        nativewalk._key(),
    )
    assert None not in before and None not in after
    assert [b != a for b, a in zip(before, after, strict=True)] == [True, True, True]
