"""The size walk compiled: ``janitor/native/sizewalk.c``, built once here, run as a process.

``janitor space`` must answer faster than ``du`` over the same folders. The Python walk
(``janitor.host.sizewalk``) spends most of its time building a ``stat_result`` per entry, and
on a small machine that CPU is taken from the command's own start-up, which runs at the same
time. The C walker does the same walk (the same numbers: the tests run both on the same trees)
with threads and plain ``fstatat``; it uses only POSIX.1-2008 calls (``openat``, ``fstatat``,
``fdopendir``, pthreads), so Linux and macOS, and ``JANITOR_PORTABLE``, all run it.

It is built where it runs, with the machine's own compiler (``janitor.host.cbuild``), into a
folder the caller names (``janitor.config.paths.native_dir``), once per version of its source:
a link ``sizewalk-src-HASH`` (HASH of the bytes of ``sizewalk.c`` and the ``jlib`` files it
includes, and the platform) names the build,
so finding it again costs a hash and a ``readlink``, never asking the compiler. A build that
fails leaves ``sizewalk-src-HASH.failed`` holding why, and is not tried again for a day (else
every run would pay for a failing compiler); the Python walk measures meanwhile, silently
(``janitor doctor`` says why).

The walker reads what to measure on its stdin and writes its measures on its stdout, in a
compact form (the C file's comment) read here with ``memoryview.cast``: per folder its totals,
each entry of its top (``CHILDREN``) and every file (``FILES``) only when asked for.
"""

from __future__ import annotations

import os
import signal
import struct
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "FAILED_RETRY_S",
    "SOURCE",
    "NativeWalk",
    "Raw",
    "WalkerState",
    "build_walker",
    "walker",
    "walker_state",
]

#: The walker's source, shipped in the package.
SOURCE = Path(__file__).resolve().parent.parent / "native" / "sizewalk.c"
NAME = "sizewalk"
#: How long a failed build is not tried again (a compiler installed meanwhile is found then).
FAILED_RETRY_S = 86400.0
_MAGIC = b"sizewalk1"
_OUT_MAGIC = _MAGIC + b"\0" * 7
_HEAD = struct.Struct("=QqqqQQQQ")  # device, bytes, entries, own, children, files, 2 lengths
_Q = struct.Struct("=Q")

#: One folder's measure as the walker tells it: device, bytes, entries, its top's own bytes,
#: its top's entries as (name, is_dir, bytes, newest mtime, oldest use, linked), its files as
#: (path relative to the top, bytes, use).
Raw = tuple[
    int,
    int,
    int,
    int,
    list[tuple[str, bool, int, float, float, bool]],
    list[tuple[str, int, float]],
]


def _key() -> str | None:
    """This source's key, without asking for a compiler: the bytes of every file the walker is
    built from (``sizewalk.c`` and the ``jlib`` files it includes), and the machine."""
    from janitor.host.cbuild import BuildFailed, program_files  # light, as below

    try:
        files = program_files(SOURCE)
    except BuildFailed:
        return None
    try:  # hashlib's own, without importing all of hashlib (start-up time)
        from _sha256 import sha256  # type: ignore[import-not-found]
    except ImportError:  # Python 3.12 and later: _sha2
        from hashlib import sha256

    h = sha256()
    for f in files:
        for part in (f.name.encode(), f.data):
            h.update(len(part).to_bytes(8, "little") + part)
    # The machine too: a home shared by an Intel and an ARM Mac holds a build for each.
    h.update(f"\0{sys.platform}\0{os.uname().machine}".encode())
    digest: str = h.hexdigest()
    return digest[:16]


def _ready(into: Path, key: str) -> Path | None:
    try:
        name = os.readlink(into / f"{NAME}-src-{key}")
    except OSError:
        return None
    if "/" in name or not name.startswith(NAME + "-"):
        return None
    path = into / name
    from janitor.host.cbuild import usable  # light: it imports its compiler tools lazily

    return path if usable(path) else None


def build_walker(into: Path) -> Path:
    """Build the walker into ``into`` now (or find this source's build there), and record it;
    its path. ``janitor.host.cbuild.BuildFailed`` (one line) when it cannot be built."""
    from janitor.host import cbuild

    key = _key()
    if key is None:
        raise cbuild.BuildFailed(f"cannot read {SOURCE}")
    path = cbuild.build(SOURCE, into, NAME, flags=("-pthread",))
    link = into / f"{NAME}-src-{key}"
    tmp = into / f".{link.name}.{os.getpid()}.{os.urandom(4).hex()}"
    try:
        os.symlink(path.name, tmp)
        os.replace(tmp, link)  # atomic: a reader sees the old link or the new one
    except OSError as exc:
        try:
            tmp.unlink()
        except OSError:
            pass
        raise cbuild.BuildFailed(f"cannot record {link}: {exc.strerror or exc}") from None
    try:
        (into / f"{link.name}.failed").unlink()
    except OSError:
        pass
    return path


def walker(into: Path | None, *, build: bool = True) -> Path | None:
    """The walker built for this source in ``into``; when there is none yet and ``build``,
    built now (once: a failure is remembered for a day). None: measure in Python."""
    if into is None:
        return None
    key = _key()
    if key is None:
        return None
    found = _ready(into, key)
    if found is not None or not build:
        return found
    failed = into / f"{NAME}-src-{key}.failed"
    try:
        if time.time() - failed.stat().st_mtime < FAILED_RETRY_S:
            return None
    except OSError:
        pass
    from janitor.host.cbuild import BuildFailed

    try:
        return build_walker(into)
    except BuildFailed as exc:
        try:
            failed.write_text(exc.reason + "\n")
        except OSError:
            pass
        return None


@dataclass(frozen=True, slots=True)
class WalkerState:
    """What ``janitor doctor`` says of the walker: its build, or why there is none."""

    path: Path | None
    failed: str | None = None  # the last build's error, if it failed
    marker: Path | None = None  # the file that holds it


def walker_state(into: Path) -> WalkerState:
    """The walker's state in ``into``, as found (nothing is built)."""
    key = _key()
    if key is None:
        return WalkerState(None, f"cannot read {SOURCE}")
    found = _ready(into, key)
    if found is not None:
        return WalkerState(found)
    marker = into / f"{NAME}-src-{key}.failed"
    try:
        said = marker.read_text(errors="replace").strip()
    except OSError:
        return WalkerState(None)
    return WalkerState(None, said or "the build failed", marker)


def _spec(
    threads: int, folders: Sequence[tuple[str, Sequence[str], int]], mounts: Sequence[list[str]]
) -> bytes | None:
    """What the walker reads on its stdin (the C file's comment); None if a path cannot be
    said there (a NUL in it: no walk can open it either)."""
    fields = [_MAGIC, str(threads).encode(), str(len(folders)).encode()]
    for (path, prune, detail), points in zip(folders, mounts, strict=True):
        base = os.path.normpath(path).rstrip("/") + "/"
        rel = [p[len(base) :] for p in points if p.startswith(base) and len(p) > len(base)]
        fields += [str(detail).encode(), os.fsencode(path), str(len(prune)).encode()]
        fields += [os.fsencode(p) for p in prune]
        fields += [str(len(rel)).encode(), *(os.fsencode(r) for r in rel)]
    if any(b"\0" in f for f in fields):
        return None
    return b"\0".join(fields) + b"\0"


class NativeWalk:
    """The walker running over some folders (:meth:`spawn`), then its measures (:meth:`results`)."""

    def __init__(self, pid: int, out: int, count: int) -> None:
        self.pid, self._out, self._count = pid, out, count
        #: Why the walk gave no measures (for debug output), once :meth:`results` says None.
        self.failure: str | None = None

    @classmethod
    def spawn(
        cls,
        binary: Path | str,
        folders: Sequence[tuple[str, Sequence[str], int]],
        mounts: Sequence[list[str]],
        threads: int,
    ) -> NativeWalk | None:
        """Start the walker on ``folders`` (path, prune paths, detail), ``mounts``: each one's
        mount points below it; None when it cannot be started (the caller walks in Python)."""
        spec = _spec(max(1, min(64, threads)), folders, mounts)
        if spec is None:
            return None
        fds: list[int] = []
        try:
            fds.extend(os.pipe())
            fds.extend(os.pipe())
            r_in, w_in, r_out, w_out = fds
            if min(fds) < 3:  # no stdio here: a pipe took its number, dup2 would not move it
                return None
            pid = os.posix_spawn(
                os.fspath(binary),
                [os.fspath(binary)],
                os.environ,
                file_actions=[
                    (os.POSIX_SPAWN_DUP2, r_in, 0),
                    (os.POSIX_SPAWN_DUP2, w_out, 1),
                    (os.POSIX_SPAWN_OPEN, 2, os.devnull, os.O_WRONLY, 0),
                ],
                setsigdef=(signal.SIGPIPE,),
            )
        except OSError:
            for fd in fds:
                os.close(fd)
            return None
        os.close(r_in)
        os.close(w_out)
        try:
            view = memoryview(spec)
            while view:  # read at once by the walker: blocks only while it reads
                view = view[os.write(w_in, view) :]
        except OSError:
            pass  # it died: its exit status says so
        finally:
            os.close(w_in)
        return cls(pid, r_out, len(folders))

    def results(self) -> list[Raw | None] | None:
        """Each folder's measure (None: no measure), in the order given; waits for the walk.
        None when the walker failed (then ``failure`` says how)."""
        if self._out < 0:
            self.failure = "results already taken"
            return None
        chunks = []
        try:
            while chunk := os.read(self._out, 1 << 20):
                chunks.append(chunk)
        except OSError as exc:
            self.failure = f"reading the walker: {exc.strerror or exc}"
        finally:
            os.close(self._out)
            self._out = -1
        status = self._wait()
        if self.failure is not None:
            return None
        if status != 0:
            self.failure = f"the walker exited with {status}"
            return None
        got = _parse(b"".join(chunks), self._count)
        if got is None:
            self.failure = "the walker's output is not what it should be"
        return got

    def _wait(self) -> int | None:
        if not self.pid:
            return None
        while True:
            try:
                _, status = os.waitpid(self.pid, 0)
            except InterruptedError:
                continue
            except ChildProcessError:
                status = -1
            break
        self.pid = 0
        return os.waitstatus_to_exitcode(status) if status != -1 else None

    def close(self) -> None:
        """End the walker if its results were not taken."""
        if self.pid:
            try:
                os.kill(self.pid, signal.SIGKILL)
            except OSError:
                pass
            self._wait()
        if self._out >= 0:
            os.close(self._out)
            self._out = -1


def _parse(data: bytes, count: int) -> list[Raw | None] | None:
    """The walker's output (the C file's comment), or None if it is not whole."""
    try:
        if data[:16] != _OUT_MAGIC or _Q.unpack_from(data, 16)[0] != count:
            return None
        view = memoryview(data)
        off = 24
        out: list[Raw | None] = []

        def part(n: int) -> memoryview:
            nonlocal off
            got = view[off : off + 8 * n]
            if len(got) != 8 * n:
                raise ValueError("short")
            off += 8 * n
            return got

        def ints(n: int) -> list[int]:
            return part(n).cast("q").tolist()

        def floats(n: int) -> list[float]:
            return part(n).cast("d").tolist()  # type: ignore[return-value]  # typeshed: ints

        def names(length: int, n: int) -> list[str]:
            nonlocal off
            blob = data[off : off + length]
            if len(blob) != length or (n and not blob.endswith(b"\0")):
                raise ValueError("short")
            off += length
            got = os.fsdecode(blob[:-1]).split("\0") if n else []
            if len(got) != n:
                raise ValueError("names")
            return got

        for _ in range(count):
            present = _Q.unpack_from(data, off)[0]
            off += 8
            if not present:
                out.append(None)
                continue
            dev, total, entries, own, nk, nf, kl, fl = _HEAD.unpack_from(data, off)
            off += _HEAD.size
            kids = names(kl, nk)
            sizes, newest, oldest, flags = ints(nk), floats(nk), floats(nk), ints(nk)
            children = [
                (n, bool(f & 1), s, a, b, bool(f & 2))
                for n, s, a, b, f in zip(kids, sizes, newest, oldest, flags, strict=True)
            ]
            paths = names(fl, nf)
            files = list(zip(paths, ints(nf), floats(nf), strict=True))
            out.append((dev, total, entries, own, children, files))
        return out if off == len(data) else None
    except (struct.error, ValueError, TypeError):
        return None
