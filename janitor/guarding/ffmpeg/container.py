"""What a media file's own header says, read without ffprobe (which costs ~50 ms of CPU a file):
durations of WAV and MP4-family files, the exact decoded length of AAC-LC in MP4 and of MP3 with
an encoder-delay tag, and for plain WAV and AAC-LC M4A files everything the estimator needs
(:func:`header_info`). Every reader says None when the header does not say plainly: then
ffprobe is asked.
"""

from __future__ import annotations

import os

from janitor.guarding.ffmpeg.records import MediaInfo
from janitor.guarding.ffmpeg.wav import generic_tag, riff_key

TYPE_CHECKING = False  # typing costs several ms to import; mypy treats this name as True
if TYPE_CHECKING:
    from collections.abc import Iterable
    from typing import BinaryIO

__all__ = ["container_duration", "container_samples", "header_info"]

_MP4_EXTS = (".mp4", ".m4a", ".mov", ".m4v", ".3gp")


def container_duration(path: str) -> float | None:
    """The duration a WAV or MP4-family file's header states, read in microseconds without
    ffprobe (which costs ~50 ms of CPU per file); None when the header does not say plainly
    (streamed WAV, fragmented MP4, another container): ask ffprobe then."""
    ext = os.path.splitext(path)[1].lower()
    try:
        with open(path, "rb") as f:
            if ext == ".wav":
                return _wav_duration(f)
            if ext in _MP4_EXTS:
                return _mp4_duration(f, os.fstat(f.fileno()).st_size)
    except (OSError, ValueError, IndexError):
        return None
    return None


def _wav_duration(f: BinaryIO) -> float | None:
    head = f.read(12)
    if len(head) < 12 or head[:4] != b"RIFF" or head[8:12] != b"WAVE":
        return None
    byte_rate = 0
    while True:
        chunk = f.read(8)
        if len(chunk) < 8:
            return None
        size = int.from_bytes(chunk[4:8], "little")
        if chunk[:4] == b"fmt ":
            fmt = f.read(min(size, 64))  # a corrupt size must not make us read the file
            f.seek(size + (size & 1) - len(fmt), 1)
            byte_rate = int.from_bytes(fmt[8:12], "little")
        elif chunk[:4] == b"data":
            if not byte_rate or size in (0, 0xFFFFFFFF):
                return None
            return size / byte_rate
        else:
            f.seek(size + (size & 1), 1)


def _mp4_duration(f: BinaryIO, end: int) -> float | None:
    """mvhd's duration / timescale, found by walking the boxes down to moov/mvhd."""
    moov = _box(f, 0, end, b"moov")
    mvhd = moov and _box(f, *moov, b"mvhd")
    if not moov or not mvhd:
        return None
    pos = mvhd[0]
    f.seek(pos)
    body = f.read(32)
    version = body[0]
    if version == 1:
        scale, duration = int.from_bytes(body[20:24], "big"), int.from_bytes(body[24:32], "big")
    else:
        scale, duration = int.from_bytes(body[12:16], "big"), int.from_bytes(body[16:20], "big")
    if not scale or not duration or duration in (0xFFFFFFFF, 0xFFFFFFFFFFFFFFFF):
        return None
    return duration / scale


def container_samples(path: str, codec: str, profile: str, sample_rate: int) -> int | None:
    """Samples per channel ffmpeg's decoder emits for ``path``, from its header, where
    ffprobe's duration does not say it exactly; None for any other file, or when unsure.

    - AAC-LC in MP4/M4A/MOV: it decodes whole 1024-sample frames, from the edit list's start
      (the encoder's priming is skipped) to the end of the last frame that begins before the
      edit's end, so up to 1023 samples past the duration ffprobe reports.
    - MP3 with a LAME/Lavf/Lavc tag: its frames x 1152 (576 below 32 kHz), less the encoder's
      delay and padding the tag states; ffprobe's duration counts both.
    """
    try:
        with open(path, "rb") as f:
            head = f.read(12)
            if codec == "aac" and profile == "LC" and head[4:8] == b"ftyp":
                return _mp4_aac_samples(f, os.fstat(f.fileno()).st_size, sample_rate)
            if codec == "mp3":
                return _mp3_samples(f, head)
    except (OSError, ValueError, IndexError):
        return None
    return None


def _boxes(f: BinaryIO, start: int, end: int) -> Iterable[tuple[bytes, int, int]]:
    """The ISO BMFF boxes between ``start`` and ``end``: (type, body start, box end)."""
    pos = start
    while pos + 8 <= end:
        f.seek(pos)
        head = f.read(16)
        size, kind, skip = int.from_bytes(head[:4], "big"), head[4:8], 8
        if size == 1:
            size, skip = int.from_bytes(head[8:16], "big"), 16
        elif size == 0:
            size = end - pos
        if size < skip or pos + size > end:
            return
        yield kind, pos + skip, pos + size
        pos += size


def _box(f: BinaryIO, start: int, end: int, kind: bytes) -> tuple[int, int] | None:
    for k, body, stop in _boxes(f, start, end):
        if k == kind:
            return body, stop
    return None


def _mp4_aac_samples(f: BinaryIO, size: int, sample_rate: int) -> int | None:
    """The decoded length of an MP4's one AAC track (see :func:`container_samples`)."""
    moov = _box(f, 0, size, b"moov")
    mvhd = moov and _box(f, *moov, b"mvhd")
    if not moov or not mvhd:
        return None
    f.seek(mvhd[0])
    body = f.read(24)
    movie_scale = int.from_bytes(body[20:24] if body[0] == 1 else body[12:16], "big")
    tracks = []
    for kind, start, stop in _boxes(f, *moov):
        if kind != b"trak":
            continue
        mdia = _box(f, start, stop, b"mdia")
        hdlr = mdia and _box(f, *mdia, b"hdlr")
        if not mdia or not hdlr:
            return None
        f.seek(hdlr[0] + 8)
        if f.read(4) == b"soun":
            tracks.append((start, stop, mdia))
    if len(tracks) != 1 or not movie_scale:
        return None
    start, stop, mdia = tracks[0]
    mdhd = _box(f, *mdia, b"mdhd")
    minf = _box(f, *mdia, b"minf")
    stbl = minf and _box(f, *minf, b"stbl")
    stts = stbl and _box(f, *stbl, b"stts")
    if not mdhd or not stts:
        return None
    f.seek(mdhd[0])
    body = f.read(24)
    if int.from_bytes(body[20:24] if body[0] == 1 else body[12:16], "big") != sample_rate:
        return None  # durations in another clock than the decoder's samples
    # The edit list: one edit (the encoder's priming skipped, the padding after it dropped).
    media_time, limit = 0, None
    edts = _box(f, start, stop, b"edts")
    elst = edts and _box(f, *edts, b"elst")
    if elst:
        f.seek(elst[0])
        head = f.read(8)
        wide = head[0] == 1
        if int.from_bytes(head[4:8], "big") != 1:
            return None  # several edits, or an empty one before: not this simple
        entry = f.read(20 if wide else 12)
        width = 8 if wide else 4
        duration = int.from_bytes(entry[:width], "big")
        media_time = int.from_bytes(entry[width : 2 * width], "big", signed=True)
        if media_time < 0:
            return None
        if duration:  # in the movie's clock: ffmpeg rescales it to the track's, rounding
            limit = media_time + (duration * sample_rate + movie_scale // 2) // movie_scale
    # The frames: every one that begins before the edit's end is decoded whole, 1024 samples
    # (the last one too, whatever shorter duration the table gives it).
    f.seek(stts[0])
    count = int.from_bytes(f.read(8)[4:8], "big")
    table = f.read(8 * count)
    if len(table) != 8 * count:
        return None
    kept = at = 0
    for i in range(count):
        frames = int.from_bytes(table[8 * i : 8 * i + 4], "big")
        delta = int.from_bytes(table[8 * i + 4 : 8 * i + 8], "big")
        if limit is not None and delta and at + frames * delta > limit:
            kept += -(-(limit - at) // delta)
            break
        kept += frames
        at += frames * delta
    samples = kept * _AAC_FRAME - media_time
    return samples if samples > 0 else None


_AAC_FRAME = 1024  # samples an AAC-LC frame decodes to
# Side information bytes after an MP3 frame's header, where a Xing/Info tag begins:
# [MPEG-1][mono], as ffmpeg's xing_offtbl.
_XING_OFFSET = {(True, False): 32, (True, True): 17, (False, False): 17, (False, True): 9}


def _mp3_samples(f: BinaryIO, head: bytes) -> int | None:
    """The decoded length of an MP3 with a Xing/Info frame count and a LAME-style delay tag."""
    pos = 0
    if head[:3] == b"ID3":  # an ID3v2 tag first: its size is syncsafe, footer flagged
        size = 0
        for b in head[6:10]:
            size = (size << 7) | (b & 0x7F)
        pos = 10 + size + (10 if head[5] & 0x10 else 0)
    f.seek(pos)
    frame = f.read(4 + 32 + 8 + 4 + 4 + 100 + 4 + 9 + 12 + 3)
    if len(frame) < 4 or frame[0] != 0xFF or frame[1] & 0xE0 != 0xE0:
        return None  # not a frame right there: ffmpeg would search; we do not
    version, layer = (frame[1] >> 3) & 3, (frame[1] >> 1) & 3
    if layer != 1 or version == 1:
        return None  # layer III only (version 1 is reserved)
    mpeg1, mono = version == 3, (frame[3] >> 6) == 3
    at = 4 + _XING_OFFSET[(mpeg1, mono)]
    if frame[at : at + 4] not in (b"Xing", b"Info"):
        return None
    flags = int.from_bytes(frame[at + 4 : at + 8], "big")
    at += 8
    if not flags & 1:
        return None  # no frame count
    frames = int.from_bytes(frame[at : at + 4], "big")
    at += 4 + (4 if flags & 2 else 0) + (100 if flags & 4 else 0) + (4 if flags & 8 else 0)
    if frame[at : at + 4] not in (b"LAME", b"Lavf", b"Lavc"):
        return None
    delays = int.from_bytes(frame[at + 21 : at + 24], "big")
    samples = frames * (1152 if mpeg1 else 576) - (delays >> 12) - (delays & 0xFFF)
    return samples if frames and samples > 0 else None


# -- everything the estimator needs, from the header ---------------------------------------------

#: WAV chunks ffmpeg's wav demuxer reads nothing from that could reach an output: skipped.
_WAV_QUIET = (b"fact", b"JUNK", b"junk", b"PEAK", b"bext")
#: (format tag, bits per sample) of a plain WAV -> the codec ffmpeg decodes it with.
_WAV_PCM = {
    (1, 8): "pcm_u8", (1, 16): "pcm_s16le", (1, 24): "pcm_s24le", (1, 32): "pcm_s32le",
    (1, 64): "pcm_s64le", (3, 32): "pcm_f32le", (3, 64): "pcm_f64le",
}  # fmt: skip
#: MPEG-4 audio's sampling frequency index (ISO 14496-3, 1.6.3.4).
_AAC_RATES = (96000, 88200, 64000, 48000, 44100, 32000, 24000, 22050, 16000, 12000, 11025, 8000)


def header_info(path: str) -> MediaInfo | None:
    """What ffprobe would say of ``path`` (:class:`MediaInfo`), read from the header alone, for
    the two kinds of file the pipeline meets most; None for any other file, or when the header
    holds anything we do not read (then ffprobe is asked).

    - A plain WAV: ``RIFF``/``WAVE`` with an integer or float PCM ``fmt `` (not extensible), an
      optional ``LIST``/``INFO`` (its tags, named as ffmpeg names them), only chunks ffmpeg
      takes nothing from (``fact``, ``JUNK``, ``PEAK``, ``bext``), and a ``data`` chunk that
      ends the file: batchalign3's cached WAVs, which every alignment group is cut from.
    - An MP4/M4A/MOV with one AAC-LC audio track (its AudioSpecificConfig plain, or saying "no
      SBR" as ffmpeg's encoder does; its rate the sample entry's and the track's clock), the
      exact decoded length in its header (:func:`container_samples`), and no tags but the
      encoder's ``©too``: what ffmpeg and many converters write. An AAC stream whose SBR
      (HE-AAC) is signalled only in its bitstream cannot be told apart from its header; it
      would need its rate in the container to be the core rate, which muxers do not write.

    The duration is ffprobe's: the samples (WAV) or the movie header's duration (MP4) rounded
    to the microsecond, as ffprobe prints it.
    """
    ext = os.path.splitext(path)[1].lower()
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if ext == ".wav":
                return _wav_info(f, size)
            if ext in _MP4_EXTS:
                return _mp4_info(f, size, path)
    except (OSError, ValueError, IndexError, UnicodeError):
        return None
    return None


def _wav_info(f: BinaryIO, size: int) -> MediaInfo | None:
    head = f.read(12)
    if len(head) < 12 or head[:4] != b"RIFF" or head[8:12] != b"WAVE":
        return None
    fmt: tuple[str, int, int, int] | None = None  # codec, rate, channels, block align
    tags: dict[str, str] = {}
    pos = 12
    while pos + 8 <= size:
        f.seek(pos)
        chunk = f.read(8)
        kind, n = chunk[:4], int.from_bytes(chunk[4:8], "little")
        body = pos + 8
        if kind == b"data":
            # The last chunk, whole: ffmpeg reads chunks past it, and a short file ends early.
            end = body + n
            if fmt is None or not n or end > size or size - end > (n & 1):
                return None
            codec, rate, channels, align = fmt
            frames = n // align
            return MediaInfo(
                _us_of(frames, rate) / 1e6, rate, channels, codec=codec, tags=_riff_only(tags)
            )
        if kind == b"fmt ":
            if fmt is not None:
                return None  # a second format: which one ffmpeg keeps is not ours to guess
            fmt = _wav_format(f.read(min(n, 40)), n)
            if fmt is None:
                return None
        elif kind == b"LIST":
            if n < 4 or f.read(4) != b"INFO" or not _read_info(f, body + 4, body + n, tags):
                return None
        elif kind not in _WAV_QUIET:
            return None
        pos = body + n + (n & 1)
    return None


def _wav_format(fmt: bytes, n: int) -> tuple[str, int, int, int] | None:
    """(codec, rate, channels, block align) of a plain PCM ``fmt `` chunk, else None."""
    if n < 16 or len(fmt) < 16:
        return None
    tag = int.from_bytes(fmt[0:2], "little")
    channels = int.from_bytes(fmt[2:4], "little")
    rate = int.from_bytes(fmt[4:8], "little")
    align = int.from_bytes(fmt[12:14], "little")
    bits = int.from_bytes(fmt[14:16], "little")
    codec = _WAV_PCM.get((tag, bits))
    if codec is None or not channels or not rate or align != channels * bits // 8:
        return None
    return codec, rate, channels, align


def _read_info(f: BinaryIO, start: int, end: int, tags: dict[str, str]) -> bool:
    """The INFO sub-chunks between ``start`` and ``end`` into ``tags`` (ffmpeg keeps a value up
    to its first NUL); False for anything ffmpeg would read otherwise than plainly."""
    pos = start
    while pos + 8 <= end:
        f.seek(pos)
        head = f.read(8)
        key, n = head[:4], int.from_bytes(head[4:8], "little")
        if len(head) < 8 or pos + 8 + n > end or not (key.isascii() and key.isalnum()):
            return False
        value = f.read(n)
        if len(value) != n:
            return False
        tags[generic_tag(key.decode("ascii"))] = value.split(b"\0", 1)[0].decode("utf-8")
        pos += 8 + n + (n & 1)
    return pos >= end - 1


def _riff_only(tags: dict[str, str]) -> dict[str, str]:
    """Only the tags that can reach a WAV header (what the probe keeps of ffprobe's)."""
    return {k: v for k, v in tags.items() if riff_key(k) is not None}


def _us_of(ticks: int, scale: int) -> int:
    """``ticks / scale`` seconds in microseconds, rounded as ffmpeg's av_rescale."""
    return (ticks * 1000000 + scale // 2) // scale


def _mp4_info(f: BinaryIO, size: int, path: str) -> MediaInfo | None:
    f.seek(0)
    if f.read(8)[4:8] != b"ftyp":
        return None
    moov = _box(f, 0, size, b"moov")
    mvhd = moov and _box(f, *moov, b"mvhd")
    if not moov or not mvhd or _box(f, 0, size, b"meta"):
        return None  # (a file-level meta box: tags that ffprobe reads)
    f.seek(mvhd[0])
    body = f.read(32)
    wide = body[0] == 1
    scale = int.from_bytes(body[20:24] if wide else body[12:16], "big")
    length = int.from_bytes(body[24:32] if wide else body[16:20], "big")
    if not scale or not length or length in (0xFFFFFFFF, 0xFFFFFFFFFFFFFFFF):
        return None
    tags = _mp4_tags(f, *moov)
    audio = _mp4_audio(f, *moov)
    if tags is None or audio is None:
        return None
    rate, channels = audio
    samples = container_samples(path, "aac", "LC", rate)
    if samples is None:
        return None
    return MediaInfo(
        _us_of(length, scale) / 1e6,
        rate,
        channels,
        codec="aac",
        profile="LC",
        tags=tags,
        samples=samples,
    )


def _mp4_tags(f: BinaryIO, start: int, end: int) -> dict[str, str] | None:
    """The movie's tags when the only one is the encoder's (``udta/meta/ilst/©too``): {} or
    ``{"encoder": ...}``; None for any other tag, which ffprobe must read."""
    tags: dict[str, str] = {}
    for kind, body, stop in _boxes(f, start, end):
        if kind == b"meta":
            return None  # QuickTime keys (mdta): ffprobe reads them
        if kind != b"udta":
            continue
        for child, cbody, cstop in _boxes(f, body, stop):
            if child != b"meta":
                return None
            f.seek(cbody)
            first = f.read(8)
            inner = cbody if first[4:8] == b"hdlr" else cbody + 4  # QuickTime's, or ISO's
            for item, ibody, istop in _boxes(f, inner, cstop):
                if item == b"ilst":
                    for entry, ebody, estop in _boxes(f, ibody, istop):
                        if entry != b"\xa9too":
                            return None
                        value = _ilst_text(f, ebody, estop)
                        if value is None:
                            return None
                        tags["encoder"] = value
                elif item not in (b"hdlr", b"free"):
                    return None
    return tags


def _ilst_text(f: BinaryIO, start: int, end: int) -> str | None:
    """The UTF-8 text of an ``ilst`` item with one ``data`` box, else None."""
    boxes = list(_boxes(f, start, end))
    if len(boxes) != 1 or boxes[0][0] != b"data":
        return None
    _, body, stop = boxes[0]
    f.seek(body)
    raw = f.read(stop - body)
    if len(raw) < 8 or int.from_bytes(raw[:4], "big") != 1:
        return None
    return raw[8:].decode("utf-8")


def _mp4_audio(f: BinaryIO, start: int, end: int) -> tuple[int, int] | None:
    """(rate, channels) of the movie's one audio track when it is plain AAC-LC, else None."""
    found: tuple[int, int] | None = None
    for kind, body, stop in _boxes(f, start, end):
        if kind != b"trak":
            continue
        mdia = _box(f, body, stop, b"mdia")
        hdlr = mdia and _box(f, *mdia, b"hdlr")
        if not mdia or not hdlr:
            return None
        f.seek(hdlr[0] + 8)
        if f.read(4) != b"soun":
            continue
        if found is not None:
            return None  # several audio tracks: ffmpeg picks one by its own rules
        found = _aac_lc(f, *mdia)
        if found is None:
            return None
    return found


def _aac_lc(f: BinaryIO, start: int, end: int) -> tuple[int, int] | None:
    """(rate, channels) of one audio track's ``mdia`` when its one sample entry is ``mp4a``
    holding an AAC-LC AudioSpecificConfig whose rate is the entry's and ``mdhd``'s."""
    mdhd = _box(f, start, end, b"mdhd")
    minf = _box(f, start, end, b"minf")
    stbl = minf and _box(f, *minf, b"stbl")
    stsd = stbl and _box(f, *stbl, b"stsd")
    if not mdhd or not stsd:
        return None
    f.seek(mdhd[0])
    head = f.read(24)
    clock = int.from_bytes(head[20:24] if head[0] == 1 else head[12:16], "big")
    f.seek(stsd[0])
    if int.from_bytes(f.read(8)[4:8], "big") != 1:
        return None
    entries = list(_boxes(f, stsd[0] + 8, stsd[1]))
    if len(entries) != 1 or entries[0][0] != b"mp4a":
        return None
    _, body, stop = entries[0]
    f.seek(body)
    entry = f.read(28)  # SampleEntry (8) + AudioSampleEntry v0 (20)
    if len(entry) < 28 or int.from_bytes(entry[8:10], "big") != 0:
        return None  # a QuickTime sound description of version 1 or 2: more fields
    entry_rate = int.from_bytes(entry[24:28], "big") >> 16
    esds = _box(f, body + 28, stop, b"esds")
    config = esds and _decoder_config(f, *esds)
    if not config or not _without_sbr(config[2:]):
        return None
    bits = int.from_bytes(config[:2], "big")
    kind, index, channels, tail = bits >> 11, (bits >> 7) & 15, (bits >> 3) & 15, bits & 7
    if kind != 2 or index >= len(_AAC_RATES) or tail or not 1 <= channels <= 6:
        return None  # not LC; an escaped rate; 960-sample frames, a core coder, an extension
    rate = _AAC_RATES[index]
    if rate != clock or rate != entry_rate:
        return None  # the entry's channel count is no help: MP4 muxers write 2 whatever
    return rate, channels


def _without_sbr(extension: bytes) -> bool:
    """Whether what follows an AAC-LC AudioSpecificConfig's first 2 bytes leaves it plain LC:
    nothing (what many encoders write), or the backward-compatible sync extension that says
    "no SBR" (0x2b7, object type 5, flag 0: what ffmpeg's encoder writes)."""
    if not extension:
        return True
    if len(extension) != 3:
        return False
    bits = int.from_bytes(extension, "big")  # 11 + 5 + 1 bits, then 7 bits of padding
    return bits >> 13 == 0x2B7 and (bits >> 8) & 31 == 5 and not bits & 0xFF


def _decoder_config(f: BinaryIO, start: int, end: int) -> bytes | None:
    """The DecoderSpecificInfo of an ``esds`` box for MPEG-4 audio (object type 0x40)."""
    f.seek(start)
    data = f.read(min(end - start, 256))
    pos = 4  # version and flags

    def descriptor(tag: int) -> tuple[int, int] | None:
        nonlocal pos
        if pos >= len(data) or data[pos] != tag:
            return None
        pos += 1
        length = 0
        for _ in range(4):
            if pos >= len(data):
                return None
            byte = data[pos]
            pos += 1
            length = (length << 7) | (byte & 0x7F)
            if not byte & 0x80:
                break
        return pos, pos + length

    if descriptor(0x03) is None:
        return None
    flags = data[pos + 2]
    pos += 3 + (2 if flags & 0x80 else 0) + (2 if flags & 0x20 else 0)
    if flags & 0x40:
        return None  # a URL: not a plain stream
    if descriptor(0x04) is None or data[pos] != 0x40:
        return None
    pos += 13
    info = descriptor(0x05)
    if info is None or info[1] > len(data):
        return None
    return data[info[0] : info[1]]
