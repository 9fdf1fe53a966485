"""How many bytes the pipeline will write for a recording, before it writes them.

Worked out by the one estimator (janitor.guarding.ffmpeg) for the command line batchalign3 runs on
the recording (each below), with the probe every other estimate uses, so ``janitor
estimate``, ``janitor run``'s pre-flight, the daemon's ``POST /v1/estimate`` and the guarded
ffmpeg agree to the byte:

- ``wav16``, the media cache's WAV (16 kHz mono 16-bit, 32,000 B/s, ~115 MB per hour of audio):
  ``ffmpeg -y -i SRC -acodec pcm_s16le -ar 16000 -ac 1 CACHE/{fp}.tmp.wav``, header included;
- ``f32``, raw float32 PCM (64,000 B/s, ~230 MB per hour): ``ffmpeg -y -i SRC -f f32le -acodec
  pcm_f32le -ar 16000 -ac 1 OUT.pcm``, the whole-file PCM of ASR and the like, and what an
  alignment job's group cuts of the cached WAV add up to (its working set).
"""

from __future__ import annotations

import math
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from janitor.errors import ConfigError

if TYPE_CHECKING:
    from janitor.guarding.ffmpeg import NotEstimable, Probe

__all__ = [
    "WAV_HEADER_BYTES",
    "Estimate",
    "conversion_args",
    "estimate_bytes",
    "estimate_media",
    "pcm_bytes",
    "probe_duration",
]

#: A canonical RIFF/WAVE header (RIFF + fmt + data chunks): the least a WAV's header takes.
#: What ffmpeg writes (its encoder's name, the input's tags) is ``wav_header_bytes``'s to say.
WAV_HEADER_BYTES = 44
Format = Literal["wav16", "f32"]
#: Each format's bytes per sample, and batchalign3's output options for it.
_WIDTHS = {"wav16": 2, "f32": 4}
_OUTPUT = {
    "wav16": ["-acodec", "pcm_s16le"],
    "f32": ["-f", "f32le", "-acodec", "pcm_f32le"],
}
_NAMES = {"wav16": "estimate.wav", "f32": "estimate.pcm"}


def pcm_bytes(
    duration_s: float, rate: int = 16000, channels: int = 1, sample_width: int = 2
) -> int:
    """Bytes of raw PCM: ``ceil(duration * rate)`` frames of ``channels * sample_width`` bytes.

    For a worker that knows a duration and no file (a span it is about to cut); a file's bytes
    are :func:`estimate_media`'s.

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


def conversion_args(
    media: str | os.PathLike[str], fmt: Format = "wav16", rate: int = 16000, channels: int = 1
) -> list[str]:
    """batchalign3's ffmpeg arguments (without ``ffmpeg``) converting ``media`` to ``fmt``.

    The input is named ``file:`` + its absolute path, so a name that begins with ``-`` or holds
    a colon is read as the file it is (not an option or a protocol); the output, a name in the
    current folder, is never written.

    >>> " ".join(conversion_args("/m/-talk.m4a"))
    '-y -i file:/m/-talk.m4a -acodec pcm_s16le -ar 16000 -ac 1 estimate.wav'
    """
    source = "file:" + os.path.abspath(os.fspath(media))
    size = ["-ar", str(rate), "-ac", str(channels)]
    return ["-y", "-i", source, *_OUTPUT[fmt], *size, _NAMES[fmt]]


def estimate_bytes(
    media: str | os.PathLike[str],
    fmt: Format = "wav16",
    *,
    rate: int = 16000,
    channels: int = 1,
    probe: Probe | None = None,
) -> Estimate | NotEstimable:
    """What converting ``media`` to ``fmt`` writes, by the one estimator; or why that cannot be
    known (the reason names no file). ``probe`` defaults to the shared probe cache's; an
    unknown format or a rate or channel count below 1 is a ConfigError."""
    from janitor.guarding import ffmpeg

    if fmt not in _WIDTHS:
        raise ConfigError(f"format {fmt!r} is not one of: {', '.join(_WIDTHS)}")
    if rate <= 0 or channels <= 0:
        raise ConfigError("rate and channels must be positive")
    probe = probe or ffmpeg.Probe(ffmpeg.probe_cache_dir())
    path = os.path.abspath(os.fspath(media))
    info = probe.duration_of(path)  # the estimate asks the same probe again: remembered
    if isinstance(info, ffmpeg.NotEstimable):
        return info
    est = ffmpeg.estimate_command(conversion_args(path, fmt, rate, channels), probe=probe)
    if isinstance(est, ffmpeg.NotEstimable):
        return ffmpeg.NotEstimable(est.reason.removeprefix(f"{_NAMES[fmt]}: "))
    (out,) = est
    duration = info.duration_s if info.duration_s is not None else out.duration_s
    return Estimate(os.fspath(media), duration, fmt, rate, channels, _WIDTHS[fmt], out.bytes)


def estimate_media(
    media: Path,
    *,
    fmt: Format = "wav16",
    rate: int = 16000,
    channels: int = 1,
    probe: Probe | None = None,
) -> Estimate:
    """Bytes the pipeline writes for ``media``: WAV (header included) or float32 PCM.

    ConfigError, naming the problem and the fix, when it cannot be known.
    """
    if not Path(media).is_file():
        raise ConfigError(f"media file {media} does not exist or is not a file")
    est = estimate_bytes(media, fmt, rate=rate, channels=channels, probe=probe)
    if not isinstance(est, Estimate):
        raise ConfigError(_problem(media, est.reason))
    return est


def probe_duration(media: Path, probe: Probe | None = None) -> float:
    """The media's duration in seconds, as ffprobe reports it (read from the header where that
    says it plainly); ConfigError if it cannot be read."""
    from janitor.guarding import ffmpeg

    if not Path(media).is_file():
        raise ConfigError(f"media file {media} does not exist or is not a file")
    probe = probe or ffmpeg.Probe(ffmpeg.probe_cache_dir())
    info = probe.duration_of(os.path.abspath(media))
    if isinstance(info, ffmpeg.NotEstimable):
        raise ConfigError(_problem(media, info.reason))
    if info.duration_s is None:
        raise ConfigError(f"ffprobe reports no usable duration for {media}")
    return info.duration_s


def _problem(media: str | os.PathLike[str], reason: str) -> str:
    """One line: what went wrong with ``media``, and what to do."""
    if reason.startswith("ffprobe not found"):
        return "ffprobe not found on PATH; install ffmpeg (it ships ffprobe)"
    if reason.startswith("ffprobe failed: "):
        return f"ffprobe cannot read {media}: {reason.removeprefix('ffprobe failed: ')}"
    return f"cannot estimate {media}: {reason}"
