"""Building the small C helpers we ship as source (``janitor/native/*.c``) with the machine's
own C compiler, once, into a folder of ours.

A helper is built where it runs, not shipped as a binary: the wheel stays pure Python, and a
Mac with Homebrew (or Xcode's command line tools), like every Linux box with ``gcc``, has a
compiler. :func:`compiler` finds one (``$CC`` first, then ``cc``, ``clang``, ``gcc`` on
``PATH``; on macOS only when ``xcode-select -p`` says the command line tools are there, since
``/usr/bin/cc`` is otherwise a stub that opens an install dialog); :func:`why_not` says why
there is none. :func:`build` compiles one program with every warning an error into
``INTO/NAME-HASH``, the hash covering the program's files, the flags, the compiler and its
version: a change to any of them builds anew, an unchanged build is reused as it is. The binary
appears at once and whole (compiled beside it under a temporary name, then renamed), so two
processes building at once both end with a working binary and a reader never runs half a file.

A program is its main file and every file it includes with ``#include "..."``, found as the
compiler finds them (beside the file that includes them), transitively: :func:`program_files`.
The helpers share a small library, ``native/jlib`` (buffers, JSON, HTTP), which each one
includes as source (``#include "jlib/buf.c"``): one translation unit, so the build stays one
compiler command over one file, the compiler sees (and inlines) all of it as before the
library was split out, and the files hashed are exactly the files compiled, with no list of
them to keep in step. They are compiled from a copy of the bytes hashed, laid out as they are
in the package, so a source edited during a build never gives a binary its name does not
describe.

This module knows nothing of our settings: the caller says where to build. It is light to
import (the compiler's tools load when a build is asked for): :func:`usable`, the one check that
a build is ours and safe to run, stands on ``janitor space``'s path before its walk starts.
"""

from __future__ import annotations

import os
import stat
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "BASE_FLAGS",
    "NATIVE_DIR",
    "BuildFailed",
    "Compiler",
    "NoCompiler",
    "SourceFile",
    "build",
    "built_path",
    "compiler",
    "find_compiler",
    "program_files",
    "usable",
    "why_not",
]

#: Where the C sources live in the installed package (shipped in the wheel with it).
NATIVE_DIR = Path(__file__).resolve().parent.parent / "native"

#: Every build: C11, optimised, every warning an error (a warning on a new compiler fails the
#: build, and the caller falls back to what it did without the helper); POSIX.1-2008 with the
#: platform's own extensions (glibc's ``_DEFAULT_SOURCE``, macOS's ``_DARWIN_C_SOURCE``).
BASE_FLAGS: tuple[str, ...] = (
    "-std=c11",
    "-O2",
    "-Wall",
    "-Wextra",
    "-Werror",
    "-D_POSIX_C_SOURCE=200809L",
    "-D_DEFAULT_SOURCE",
    "-D_DARWIN_C_SOURCE",
)

#: How long asking a compiler its version, and one build, may take.
VERSION_TIMEOUT_S = 15.0
BUILD_TIMEOUT_S = 120.0
#: The candidates after ``$CC``, in order.
CANDIDATES = ("cc", "clang", "gcc")


@dataclass(frozen=True, slots=True)
class Compiler:
    """A C compiler that answered: its resolved path, the words to run it with (``$CC`` may
    carry some: ``ccache gcc``, ``gcc -m64``), and the first line of its ``--version``."""

    path: str
    version: str
    command: tuple[str, ...] = ()

    @property
    def argv(self) -> tuple[str, ...]:
        """What to run: ``command`` when ``$CC`` gave one, else the path."""
        return self.command or (self.path,)


@dataclass(frozen=True, slots=True)
class NoCompiler:
    """Why no C compiler can be used here, in one line with what to do."""

    reason: str


class BuildFailed(RuntimeError):
    """A helper could not be built; ``reason`` is one line (the compiler's first error)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True, slots=True)
class SourceFile:
    """One file of a program: where it lies relative to the main file's folder (``guard.c``,
    ``jlib/buf.h``), as the compiler is shown it, and its bytes as they were read."""

    name: str
    data: bytes


def _quoted_includes(data: bytes) -> list[str]:
    """The names of this file's ``#include "..."`` lines, in order (``#include <...>`` are the
    system's). Every such line counts, even under an ``#if`` that leaves it out: a file hashed
    in vain costs nothing, a file missed would leave a stale build."""
    names = []
    for line in data.decode("latin-1").splitlines():
        text = line.lstrip()
        if not text.startswith("#"):
            continue
        text = text[1:].lstrip()
        if not text.startswith("include"):
            continue
        text = text[len("include") :].lstrip()
        end = text.find('"', 1)
        if text.startswith('"') and end > 1:
            names.append(text[1:end])
    return names


def program_files(source: Path) -> tuple[SourceFile, ...]:
    """``source`` and every file it includes with ``#include "..."``, theirs too, each once, in
    the order first met. An include is looked for beside the file that names it, as the
    compiler does first; one not there is left to the compiler (a system header, or an error
    it reports). BuildFailed (one line) when a file cannot be read, or one names a file
    outside the source's folder (it could not be compiled from a copy)."""
    import posixpath

    root = source.parent
    order = [source.name]
    found: dict[str, bytes] = {}
    while len(found) < len(order):
        name = order[len(found)]
        try:
            data = (root / name).read_bytes()
        except OSError as exc:
            raise BuildFailed(f"cannot read {root / name}: {exc.strerror or exc}") from None
        found[name] = data
        for included in _quoted_includes(data):
            path = posixpath.normpath(posixpath.join(posixpath.dirname(name), included))
            if path.startswith(("/", "../")) or path == "..":
                raise BuildFailed(
                    f"{name} includes {included}, outside {root}: keep a helper's files together"
                )
            if path not in order and (root / path).is_file():
                order.append(path)
    return tuple(SourceFile(name, data) for name, data in found.items())


def _version(argv: Sequence[str], env: Mapping[str, str]) -> str | None:
    """The first line ``argv --version`` prints, or None when it does not answer as a compiler."""
    import subprocess

    try:
        done = subprocess.run(
            [*argv, "--version"],
            capture_output=True,
            text=True,
            errors="replace",
            timeout=VERSION_TIMEOUT_S,
            env=dict(env),
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    if done.returncode != 0:
        return None
    lines = [ln.strip() for ln in done.stdout.splitlines() if ln.strip()]
    return lines[0][:200] if lines else None


def _xcode_tools(env: Mapping[str, str]) -> bool:
    """macOS: whether the command line tools are installed (``xcode-select -p`` answers)."""
    import subprocess

    try:
        done = subprocess.run(
            ["xcode-select", "-p"],
            capture_output=True,
            timeout=VERSION_TIMEOUT_S,
            env=dict(env),
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.SubprocessError):
        return False
    return done.returncode == 0


def find_compiler(
    env: Mapping[str, str] | None = None, platform_name: str | None = None
) -> Compiler | NoCompiler:
    """The C compiler to build with, or why there is none (see the module docstring)."""
    import shlex
    import shutil

    env = os.environ if env is None else env
    system = sys.platform if platform_name is None else platform_name
    if system == "darwin" and not _xcode_tools(env):
        return NoCompiler(
            "no C compiler: Xcode's command line tools are not installed (xcode-select -p "
            "failed); run `xcode-select --install`"
        )
    search = env.get("PATH", os.defpath)
    tried: list[str] = []
    cc = env.get("CC", "").strip()
    if cc:
        try:
            words = shlex.split(cc)
        except ValueError:
            words = []
        found = shutil.which(words[0], path=search) if words else None
        if found is None:
            return NoCompiler(f"no C compiler: CC={cc} is not a command on PATH; fix or unset CC")
        version = _version([found, *words[1:]], env)
        if version is None:
            return NoCompiler(f"no C compiler: CC={cc} does not answer --version; fix or unset CC")
        command = (found, *words[1:]) if len(words) > 1 else ()
        return Compiler(os.path.realpath(found), version, command)
    for name in CANDIDATES:
        found = shutil.which(name, path=search)
        if found is None:
            continue
        tried.append(found)
        version = _version([found], env)
        if version is not None:
            return Compiler(os.path.realpath(found), version)
    if tried:
        return NoCompiler(f"no C compiler: {', '.join(tried)} did not answer --version")
    fix = "xcode-select --install" if system == "darwin" else "install gcc (apt-get install gcc)"
    return NoCompiler(f"no C compiler on PATH (cc, clang, gcc; or set CC): {fix}")


_found: dict[tuple[str, str, str], Compiler | NoCompiler] = {}


def _lookup() -> Compiler | NoCompiler:
    """:func:`find_compiler` for this process's environment, asked once per PATH and CC."""
    key = (os.environ.get("CC", ""), os.environ.get("PATH", ""), sys.platform)
    if key not in _found:
        _found[key] = find_compiler()
    return _found[key]


def compiler() -> Compiler | None:
    """This process's C compiler, or None (then :func:`why_not` says why)."""
    found = _lookup()
    return found if isinstance(found, Compiler) else None


def why_not() -> str | None:
    """Why :func:`compiler` found none (one line), or None when it found one."""
    found = _lookup()
    return found.reason if isinstance(found, NoCompiler) else None


def _digest(files: Sequence[SourceFile], flags: Sequence[str], cc: Compiler) -> str:
    import hashlib
    import platform

    h = hashlib.sha256()
    for part in (
        *(piece for f in files for piece in (f.name.encode(), f.data)),
        "\0".join(flags).encode(),
        "\0".join(cc.argv).encode(),
        cc.version.encode(),
        f"{sys.platform} {platform.machine()}".encode(),
    ):
        h.update(len(part).to_bytes(8, "little"))
        h.update(part)
    return h.hexdigest()[:16]


def built_path(
    source: Path, into: Path, name: str, *, flags: Sequence[str] = (), cc: Compiler | None = None
) -> Path | None:
    """Where :func:`build` puts (or finds) this build: ``INTO/NAME-HASH``; None without a
    compiler or readable sources. Nothing is compiled."""
    cc = cc or compiler()
    if cc is None:
        return None
    try:
        files = program_files(source)
    except BuildFailed:
        return None
    return into / f"{name}-{_digest(files, (*BASE_FLAGS, *flags), cc)}"


def usable(path: Path) -> bool:
    """A finished build of ours, safe to run: a regular file (not a link), executable, ours,
    not writable by others."""
    try:
        st = path.lstat()
    except OSError:
        return False
    return (
        stat.S_ISREG(st.st_mode)
        and st.st_size > 0
        and bool(st.st_mode & stat.S_IXUSR)
        and not st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
        and st.st_uid == os.geteuid()
    )


def _first_error(stderr: str, returncode: int) -> str:
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip()]
    for ln in lines:
        if "error" in ln.lower():
            return ln[:300]
    return lines[0][:300] if lines else f"the compiler exited {returncode}"


def build(
    source: Path,
    into: Path,
    name: str,
    *,
    flags: Sequence[str] = (),
    cc: Compiler | None = None,
    timeout: float = BUILD_TIMEOUT_S,
) -> Path:
    """Compile the program ``source`` (with the files it includes: :func:`program_files`) into
    ``INTO/NAME-HASH`` (see the module docstring) and return that path; an existing build of
    the same hash is returned as it is. ``flags`` come after :data:`BASE_FLAGS` (extra
    libraries: ``-lm``).

    BuildFailed (one line) when there is no compiler, a source cannot be read, the folder
    cannot be written or the compiler fails (its first error line).
    """
    import shutil
    import subprocess

    cc = cc or compiler()
    if cc is None:
        raise BuildFailed(why_not() or "no C compiler")
    if os.sep in name or not name or name.startswith("."):
        raise BuildFailed(f"bad helper name {name!r}")
    files = program_files(source)
    all_flags = (*BASE_FLAGS, *flags)
    target = into / f"{name}-{_digest(files, all_flags, cc)}"
    if usable(target):
        return target
    try:
        into.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as exc:
        raise BuildFailed(f"cannot create {into}: {exc.strerror or exc}") from None
    compile_flags = [f for f in all_flags if not f.startswith("-l")]
    link_flags = [f for f in all_flags if f.startswith("-l")]  # after the source, for every ld
    tmp = into / f".{target.name}.{os.getpid()}.{os.urandom(4).hex()}.tmp"
    # Compiled from a copy of the bytes hashed, laid out as in the package, so the binary is
    # what the name says even if a source changes while we build.
    copy = into / f".{target.name}.{os.getpid()}.{os.urandom(4).hex()}.src"
    try:
        try:
            for f in files:
                (copy / f.name).parent.mkdir(mode=0o700, parents=True, exist_ok=True)
                (copy / f.name).write_bytes(f.data)
            main = copy / files[0].name
            done = subprocess.run(
                [*cc.argv, *compile_flags, "-o", str(tmp), str(main), *link_flags],
                capture_output=True,
                text=True,
                errors="replace",
                timeout=timeout,
                stdin=subprocess.DEVNULL,
            )
        except subprocess.TimeoutExpired:
            raise BuildFailed(f"{cc.path} took more than {timeout:g} s to build {name}") from None
        except OSError as exc:
            raise BuildFailed(f"cannot build {name}: {exc.strerror or exc}") from None
        if done.returncode != 0:
            said = _first_error(done.stderr.replace(f"{copy}{os.sep}", ""), done.returncode)
            raise BuildFailed(f"{name}: {said}")
        try:
            os.chmod(tmp, 0o755)
            os.replace(tmp, target)
        except OSError as exc:
            raise BuildFailed(f"cannot install {target}: {exc.strerror or exc}") from None
    finally:
        try:
            tmp.unlink()
        except OSError:
            pass
        shutil.rmtree(copy, ignore_errors=True)
    return target
