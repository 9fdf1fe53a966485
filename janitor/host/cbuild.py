"""Building the small C helpers we ship as source (``janitor/native/*.c``) with the machine's
own C compiler, once, into a folder of ours.

A helper is built where it runs, not shipped as a binary: the wheel stays pure Python, and a
Mac with Homebrew (or Xcode's command line tools), like every Linux box with ``gcc``, has a
compiler. :func:`compiler` finds one (``$CC`` first, then ``cc``, ``clang``, ``gcc`` on
``PATH``; on macOS only when ``xcode-select -p`` says the command line tools are there, since
``/usr/bin/cc`` is otherwise a stub that opens an install dialog); :func:`why_not` says why
there is none. :func:`build` compiles one source file with every warning an error into
``INTO/NAME-HASH``, the hash covering the source's bytes, the flags, the compiler and its
version: an upgrade of either builds anew, an unchanged one is reused as it is. The binary
appears at once and whole (compiled beside it under a temporary name, then renamed), so two
processes building at once both end with a working binary and a reader never runs half a file.

This module knows nothing of our settings: the caller says where to build.
"""

from __future__ import annotations

import hashlib
import os
import platform
import shlex
import shutil
import subprocess
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
    "build",
    "built_path",
    "compiler",
    "find_compiler",
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


def _version(argv: Sequence[str], env: Mapping[str, str]) -> str | None:
    """The first line ``argv --version`` prints, or None when it does not answer as a compiler."""
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


def _digest(source: bytes, flags: Sequence[str], cc: Compiler) -> str:
    h = hashlib.sha256()
    for part in (
        source,
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
    compiler or a readable source. Nothing is compiled."""
    cc = cc or compiler()
    if cc is None:
        return None
    try:
        data = source.read_bytes()
    except OSError:
        return None
    return into / f"{name}-{_digest(data, (*BASE_FLAGS, *flags), cc)}"


def _usable(path: Path) -> bool:
    """A finished build of ours: a regular file (not a link), executable, ours, not writable
    by others."""
    try:
        st = path.lstat()
    except OSError:
        return False
    import stat

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
    """Compile ``source`` into ``INTO/NAME-HASH`` (see the module docstring) and return that
    path; an existing build of the same hash is returned as it is. ``flags`` come after
    :data:`BASE_FLAGS` (extra libraries: ``-lm``).

    BuildFailed (one line) when there is no compiler, the source cannot be read, the folder
    cannot be written or the compiler fails (its first error line).
    """
    cc = cc or compiler()
    if cc is None:
        raise BuildFailed(why_not() or "no C compiler")
    if os.sep in name or not name or name.startswith("."):
        raise BuildFailed(f"bad helper name {name!r}")
    try:
        data = source.read_bytes()
    except OSError as exc:
        raise BuildFailed(f"cannot read {source}: {exc.strerror or exc}") from None
    all_flags = (*BASE_FLAGS, *flags)
    target = into / f"{name}-{_digest(data, all_flags, cc)}"
    if _usable(target):
        return target
    try:
        into.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as exc:
        raise BuildFailed(f"cannot create {into}: {exc.strerror or exc}") from None
    compile_flags = [f for f in all_flags if not f.startswith("-l")]
    link_flags = [f for f in all_flags if f.startswith("-l")]  # after the source, for every ld
    tmp = into / f".{target.name}.{os.getpid()}.{os.urandom(4).hex()}.tmp"
    # Compiled from a copy of the bytes hashed, so the binary is what the name says even if
    # the source changes while we build.
    src_copy = into / f".{target.name}.{os.getpid()}.{os.urandom(4).hex()}.c"
    try:
        try:
            src_copy.write_bytes(data)
            done = subprocess.run(
                [*cc.argv, *compile_flags, "-o", str(tmp), str(src_copy), *link_flags],
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
            said = _first_error(done.stderr.replace(str(src_copy), source.name), done.returncode)
            raise BuildFailed(f"{name}: {said}")
        try:
            os.chmod(tmp, 0o755)
            os.replace(tmp, target)
        except OSError as exc:
            raise BuildFailed(f"cannot install {target}: {exc.strerror or exc}") from None
    finally:
        for leftover in (tmp, src_copy):
            try:
                leftover.unlink()
            except OSError:
                pass
    return target
