"""How many bytes the pipeline will write for a recording, before it writes them.

The media cache holds 16 kHz mono 16-bit WAV (32,000 B/s, ~115 MB per hour of audio) and the
aligners write raw float32 PCM (64,000 B/s, ~230 MB per hour); reserve what these say.
"""

from __future__ import annotations

import json
import math
import shutil
import subprocess
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

from janitor.errors import ConfigError

__all__ = ["WAV_HEADER_BYTES", "Estimate", "estimate_media", "pcm_bytes", "probe_duration"]

#: A canonical RIFF/WAVE header (RIFF + fmt + data chunks).
WAV_HEADER_BYTES = 44
#: ffmpeg adds a LIST/INFO chunk to the header: its own name (ISFT, e.g. "Lavf59.27.100") and the
#: input's tags (title, artist, comment ...). Room for the chunk and the encoder name; each tag's
#: text is added on top of it (see _info_bytes).
WAV_INFO_BYTES = 256
_WIDTHS = {"wav16": 2, "f32": 4}
Format = Literal["wav16", "f32"]


def pcm_bytes(
    duration_s: float, rate: int = 16000, channels: int = 1, sample_width: int = 2
) -> int:
    """Bytes of raw PCM: ``ceil(duration * rate)`` frames of ``channels * sample_width`` bytes.

    >>> pcm_bytes(3600)            # one hour, 16 kHz mono 16-bit: the media cache's WAV data
    115200000
    >>> pcm_bytes(3600, sample_width=4)   # float32 windows of the aligners
    230400000
    """
    if duration_s < 0 or rate <= 0 or channels <= 0 or sample_width <= 0:
        raise ConfigError("duration, rate, channels and sample width must be positive")
    return math.ceil(duration_s * rate) * channels * sample_width


@dataclass(frozen=True, slots=True)
class Estimate:
    """What one media file will cost once converted."""

    media: str
    duration_s: float
    format: str
    rate: int
    channels: int
    sample_width: int
    bytes: int

    def as_dict(self) -> dict[str, Any]:
        """The JSON shape of `janitor estimate --json`."""
        return asdict(self)


def probe_duration(media: Path) -> float:
    """The media's duration in seconds, read with ffprobe; ConfigError if it cannot be read."""
    return _probe(media)[0]


def _info_bytes(tags: dict[str, str]) -> int:
    """Bytes of the LIST/INFO chunk ffmpeg writes into a WAV for these tags (an upper bound)."""
    return WAV_INFO_BYTES + sum(8 + len(str(v).encode()) + 2 for v in tags.values())


def _probe(media: Path) -> tuple[float, dict[str, str]]:
    """Duration in seconds and the container's tags, read with ffprobe."""
    ffprobe = shutil.which("ffprobe")
    if ffprobe is None:
        raise ConfigError("ffprobe not found on PATH; install ffmpeg (it ships ffprobe)")
    if not media.is_file():
        raise ConfigError(f"media file {media} does not exist or is not a file")
    proc = subprocess.run(
        [
            ffprobe,
            "-v",
            "error",
            "-show_entries",
            "format=duration:format_tags",
            "-of",
            "json",
            str(media),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    try:
        fmt = json.loads(proc.stdout or "{}")["format"]
        duration = float(fmt["duration"])
        tags = dict(fmt.get("tags") or {})
    except (KeyError, ValueError, TypeError):
        why = (proc.stderr.strip().splitlines() or ["no duration found"])[-1]
        raise ConfigError(f"ffprobe cannot read {media}: {why}") from None
    if not math.isfinite(duration) or duration < 0:
        raise ConfigError(f"ffprobe reports no usable duration for {media}")
    return duration, tags


def estimate_media(
    media: Path, *, fmt: Format = "wav16", rate: int = 16000, channels: int = 1
) -> Estimate:
    """Bytes the pipeline writes for ``media``: WAV (header included) or float32 PCM."""
    if fmt not in _WIDTHS:
        raise ConfigError(f"format {fmt!r} is not one of: {', '.join(_WIDTHS)}")
    duration, tags = _probe(media)
    width = _WIDTHS[fmt]
    nbytes = pcm_bytes(duration, rate, channels, width)
    if fmt == "wav16":
        nbytes += WAV_HEADER_BYTES + _info_bytes(tags)
    return Estimate(str(media), duration, fmt, rate, channels, width, nbytes)
