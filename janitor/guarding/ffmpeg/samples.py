"""How many samples ffmpeg writes for a window of an input: the ``-ss``/``-to``/``-t`` options
of a file (:class:`Window`), what the decoder emits, and what the resampler makes of it.

- ``-ss S -to E`` on an input (batchalign3's UTR segments and group cuts) keeps
  ``round((E - S) x in_rate)`` samples of the input, halves rounded up (and from sample
  ``round(S x in_rate)`` to the decoder's last when the span runs past the end); ffmpeg's
  resampler then writes ``n x out / in`` samples, its last partial one only past a remainder
  measured per pair of rates (:func:`resampled_samples`). Measured over hundreds of spans, to the
  millisecond and to the microsecond, from WAV, FLAC, MP3 and AAC at 16, 22.05, 44.1 and 48 kHz:
  exact, except from 22,050 Hz where one span in about sixty came out one sample short of the
  estimate. Spans under ~2 ms (the resampler's filter) come out shorter than estimated. On the
  output side the window is applied in microseconds, rounded up. ``-t`` wins over ``-to``;
  ``-to <= -ss`` makes ffmpeg refuse. Beyond the input's end the output is shorter (or empty).
- AAC-LC in MP4 decodes whole 1024-sample frames from its edit list's start to the last frame
  that begins before the edit's end: up to 1023 samples more than the duration ffprobe reports;
  MP3 with a LAME/Lavf tag decodes its frames less the encoder delay and padding the tag
  states, which ffprobe's duration still counts. Both are read from the header
  (janitor.guarding.ffmpeg.container), so their whole-file conversions and cuts past the end are
  exact; without such a header one AAC frame is added to the duration (an upper bound). MP3
  without the tag, Opus and WMA decode to at most the ffprobe duration; FLAC, Vorbis and WAV to
  exactly it.
"""

from __future__ import annotations

from janitor.guarding.ffmpeg.args import parse_time_us
from janitor.guarding.ffmpeg.records import MediaInfo, NotEstimable, Option

__all__ = [
    "Window",
    "resampled_samples",
    "set_time",
    "written_samples",
]

# Per decoded-frame padding at the end of the stream, in samples: AAC decodes whole frames.
_END_PAD = {"aac": 1024}


class Window:
    """The -ss/-to/-t/-sseof/-itsoffset options of one file, as microseconds (None: not given)."""

    __slots__ = ("itsoffset", "ss", "sseof", "t", "to")

    def __init__(self) -> None:
        self.ss: int | None = None
        self.to: int | None = None
        self.t: int | None = None
        self.sseof: int | None = None
        self.itsoffset: int | None = None

    def timed(self) -> bool:
        """Whether the file is cut: -ss, -to, -t or -sseof given."""
        return any(v is not None for v in (self.ss, self.to, self.t, self.sseof))

    def end(self, start: int) -> int | NotEstimable | None:
        """Where reading stops (ffmpeg: -t wins over -to; -to must be after -ss)."""
        if self.t is not None:
            return start + self.t
        if self.to is not None:
            if self.to <= start:
                return NotEstimable("-to is not after -ss: ffmpeg refuses")
            return self.to
        return None


def set_time(window: Window, opt: Option) -> NotEstimable | None:
    """Set ``opt`` (one of the window's options) on ``window``; why not, if ffmpeg refuses it."""
    assert opt.value is not None
    try:
        us = parse_time_us(opt.value)
    except ValueError:
        return NotEstimable(f"ffmpeg refuses {opt.flag} {opt.value!r}")
    if us < 0 and opt.name not in ("sseof", "itsoffset"):
        return NotEstimable(f"negative {opt.flag}")
    if opt.name == "sseof" and us > 0:
        return NotEstimable("-sseof must not be positive")
    setattr(window, opt.name, us)
    return None


#: What ffmpeg's resampler (libswresample's defaults: filter_size 32, cutoff 0.97, exact
#: rational) writes for n input samples, measured with ffmpeg 5.1: n x out / in, and the last,
#: partial sample only if ``n x out mod in`` reaches the remainder below (its filter wants that
#: much input past the sample). Rates not listed write the partial sample whenever there is one
#: (measured so from 22,050, 11,025, 24,000 and 32,000 Hz to 16 kHz): rounding up, which never
#: counts low. Inputs shorter than the filter (about 2 ms) give fewer samples still.
_RESAMPLER_LAST: dict[tuple[int, int], int] = {
    (44100, 16000): 14500, (48000, 16000): 32000, (88200, 16000): 16200, (96000, 16000): 32000,
}  # fmt: skip
# Codecs that decode to exactly the duration ffprobe reports (to its microsecond).
_EXACT_CODECS = ("flac", "vorbis")


def resampled_samples(n: int, in_rate: int, out_rate: int) -> int:
    """Samples ffmpeg writes at ``out_rate`` for ``n`` samples decoded at ``in_rate``.

    >>> resampled_samples(441000, 44100, 16000)                         # 10 s
    160000
    >>> [resampled_samples(n, 44100, 16000) for n in (1000, 1001)]      # 362.81, 363.17
    [363, 363]
    """
    if in_rate == out_rate:
        return n
    whole, rest = divmod(n * out_rate, in_rate)
    if not rest:
        return whole
    return whole + (rest >= _RESAMPLER_LAST.get((in_rate, out_rate), 1))


def _rescale(us: int, rate: int) -> int:
    """Microseconds as samples at ``rate``, rounded as ffmpeg's av_rescale (halves away from 0)."""
    return (us * rate + 500000) // 1000000


def _decoded_samples(info: MediaInfo) -> int | None:
    """Samples per channel the decoder emits at ``info.sample_rate``: exact from the header's
    count, or PCM, FLAC and Vorbis from the duration; else an upper bound (None: unknown)."""
    if info.samples is not None:
        return info.samples
    if info.duration_s is None:
        return None
    us = round(info.duration_s * 1e6)
    if info.codec.startswith("pcm_") or info.codec in _EXACT_CODECS:
        return _rescale(us, info.sample_rate)
    # Decoders that emit whole frames write a little past the probed duration.
    pad = _END_PAD.get(info.codec, 0) * (2 if info.profile.startswith("HE") else 1)
    return -(-us * info.sample_rate // 1000000) + pad


def written_samples(inp: Window, out: Window, info: MediaInfo, rate: int) -> int | NotEstimable:
    """Samples per channel written at ``rate``: the input's read window, then the output's.

    An input window (``-ss``/``-to``/``-t`` before ``-i``) is cut as ffmpeg cuts it: the span
    rounded to whole samples of the input (``round((E - S) x in_rate)``; its start too, against
    the end of what the decoder emits when the window runs past it), then resampled
    (:func:`resampled_samples`). Exact where the decoded length is known
    (:func:`_decoded_samples`); an output window, ``-sseof``, ``-itsoffset`` or several audio
    streams go through microseconds, rounded up.
    """
    if out.timed() or inp.sseof is not None or inp.itsoffset is not None or info.audio_streams > 1:
        us = _written_us(inp, out, info)
        return us if isinstance(us, NotEstimable) else -(-us * rate // 1000000)
    start = inp.ss or 0
    end = inp.end(start)
    if isinstance(end, NotEstimable):
        return end
    total = _decoded_samples(info)
    if end is None and total is None:
        return NotEstimable("the input's duration is unknown")
    in_rate = info.sample_rate
    n = None if end is None else _rescale(end - start, in_rate)
    if total is not None:
        left = max(0, total - _rescale(start, in_rate))
        n = left if n is None else min(n, left)
    assert n is not None
    return resampled_samples(n, in_rate, rate)


def _written_us(inp: Window, out: Window, info: MediaInfo) -> int | NotEstimable:
    """Microseconds of audio written: the input's read window, then the output's window."""
    raw = None if info.duration_s is None else round(info.duration_s * 1e6)
    # Decoders that emit whole frames write a little past the probed duration.
    pad = _END_PAD.get(info.codec, 0) * (2 if info.profile.startswith("HE") else 1)
    known = None if raw is None else raw + (-(-pad * 1000000 // info.sample_rate) if pad else 0)
    start = inp.ss
    if start is None and inp.sseof is not None:
        if raw is None:
            return NotEstimable("-sseof on an input of unknown duration")
        start = max(0, raw + inp.sseof)
    start = start or 0
    end = inp.end(start)
    if isinstance(end, NotEstimable):
        return end
    if known is not None:
        end = known if end is None else min(end, known)
    if end is None:
        return NotEstimable("the input's duration is unknown")
    length = max(0, end - start)
    # Without -copyts the output's clock starts at 0 where the input's reading starts.
    out_start = out.ss or 0
    out_end = out.end(out_start)
    if isinstance(out_end, NotEstimable):
        return out_end
    stop = length if out_end is None else min(out_end, length)
    return max(0, stop - out_start)
