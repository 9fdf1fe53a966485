"""The pipeline: batchalign3's two trees on a tmpfs with the policy that names them, and the
simulator's command line (``tests/pipeline_sim.py``); its media are made once for the run
(:mod:`tests._fixtures.media`)."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests._fixtures.media import REAL_FFMPEG

__all__ = [
    "PCM_RATE",
    "REAL_FFMPEG",
    "SIM",
    "WAV_RATE",
    "Pipeline",
    "pipeline",
    "sim_command",
]


SIM = Path(__file__).resolve().parents[1] / "pipeline_sim.py"

PCM_RATE = 64_000  # 16 kHz mono f32le
WAV_RATE = 32_000  # 16 kHz mono s16le


def sim_command(cache: Path, tmp: Path, *args: str | os.PathLike[str]) -> list[str]:
    """The pipeline simulator's command line, for a media cache and a job temp folder."""
    return [sys.executable, str(SIM), "--cache", str(cache), "--tmpdir", str(tmp),
            *map(os.fspath, args)]  # fmt: skip


@dataclass
class Pipeline:
    """A tmpfs with batchalign3's two trees on it, and the policy naming them."""

    mount: Path
    cache: Path
    tmp: Path
    policy: Path

    def sim(self, *args: str | os.PathLike[str]) -> list[str]:
        """The simulator's command line for this volume's cache and temp folder."""
        return sim_command(self.cache, self.tmp, *args)

    def job_folders(self) -> list[Path]:
        return sorted(self.tmp.glob(".tmp*"))


@pytest.fixture
def pipeline(
    tmpfs: Callable[..., Path], write_policy: Callable[..., Path]
) -> Callable[..., Pipeline]:
    """``pipeline(size, floor=, quota=, cache_min_age=)``: the shipped policy's two trees on a
    tmpfs (``cache/`` the media cache, ``tmp/`` the job temp folder), short ages."""

    def make(
        size: str = "64m",
        *,
        floor: str = "8MiB",
        quota: str = "40MiB",
        cache_min_age: str = "10m",
    ) -> Pipeline:
        mount = tmpfs(size)
        cache, tmp = mount / "cache", mount / "tmp"
        cache.mkdir()
        tmp.mkdir()
        policy = write_policy(
            {
                "media_cache": {
                    "role": "cache",
                    "path": str(cache),
                    "quota": quota,
                    "min_age": cache_min_age,
                    "low_watermark": "90%",
                    "group": r"^(?P<key>[^/]+?)(?:\.tmp)?\.wav(?:\.lock)?$",
                    "lock": "{key}.wav.lock",
                },
                "job_tmp": {
                    "role": "scratch",
                    "path": str(tmp),
                    "units": "dir",
                    "unit_glob": ".tmp*",
                    "unit_requires": ["fa_v2", "asr_v2"],
                    "orphan_age": "1h",
                    "min_age": "0s",
                },
            },
            floor=floor,
        )
        return Pipeline(mount, cache, tmp, policy)

    return make
