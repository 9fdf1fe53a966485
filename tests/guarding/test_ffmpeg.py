"""The ffmpeg estimator (``janitor.guarding.ffmpeg``) against the real ffmpeg 5.x and ffprobe.

Every estimate is compared with the size of the file the real ffmpeg then writes from the same
argument list; the brief's three command lines must be exact or within 1 %. Skipped with the
reason where ffmpeg or ffprobe is absent.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from janitor.guarding import ffmpeg
from tests._fixtures.media import MediaStore

FFMPEG = shutil.which("ffmpeg")
FFPROBE = shutil.which("ffprobe")
needs_ffmpeg = pytest.mark.skipif(
    FFMPEG is None or FFPROBE is None, reason="ffmpeg and ffprobe are not on PATH"
)


def _tone(seconds: float, *extra: str, rate: int = 44100, channels: int = 2) -> list[str]:
    """ffmpeg's arguments, but the output, for ``seconds`` of sine with ``extra`` options."""
    layout = "stereo" if channels == 2 else "mono"
    return ["-f", "lavfi", "-i", f"sine=frequency=440:sample_rate={rate}:duration={seconds}",
            "-af", f"aformat=channel_layouts={layout}", *extra]  # fmt: skip


def _make(path: Path, seconds: float, *extra: str, rate: int = 44100, channels: int = 2) -> Path:
    """A real media file of ``seconds`` of sine made by ffmpeg (container from the suffix)."""
    assert FFMPEG is not None
    subprocess.run(
        [FFMPEG, "-v", "error", "-y", *_tone(seconds, *extra, rate=rate, channels=channels),
         str(path)],
        check=True,
    )  # fmt: skip
    return path


def _run(args: list[str], cwd: Path) -> None:
    assert FFMPEG is not None
    subprocess.run([FFMPEG, "-v", "error", *args], check=True, cwd=cwd)


def _estimate(args: list[str], cwd: Path, cache: Path | None = None) -> list[ffmpeg.OutputEstimate]:
    probe = ffmpeg.Probe(cache, ffprobe=FFPROBE)
    here = os.getcwd()
    os.chdir(cwd)
    try:
        est = ffmpeg.estimate(ffmpeg.parse(args), probe.duration_of)
    finally:
        os.chdir(here)
    assert not isinstance(est, ffmpeg.NotEstimable), est
    return est


@pytest.fixture
def media(tmp_path: Path, media_store: MediaStore) -> Callable[..., Path]:
    """``media(name, seconds, *extra, rate=, channels=)``: ``tmp_path/name``, a copy of the
    file ``_make`` makes, made once for the run (tests._fixtures.media)."""

    def make(name: str, seconds: float, *extra: str, **kw: int) -> Path:
        args = _tone(seconds, *extra, **kw)
        made = media_store.make(f"tone-{_digest(args)}{Path(name).suffix}", *args)
        shutil.copyfile(made, tmp_path / name)
        return tmp_path / name

    return make


def _digest(args: list[str]) -> str:
    return hashlib.sha256("\0".join(args).encode()).hexdigest()[:16]


# -- the brief's command lines, exactly --------------------------------------------------------


@needs_ffmpeg
@pytest.mark.parametrize("source", ["talk.m4a", "talk.mp4", "talk.webm", "talk.wma"])
def test_the_media_cache_conversion_is_estimated_within_one_percent(
    tmp_path: Path, media: Callable[..., Path], source: str
) -> None:
    media(source, 7.3)
    args = ["-y", "-i", source, "-acodec", "pcm_s16le", "-ar", "16000", "-ac", "1",
            "fp.tmp.wav"]  # fmt: skip
    (est,) = _estimate(args, tmp_path)
    _run(args, tmp_path)
    actual = (tmp_path / "fp.tmp.wav").stat().st_size
    assert est.path == "fp.tmp.wav"
    assert abs(est.bytes - actual) <= actual * 0.01, (est.bytes, actual)
    assert est.bytes >= actual  # never under: the guard reserves this much
    if source.endswith((".m4a", ".mp4")):  # AAC in MP4: the decoded length is in the header
        assert est.bytes == actual


@needs_ffmpeg
def test_a_wav_conversion_is_exact_header_included(
    tmp_path: Path, media: Callable[..., Path]
) -> None:
    media("talk.wav", 5.0)
    args = ["-y", "-i", "talk.wav", "-acodec", "pcm_s16le", "-ar", "16000", "-ac", "1", "o.wav"]
    (est,) = _estimate(args, tmp_path)
    _run(args, tmp_path)
    assert est.bytes == (tmp_path / "o.wav").stat().st_size == 5 * 32000 + est.header_bytes


@needs_ffmpeg
@pytest.mark.parametrize(("start", "end"), [("1.250", "4.750"), ("0.000", "0.333"), ("2.5", "9.9")])
def test_a_forced_alignment_group_cut_is_exact(
    tmp_path: Path, media: Callable[..., Path], start: str, end: str
) -> None:
    media("cached.wav", 8.0, "-acodec", "pcm_s16le", "-ar", "16000", "-ac", "1", channels=1)
    (tmp_path / "fa_v2" / "audio").mkdir(parents=True)
    out = "fa_v2/audio/fa-v2-audio-3.pcm"
    args = ["-y", "-ss", start, "-to", end, "-i", "cached.wav", "-f", "f32le",
            "-acodec", "pcm_f32le", "-ar", "16000", "-ac", "1", out]  # fmt: skip
    (est,) = _estimate(args, tmp_path)
    _run(args, tmp_path)
    assert est.bytes == (tmp_path / out).stat().st_size
    assert est.bytes == round((min(float(end), 8.0) - float(start)) * 16000) * 4


@needs_ffmpeg
@pytest.mark.parametrize("source", ["talk.wav", "talk.mp3", "talk.flac", "talk.ogg", "talk.m4a"])
def test_a_whole_file_pcm_is_exact(tmp_path: Path, media: Callable[..., Path], source: str) -> None:
    media(source, 6.0)
    args = ["-y", "-i", source, "-f", "f32le", "-acodec", "pcm_f32le", "-ar", "16000", "-ac",
            "1", "whole.pcm"]  # fmt: skip
    (est,) = _estimate(args, tmp_path)
    _run(args, tmp_path)
    # These five decode to a length ffprobe or their header states (within 1 % before).
    assert est.bytes == (tmp_path / "whole.pcm").stat().st_size


# -- UTR segments into the media cache (issue 23, item 3) --------------------------------------

#: batchalign3's UTR spans (S.SSS), on a 10.000 s source: inside it, 10 ms long, and two that
#: end past its end (ffmpeg then writes what the source has from -ss on). Spans shorter than
#: the resampler's filter (about 2 ms) come out shorter still: estimated high, not exactly.
UTR_SPANS = [("1.234", "7.891"), ("0.000", "0.010"), ("4.567", "4.999"), ("2.500", "9.250"),
             ("8.250", "12.345"), ("9.990", "60.000")]  # fmt: skip


def _utr(start: str, end: str, source: str, out: str) -> list[str]:
    """batchalign3's UTR audio segment command, exactly (without ``ffmpeg``)."""
    return ["-y", "-ss", start, "-to", end, "-i", source, "-acodec", "pcm_s16le", "-ar", "16000",
            "-ac", "1", out]  # fmt: skip


TAGS = ["-metadata", "title=Session 12, child and parent", "-metadata", "artist=Lab 3"]


@needs_ffmpeg
@pytest.mark.parametrize(
    ("source", "rate", "channels", "extra"),
    [
        ("talk.m4a", 44100, 2, []),  # AAC in MP4: whole 1024-sample frames past the end
        ("talk.mp3", 44100, 2, []),  # MP3: ffprobe's duration counts the encoder's padding
        ("talk.wav", 44100, 2, []),
        ("talk.mp4", 48000, 1, []),
        ("talk.flac", 22050, 1, []),  # 22,050 to 16,000 Hz: ffmpeg's resampler rounds up
        ("cached.wav", 16000, 1, []),  # no resampling
        ("tagged.m4a", 44100, 1, TAGS),  # title and artist reach the WAV's LIST/INFO chunk
    ],
    ids=lambda v: v if isinstance(v, str) else None,
)
def test_a_utr_segment_into_the_media_cache_is_exact(
    tmp_path: Path,
    media: Callable[..., Path],
    source: str,
    rate: int,
    channels: int,
    extra: list[str],
) -> None:
    """The estimate the guard reserves (and ``POST /v1/estimate`` answers) for each UTR
    segment equals the bytes ffmpeg writes, header included, spans past the source's end
    too; a second estimate, read back from the probe cache, is the same."""
    media(source, 10.0, *extra, rate=rate, channels=channels)
    (tmp_path / "cache").mkdir()
    cache = tmp_path / "probes"
    got = []
    for n, (start, end) in enumerate(UTR_SPANS):
        out = f"cache/0123456789abcdef{n:08d}.tmp.wav"
        args = _utr(start, end, source, out)
        fresh = ffmpeg.estimate_command(args, cwd=str(tmp_path), probe=ffmpeg.Probe(cache))
        cached = ffmpeg.estimate_command(args, cwd=str(tmp_path), probe=ffmpeg.Probe(cache))
        assert not isinstance(fresh, ffmpeg.NotEstimable), fresh
        assert fresh == cached
        _run(args, tmp_path)
        got.append((start, end, fresh[0].bytes, os.path.getsize(tmp_path / out)))
    assert [(s, e, est) for s, e, est, _ in got] == [(s, e, size) for s, e, _, size in got], got
    if extra:  # 6.657 s x 32,000 B/s, and a header longer than the plain 78 bytes: the tags
        assert got[0][3] - 6657 * 32 > ffmpeg.wav_header_bytes("pcm_s16le", 16000, 1) == 78


#: Spans to the microsecond: ffmpeg rounds each to whole samples of the source, then its
#: resampler makes them 16 kHz samples.
FINE_SPANS = [("0.000013", "0.731249"), ("1.234567", "2.345678"), ("2.000031", "2.010094"),
              ("3.141593", "5.718282"), ("4.999999", "6.000001"), ("5.123457", "5.654321"),
              ("6.802734", "9.417969"), ("7.777777", "8.888888"), ("9.000001", "12.5")]  # fmt: skip


@needs_ffmpeg
@pytest.mark.parametrize(
    ("source", "rate", "exact"),
    [
        ("same.wav", 16000, True),  # no resampling: round(span x rate)
        ("cd.wav", 44100, True),
        ("dvd.m4a", 48000, True),
        ("half.wav", 22050, False),  # at most one 16 kHz sample over, never under
    ],
)
def test_cuts_round_to_whole_samples_as_ffmpeg_does(
    tmp_path: Path, media: Callable[..., Path], source: str, rate: int, exact: bool
) -> None:
    media(source, 10.0, rate=rate, channels=1)
    got = []
    for start, end in FINE_SPANS:
        args = _utr(start, end, source, "seg.wav")
        (est,) = _estimate(args, tmp_path)
        _run(args, tmp_path)
        got.append((start, end, est.bytes - (tmp_path / "seg.wav").stat().st_size))
    if exact:
        assert all(d == 0 for _, _, d in got), got
    else:
        assert all(0 <= d <= 2 for _, _, d in got), got


# -- the same arithmetic for other rates, channels and PCM codecs -----------------------------


@needs_ffmpeg
@pytest.mark.parametrize(
    "out_args",
    [
        ["-acodec", "pcm_s24le", "-ar", "8000", "-ac", "2", "o.wav"],
        ["-acodec", "pcm_f32le", "-ar", "22050", "-ac", "1", "o.wav"],
        ["-acodec", "pcm_s16le", "-ar", "96000", "-ac", "2", "o.wav"],
        ["-acodec", "pcm_u8", "-ac", "6", "o.wav"],
        ["-acodec", "pcm_mulaw", "-ar", "8000", "o.wav"],
        ["-f", "s16le", "-ar", "48000", "o.raw"],
        ["-f", "s32be", "-ac", "2", "o.raw"],
        ["-t", "1.5", "-f", "f64le", "o.raw"],
        ["-bitexact", "-acodec", "pcm_s16le", "o.wav"],
        ["o.wav"],
    ],
    ids=lambda a: " ".join(a),
)
def test_other_rates_channels_and_pcm_codecs_are_exact(
    tmp_path: Path, media: Callable[..., Path], out_args: list[str]
) -> None:
    media("in.wav", 3.0)
    args = ["-y", "-i", "in.wav", *out_args]
    (est,) = _estimate(args, tmp_path)
    _run(args, tmp_path)
    assert est.bytes == (tmp_path / out_args[-1]).stat().st_size


@needs_ffmpeg
def test_two_outputs_are_estimated_each(tmp_path: Path, media: Callable[..., Path]) -> None:
    media("in.wav", 2.0)
    args = ["-y", "-i", "in.wav", "-ar", "16000", "-ac", "1", "a.wav",
            "-f", "f32le", "-ar", "16000", "-ac", "1", "b.pcm"]  # fmt: skip
    est = _estimate(args, tmp_path)
    _run(args, tmp_path)
    assert [(e.path, e.bytes) for e in est] == [
        ("a.wav", (tmp_path / "a.wav").stat().st_size),
        ("b.pcm", (tmp_path / "b.pcm").stat().st_size),
    ]


# -- what it cannot estimate -------------------------------------------------------------------


@pytest.mark.parametrize(
    "args",
    [
        ["-version"],
        ["-hide_banner", "-encoders"],
        ["-i", "in.wav"],
        [],
        ["-i", "in.wav", "-f", "null", "-"],
        ["-i", "in.wav", "-f", "s16le", "-"],
        ["-i", "in.wav", "-f", "s16le", "pipe:1"],
        ["-i", "in.mp4", "-c:v", "libx264", "out.mp4"],
        ["-i", "in.wav", "out.mp3"],
        ["-i", "in.wav", "-acodec", "aac", "out.m4a"],
        ["-i", "in.wav", "-af", "atempo=2", "out.wav"],
        ["-i", "in.wav", "--frobnicate", "out.wav"],
        ["-i", "in.wav", "out.pcm"],
        ["-i", "http://example.com/a.wav", "out.wav"],
        ["-i", "in.wav", "out.wav", "-ar", "8000"],
    ],
    ids=lambda a: " ".join(a) or "(none)",
)
def test_what_it_cannot_be_sure_of_is_not_estimable(tmp_path: Path, args: list[str]) -> None:
    wav = _make(tmp_path / "in.wav", 1.0) if FFMPEG else tmp_path / "in.wav"
    wav.touch()

    def info(path: str) -> ffmpeg.MediaInfo | ffmpeg.NotEstimable:
        if not os.path.exists(os.path.join(tmp_path, path)) and "://" not in path:
            return ffmpeg.NotEstimable("no such input")
        return ffmpeg.MediaInfo(1.0, 44100, 2)

    here = os.getcwd()
    os.chdir(tmp_path)
    try:
        est = ffmpeg.estimate(ffmpeg.parse(args), info)
    finally:
        os.chdir(here)
    assert isinstance(est, ffmpeg.NotEstimable)
    assert est.reason


def test_input_files_are_the_local_inputs() -> None:
    inv = ffmpeg.parse(["-y", "-i", "a.wav", "-i", "pipe:0", "-i", "file:b.wav", "-map", "0",
                        "o.wav"])  # fmt: skip
    assert ffmpeg.input_files(inv) == ["a.wav", "b.wav"]


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("1.5", 1.5), ("00:01:02.250", 62.25), ("1:02", 62.0), ("750ms", 0.75), ("-2", -2.0)],
)
def test_times_read_the_way_ffmpeg_reads_them(text: str, seconds: float) -> None:
    assert ffmpeg.parse_time(text) == pytest.approx(seconds)


# -- the probe cache ---------------------------------------------------------------------------


@needs_ffmpeg
def test_an_input_is_probed_once_across_processes_and_again_when_it_changes(
    tmp_path: Path, media: Callable[..., Path]
) -> None:
    wav = media("rec.flac", 4.0)  # a FLAC: its header is not read, ffprobe is
    cache = tmp_path / "probes"
    first = ffmpeg.Probe(cache, ffprobe=FFPROBE)
    info = first.duration_of(str(wav))
    assert isinstance(info, ffmpeg.MediaInfo)
    assert info.duration_s == pytest.approx(4.0, abs=0.01)
    assert first.duration_of(str(wav)) == info
    assert first.probes_run == 1
    second = ffmpeg.Probe(cache, ffprobe=FFPROBE)  # a new process: the file cache answers
    assert second.duration_of(str(wav)) == info
    assert second.probes_run == 0

    media("rec.flac", 2.0)  # the same name, rewritten: a new key, probed again
    third = ffmpeg.Probe(cache, ffprobe=FFPROBE)
    again = third.duration_of(str(wav))
    assert isinstance(again, ffmpeg.MediaInfo)
    assert again.duration_s == pytest.approx(2.0, abs=0.01)
    assert third.probes_run == 1


@needs_ffmpeg
def test_a_corrupt_cache_entry_is_ignored_and_rewritten(
    tmp_path: Path, media: Callable[..., Path]
) -> None:
    wav = media("rec.flac", 1.0)
    cache = tmp_path / "probes"
    ffmpeg.Probe(cache, ffprobe=FFPROBE).duration_of(str(wav))
    (entry,) = cache.iterdir()
    entry.write_text("garbage")
    probe = ffmpeg.Probe(cache, ffprobe=FFPROBE)
    info = probe.duration_of(str(wav))
    assert isinstance(info, ffmpeg.MediaInfo)
    assert probe.probes_run == 1
    assert entry.read_text() != "garbage"


@needs_ffmpeg
def test_a_cache_entry_of_an_older_version_is_probed_again(
    tmp_path: Path, media: Callable[..., Path]
) -> None:
    """Entries written before the decoded length was kept would estimate an m4a's end high."""
    m4a = media("talk.m4a", 3.0, "-metadata", "title=T")  # a tag: ffprobe reads it, not we
    cache = tmp_path / "probes"
    info = ffmpeg.Probe(cache, ffprobe=FFPROBE).duration_of(str(m4a))
    assert isinstance(info, ffmpeg.MediaInfo) and info.samples is not None
    (entry,) = cache.iterdir()
    old = [ln for ln in entry.read_text().splitlines() if not ln.startswith("samples ")]
    entry.write_text("\n".join(["janitor-probe 1", *old[1:]]) + "\n")
    probe = ffmpeg.Probe(cache, ffprobe=FFPROBE)
    assert probe.duration_of(str(m4a)) == info
    assert probe.probes_run == 1
    assert entry.read_text().startswith("janitor-probe 2\n")


def _decoded(path: Path) -> int:
    """Samples per channel the real ffmpeg decodes from ``path`` (as mono s16le)."""
    assert FFMPEG is not None
    out = subprocess.run([FFMPEG, "-v", "error", "-i", str(path), "-ac", "1", "-f", "s16le", "-"],
                         capture_output=True, check=True).stdout  # fmt: skip
    return len(out) // 2


@needs_ffmpeg
@pytest.mark.parametrize(
    ("name", "seconds", "rate", "extra"),
    [
        ("a.m4a", 10.0, 44100, []),
        ("b.mp4", 61.7, 48000, ["-movflags", "+faststart"]),
        ("c.mov", 1.0, 22050, []),
        ("d.mp3", 10.0, 44100, []),
        ("e.mp3", 7.25, 16000, []),  # MPEG-2: 576 samples a frame
        ("f.mp3", 3.0, 44100, ["-write_id3v2", "1", "-metadata", "title=" + "t" * 300]),
    ],
)
def test_container_samples_are_what_ffmpeg_decodes(
    media: Callable[..., Path], name: str, seconds: float, rate: int, extra: list[str]
) -> None:
    path = media(name, seconds, *extra, rate=rate)
    codec = "mp3" if name.endswith(".mp3") else "aac"
    got = ffmpeg.container_samples(str(path), codec, "" if codec == "mp3" else "LC", rate)
    assert got == _decoded(path)
    assert got != round(_ffprobe_duration(path) * rate)  # ffprobe's duration does not say it


@needs_ffmpeg
def test_container_samples_say_none_when_the_header_does_not_say(
    media: Callable[..., Path], tmp_path: Path
) -> None:
    frag = media("f.mp4", 5, "-c:a", "aac", "-movflags", "frag_keyframe+empty_moov")
    assert ffmpeg.container_samples(str(frag), "aac", "LC", 44100) is None
    bare = media("x.mp3", 5, "-write_xing", "0")  # no Xing/LAME frame: no count, no delays
    assert ffmpeg.container_samples(str(bare), "mp3", "", 44100) is None
    m4a = media("a.m4a", 5)
    assert ffmpeg.container_samples(str(m4a), "aac", "LC", 22050) is None  # another clock
    assert ffmpeg.container_samples(str(m4a), "aac", "HE-AAC", 44100) is None
    (tmp_path / "cut.m4a").write_bytes(m4a.read_bytes()[:600])
    assert ffmpeg.container_samples(str(tmp_path / "cut.m4a"), "aac", "LC", 44100) is None
    assert ffmpeg.container_samples(str(tmp_path / "missing.mp3"), "mp3", "", 44100) is None
    wav = media("w.wav", 1)
    assert ffmpeg.container_samples(str(wav), "pcm_s16le", "", 44100) is None


def test_an_unreadable_input_is_not_estimable(tmp_path: Path) -> None:
    probe = ffmpeg.Probe(None, ffprobe=FFPROBE or "/bin/false")
    assert isinstance(probe.duration_of(str(tmp_path / "absent.wav")), ffmpeg.NotEstimable)


# -- durations from container headers (the pre-flight's fast path) -------------------------------


def _ffprobe_duration(path: Path) -> float:
    assert FFPROBE is not None
    out = subprocess.run(
        [FFPROBE, "-v", "error", "-show_entries", "format=duration", "-of", "csv=p=0", str(path)],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    return float(out.stdout)


@needs_ffmpeg
@pytest.mark.parametrize(
    ("name", "extra"),
    [
        ("a.m4a", ["-c:a", "aac"]),
        ("a.mp4", ["-c:a", "aac", "-movflags", "+faststart"]),  # moov before mdat
        ("a.mov", ["-c:a", "aac"]),
        ("a.wav", ["-ar", "16000", "-ac", "1"]),
        ("b.wav", ["-c:a", "pcm_f32le"]),
    ],
)
def test_container_duration_agrees_with_ffprobe(
    media: Callable[..., Path], name: str, extra: list[str]
) -> None:
    path = media(name, 61.7, *extra)
    got = ffmpeg.container_duration(str(path))
    assert got is not None
    assert abs(got - _ffprobe_duration(path)) <= 0.01 * 61.7, (got, _ffprobe_duration(path))


@needs_ffmpeg
def test_container_duration_says_none_when_the_header_does_not_say(
    media: Callable[..., Path], tmp_path: Path
) -> None:
    frag = media("f.mp4", 5, "-c:a", "aac", "-movflags", "frag_keyframe+empty_moov")
    assert ffmpeg.container_duration(str(frag)) is None  # fragmented: ffprobe must read it
    assert ffmpeg.container_duration(str(media("a.mp3", 5))) is None  # not a container we read
    whole = media("t.m4a", 5, "-c:a", "aac").read_bytes()
    (tmp_path / "cut.m4a").write_bytes(whole[: len(whole) // 3])  # moov at the end, cut off
    assert ffmpeg.container_duration(str(tmp_path / "cut.m4a")) is None
    (tmp_path / "junk.wav").write_bytes(b"RIFF\x00\x00\x00\x00WAVEjunk")
    assert ffmpeg.container_duration(str(tmp_path / "junk.wav")) is None
    assert ffmpeg.container_duration(str(tmp_path / "missing.wav")) is None


# -- everything from the header: plain WAVs and AAC-LC M4As need no ffprobe ---------------------


TAGGED = ("-metadata", "title=Hi there", "-metadata", "ITRK=5", "-metadata", "IKEY=kw")
BARE = ("-map_metadata", "-1", "-fflags", "+bitexact")  # not even the encoder's tag


def _ffprobe_info(path: Path) -> ffmpeg.MediaInfo | ffmpeg.NotEstimable:
    """What the probe makes of ffprobe's answer for ``path`` (a copy under a name whose header
    the probe does not read, so ffprobe answers)."""
    copy = path.with_name(path.name + ".bin")
    shutil.copyfile(path, copy)
    probe = ffmpeg.Probe(None, ffprobe=FFPROBE)
    info = probe.duration_of(str(copy))
    assert probe.probes_run == 1
    return info


@needs_ffmpeg
@pytest.mark.parametrize(
    ("name", "extra", "channels"),
    [
        ("cached.wav", ["-ar", "16000"], 1),  # batchalign3's cached WAV, cut group by group
        ("tags.wav", [*TAGGED], 2),
        ("u8.wav", ["-c:a", "pcm_u8", "-bitexact", "-ar", "22050"], 1),
        ("talk.m4a", ["-c:a", "aac"], 1),
        ("talk16k.m4a", ["-ar", "16000", "-c:a", "aac", "-b:a", "24k"], 1),
        ("film.mp4", ["-ar", "48000", "-c:a", "aac", "-movflags", "+faststart"], 2),
        ("bare.m4a", ["-ar", "22050", "-c:a", "aac", *BARE], 1),
        ("six.m4a", ["-c:a", "aac"], 6),
    ],
)
def test_the_header_says_what_ffprobe_says(
    media: Callable[..., Path], name: str, extra: list[str], channels: int
) -> None:
    path = media(name, 7.3, *extra, channels=channels)
    info = ffmpeg.header_info(str(path))
    assert info is not None
    assert info == _ffprobe_info(path)


@needs_ffmpeg
def test_the_header_says_nothing_where_ffprobe_must_read(
    media: Callable[..., Path], tmp_path: Path
) -> None:
    unread = [
        media("s24.wav", 2, "-c:a", "pcm_s24le"),  # WAVE_FORMAT_EXTENSIBLE
        media("titled.m4a", 2, "-c:a", "aac", "-metadata", "title=T"),  # a tag ffprobe reads
        media("frag.mp4", 2, "-c:a", "aac", "-movflags", "frag_keyframe+empty_moov"),
        media("song.mp3", 2),
        media("q.mov", 2, "-c:a", "aac"),  # a QuickTime sound description of version 1
    ]
    wav = media("w.wav", 2, "-ar", "16000")
    whole = wav.read_bytes()
    (tmp_path / "cut.wav").write_bytes(whole[: len(whole) - 100])  # shorter than its data
    info = b"LIST\x10\x00\x00\x00INFOINAM\x02\x00\x00\x00T\x00"  # a title after the data
    (tmp_path / "after.wav").write_bytes(whole + info)
    (tmp_path / "junk.m4a").write_bytes(b"\x00\x00\x00\x18ftypM4A " + os.urandom(4096))
    unread += [tmp_path / "cut.wav", tmp_path / "after.wav", tmp_path / "junk.m4a"]
    for path in unread:
        assert ffmpeg.header_info(str(path)) is None, path
    assert isinstance(_ffprobe_info(tmp_path / "after.wav"), ffmpeg.MediaInfo)


@needs_ffmpeg
def test_the_probe_reads_a_plain_header_without_ffprobe_or_cache(
    media: Callable[..., Path], tmp_path: Path
) -> None:
    cache = tmp_path / "probes"
    for path in (media("c.wav", 3, "-ar", "16000"), media("t.m4a", 3, "-c:a", "aac")):
        probe = ffmpeg.Probe(cache, ffprobe="/nonexistent/ffprobe")
        info = probe.duration_of(str(path))
        assert isinstance(info, ffmpeg.MediaInfo), info
        assert probe.probes_run == 0
        assert probe.cached(str(path)) == info
    assert not cache.exists()  # nothing to remember: the header is read again, as cheaply


def test_one_function_names_the_probe_caches_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``$JANITOR_CACHE_DIR``, else the folder ``shim install`` gave the guard, else the user
    cache folder: ``probes`` in it, for the guard, the daemon, the CLI and the pre-flight."""
    default = ffmpeg.probe_cache_dir()
    assert default == os.path.join(os.environ["XDG_CACHE_HOME"], "space-janitor", "probes")
    assert ffmpeg.probe_cache_dir(tmp_path / "given") == str(tmp_path / "given" / "probes")
    monkeypatch.setenv("JANITOR_CACHE_DIR", str(tmp_path / "env"))
    assert ffmpeg.probe_cache_dir(tmp_path / "given") == str(tmp_path / "env" / "probes")
    assert ffmpeg.probe_cache_dir() == str(tmp_path / "env" / "probes")
