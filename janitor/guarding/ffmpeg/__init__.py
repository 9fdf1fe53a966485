"""What an ffmpeg command line will write, before it runs (issue 13), worked out once for every
caller: the guarded ffmpeg, the daemon's ``POST /v1/estimate``, ``janitor estimate`` and
``janitor run``'s pre-flight.

A guarded ffmpeg placed first on ``PATH`` calls :func:`parse` on its arguments, then
:func:`estimate` with a :class:`Probe`, reserves the bytes of each output, and only then runs the
real ffmpeg. This package runs on the path of every alignment group, so it is stdlib only and
imports nothing heavy at load time (``json`` and ``subprocess`` load on a probe cache miss)::

    >>> inv = parse(["-y", "-ss", "1.5", "-to", "31.5", "-i", "talk.wav", "-f", "f32le",
    ...              "-acodec", "pcm_f32le", "-ar", "16000", "-ac", "1", "g0.pcm"])
    >>> [o.url for o in inv.outputs], inv.overwrite
    (['g0.pcm'], True)
    >>> est = estimate(inv, lambda path: MediaInfo(3600.0, 16000, 1))
    >>> est[0].path, est[0].bytes                  # 30 s x 16,000 x 4 bytes
    ('g0.pcm', 1920000)

Only raw PCM and WAV outputs are estimated. Anything it cannot be sure about (a filter, an
unknown option, a pipe, a compressed codec, several inputs without ``-map``) gives
:class:`NotEstimable` with a short reason, and the guard runs ffmpeg unguarded.

Its modules, one concern each (ffmpeg 5.1's behaviours they rely on, measured with the real
binary, are in each one's own text):

- ``records``: the values passed around (:class:`Invocation`, :class:`MediaInfo`,
  :class:`OutputEstimate`, :class:`NotEstimable` ...);
- ``args``: ffmpeg's time syntax and argument list (:func:`parse`), which URLs are local files;
- ``wav``: PCM codecs, raw muxers, and the bytes of the header ffmpeg's wav muxer writes;
- ``container``: what a file's own header says (durations, exact decoded lengths, and for plain
  WAV and AAC-LC M4A files everything ffprobe would);
- ``samples``: the samples a window of an input gives, through the decoder and the resampler;
- ``probe``: an input's :class:`MediaInfo`, from its header or ffprobe, in a cache shared by
  every process (:func:`probe_cache_dir` names its folder);
- ``outputs``: the estimate itself, output by output (:func:`estimate`, :func:`estimate_command`).
"""

from __future__ import annotations

from janitor.guarding.ffmpeg.args import input_files, local_path, parse, parse_time, parse_time_us
from janitor.guarding.ffmpeg.container import container_duration, container_samples, header_info
from janitor.guarding.ffmpeg.outputs import estimate, estimate_command
from janitor.guarding.ffmpeg.probe import Probe, probe_cache_dir
from janitor.guarding.ffmpeg.records import (
    FileArg,
    Invocation,
    MediaInfo,
    NotEstimable,
    Option,
    OutputEstimate,
)
from janitor.guarding.ffmpeg.samples import resampled_samples
from janitor.guarding.ffmpeg.wav import (
    LAVF_ENCODER_CHUNK,
    PCM_CODECS,
    RAW_FORMATS,
    WAV_CODECS,
    riff_key,
    wav_header_bytes,
)

__all__ = [
    "LAVF_ENCODER_CHUNK",
    "PCM_CODECS",
    "RAW_FORMATS",
    "WAV_CODECS",
    "FileArg",
    "Invocation",
    "MediaInfo",
    "NotEstimable",
    "Option",
    "OutputEstimate",
    "Probe",
    "container_duration",
    "container_samples",
    "estimate",
    "estimate_command",
    "header_info",
    "input_files",
    "local_path",
    "parse",
    "parse_time",
    "parse_time_us",
    "probe_cache_dir",
    "resampled_samples",
    "riff_key",
    "wav_header_bytes",
]
