"""Real recordings, made by the real ffmpeg once for the whole run and shared.

Encoding is the dearest thing the suite does for a test's inputs (a 400 s AAC recording took
ffmpeg 3.5 CPU-seconds), and before this store every module, in every parallel worker, made its
own. :class:`MediaStore` makes each file once per run, for every worker: under an exclusive
``flock`` on the file's lock, written under a temporary name and renamed into place, so a worker
either finds it whole or makes it. The files are read-only inputs: a test that changes one
copies it into its ``tmp_path`` first.

:func:`tone` is a recording's input (a 440 Hz sine, at 44.1 kHz unless asked otherwise), and
:data:`AAC_FAST` the AAC encoder's fast coder (``-aac_coder fast``): a four times cheaper search
for the same frames (the same duration, priming and frame count in the MP4 header, and the same
bytes once decoded to a 16 kHz WAV), for a recording a test needs for its length and container.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

__all__ = ["AAC_FAST", "REAL_FFMPEG", "MediaStore", "m4a", "media_store", "tone"]

REAL_FFMPEG = shutil.which("ffmpeg") or "ffmpeg"
#: ffmpeg's AAC encoder with its fast coder (the default, twoloop, searches four times longer).
AAC_FAST = ("-c:a", "aac", "-aac_coder", "fast")


@dataclass(frozen=True)
class MediaStore:
    """A folder of media files made once for the run, shared by every worker of it."""

    root: Path

    def make(self, name: str, *args: str) -> Path:
        """``root/name``, made once by ``ffmpeg -y ARGS root/name`` (ARGS: its inputs and its
        output options; the container follows the name's suffix)."""
        out = self.root / name
        if out.exists():
            return out
        with open(self.root / f".{name}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # another worker making it: wait for it
            if not out.exists():
                part = self.root / f".part-{os.getpid()}-{name}"  # the suffix stays last
                done = subprocess.run(
                    [REAL_FFMPEG, "-nostdin", "-loglevel", "error", "-y", *args, str(part)],
                    capture_output=True,
                    text=True,
                    check=False,
                )
                assert done.returncode == 0, f"ffmpeg could not make {name}: {done.stderr}"
                os.replace(part, out)
        return out


def tone(seconds: float, *, rate: int = 44100) -> list[str]:
    """ffmpeg's input arguments for a tone of ``seconds`` at ``rate`` Hz (lavfi sine)."""
    return ["-f", "lavfi", "-i", f"sine=frequency=440:sample_rate={rate}:duration={seconds:g}"]


@pytest.fixture(scope="session")
def media_store(tmp_path_factory: pytest.TempPathFactory) -> MediaStore:
    """The run's :class:`MediaStore`: in the run's temporary root, which every pytest-xdist
    worker's own folder is in (``PYTEST_XDIST_WORKER`` set), else in this session's."""
    base = tmp_path_factory.getbasetemp()
    root = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "media"
    root.mkdir(exist_ok=True)
    return MediaStore(root)


@pytest.fixture(scope="session")
def m4a(media_store: MediaStore) -> Callable[[float], Path]:
    """``m4a(seconds)``: a mono AAC recording of that length (made once for the run)."""

    def make(seconds: float) -> Path:
        return media_store.make(
            f"talk-{seconds:g}s.m4a", *tone(seconds), "-ac", "1", *AAC_FAST, "-b:a", "24k"
        )

    return make
