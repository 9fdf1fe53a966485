"""Size estimates: ``janitor.commands.estimate.pcm_bytes`` and the real ``janitor estimate``
command.

The media is made by the real ffmpeg (lavfi sine), the duration read by the real ffprobe, and the
estimate is compared with the size of the file the real ffmpeg then writes. Tests that need
ffmpeg/ffprobe are skipped with the reason where they are absent.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from janitor.commands.estimate import WAV_HEADER_BYTES, pcm_bytes
from janitor.errors import ConfigError
from janitor.guarding.ffmpeg import wav_header_bytes
from tests._fixtures.console import JANITOR_BIN, one_line_error
from tests._fixtures.media import AAC_FAST, MediaStore, tone

Cli = Callable[..., subprocess.CompletedProcess[str]]

needs_ffmpeg = pytest.mark.skipif(
    shutil.which("ffmpeg") is None or shutil.which("ffprobe") is None,
    reason="ffmpeg/ffprobe not installed (Debian package ffmpeg; .ci/run installs it)",
)

TAGS = ("-metadata", "title=A session", "-metadata", "comment=" + "notes " * 500)
ESTIMATE_KEYS = {"media", "duration_s", "format", "rate", "channels", "sample_width", "bytes"}


def ffmpeg(*args: str) -> None:
    """Run the real ffmpeg quietly; fail the test with its stderr if it fails."""
    done = subprocess.run(
        ["ffmpeg", "-nostdin", "-hide_banner", "-loglevel", "error", "-y", *args],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr


def sine(out: Path, seconds: int, *extra: str) -> Path:
    """A lavfi sine tone of ``seconds`` encoded to ``out`` with ``extra`` output options."""
    ffmpeg("-f", "lavfi", "-i", f"sine=frequency=440:duration={seconds}", *extra, str(out))
    return out


@pytest.fixture(scope="module")
def media(media_store: MediaStore) -> dict[str, Path]:
    """Inputs made once for the run: a 120 s mono mp3 at 32k, exact-length flac and wav, and a
    short mp3 with tags."""
    if shutil.which("ffmpeg") is None or shutil.which("ffprobe") is None:
        pytest.skip("ffmpeg/ffprobe not installed (Debian package ffmpeg; .ci/run installs it)")

    def sine_in_store(name: str, seconds: int, *extra: str) -> Path:  # sine()'s, made once
        return media_store.make(name, *tone(seconds), *extra)

    return {
        "mp3-120s": sine_in_store("tone-120s-32k.mp3", 120, "-ac", "1", "-b:a", "32k"),
        "flac-10s-44k": sine_in_store(
            "tone-10s-44k.flac", 10, "-ac", "1", "-ar", "44100", "-c:a", "flac"
        ),
        "wav-10s-16k": sine_in_store(
            "tone-10s-16k.wav", 10, "-ac", "1", "-ar", "16000", "-c:a", "pcm_s16le"
        ),
        # tags (title, a long comment) that ffmpeg copies into the WAV's LIST/INFO chunk
        "mp3-10s-tagged": sine_in_store(
            "tone-10s-32k-tagged.mp3", 10, "-ac", "1", "-b:a", "32k", *TAGS
        ),
    }


# -- pcm_bytes --------------------------------------------------------------------------------


def test_pcm_bytes_for_one_hour() -> None:
    assert pcm_bytes(3600) == 115_200_000  # 16 kHz mono 16-bit: the media cache's WAV data
    assert pcm_bytes(3600, 16000, 1, 2) == 115_200_000
    assert pcm_bytes(3600, sample_width=4) == 230_400_000  # float32 windows of the aligners
    assert pcm_bytes(3600, 16000, 1, 4) == 230_400_000


def test_pcm_bytes_other_shapes() -> None:
    assert pcm_bytes(0) == 0
    assert pcm_bytes(1) == 32_000
    assert pcm_bytes(1, 44100, 2, 2) == 176_400
    assert pcm_bytes(2.5, 8000, 1, 2) == 40_000
    # A partial frame still costs a whole frame: never under-reserve.
    assert pcm_bytes(1 / 32000) == 2
    assert pcm_bytes(1.00001) == 32_002


@pytest.mark.parametrize(
    "args", [(-1.0,), (1.0, 0), (1.0, 16000, 0), (1.0, 16000, 1, 0), (1.0, -16000)]
)
def test_pcm_bytes_rejects_impossible_shapes(args: tuple[float, ...]) -> None:
    with pytest.raises(ConfigError):
        pcm_bytes(*args)  # type: ignore[arg-type]


# -- janitor estimate -------------------------------------------------------------------------


@needs_ffmpeg
def test_estimate_prints_bytes_on_stdout(media: dict[str, Path], run_cli: Cli) -> None:
    done = run_cli("estimate", media["mp3-120s"])
    assert done.returncode == 0, done.stderr
    nbytes = int(done.stdout.strip())  # nothing but the number, so `$(janitor estimate f)` works
    assert done.stdout == f"{nbytes}\n"
    # 120 s (plus the mp3's encoder padding) at 32,000 B/s and a header
    assert 120 * 32_000 + WAV_HEADER_BYTES <= nbytes <= 121 * 32_000 + 4096
    assert "Traceback" not in done.stderr
    assert "MiB" in done.stderr  # the human-readable size goes to stderr


@needs_ffmpeg
def test_estimate_json_shape(media: dict[str, Path], run_cli: Cli) -> None:
    src = media["mp3-120s"]
    done = run_cli("estimate", src, "--json")
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert set(data) == ESTIMATE_KEYS
    assert data["media"] == str(src)
    assert isinstance(data["duration_s"], float) and 119.9 < data["duration_s"] < 121
    assert data["format"] == "wav16"
    assert (data["rate"], data["channels"], data["sample_width"]) == (16000, 1, 2)
    assert isinstance(data["bytes"], int)
    # the samples the decoder gives (the mp3's encoder delay and padding left out: a little
    # under ffprobe's duration) plus ffmpeg's header (78 bytes: no tags on this mp3)
    header = wav_header_bytes("pcm_s16le", 16000, 1)
    frames = (data["bytes"] - header) // 2
    assert pcm_bytes(data["duration_s"]) - 2 * 1152 <= 2 * frames <= pcm_bytes(data["duration_s"])
    # the plain output and the JSON agree
    assert int(run_cli("estimate", src).stdout) == data["bytes"]

    f32 = json.loads(run_cli("estimate", src, "--json", "--format", "f32").stdout)
    assert set(f32) == ESTIMATE_KEYS
    assert (f32["format"], f32["sample_width"]) == ("f32", 4)
    assert f32["bytes"] == 4 * frames  # raw PCM: the same samples, 4 bytes each, no header

    st = json.loads(run_cli("estimate", src, "--json", "--rate", "8000", "--channels", "2").stdout)
    assert (st["rate"], st["channels"]) == (8000, 2)
    st_frames = (st["bytes"] - wav_header_bytes("pcm_s16le", 8000, 2)) / 4
    assert abs(st_frames - frames / 2) <= 1


@needs_ffmpeg
@pytest.mark.parametrize("name", ["mp3-120s", "flac-10s-44k", "wav-10s-16k", "mp3-10s-tagged"])
def test_estimate_covers_the_wav_ffmpeg_writes(
    media: dict[str, Path], run_cli: Cli, tmp_path: Path, name: str
) -> None:
    """The estimate is what the converter writes, to the byte (the header's tags included)."""
    src = media[name]
    done = run_cli("estimate", src)
    assert done.returncode == 0, done.stderr
    estimate = int(done.stdout)
    out = tmp_path / "out.wav"
    # exactly the pipeline's conversion (and examples/convert.sh's)
    ffmpeg("-i", str(src), "-ac", "1", "-ar", "16000", "-c:a", "pcm_s16le", str(out))
    actual = out.stat().st_size
    assert estimate == actual, f"estimate {estimate} B, the WAV ffmpeg wrote {actual} B"


@needs_ffmpeg
@pytest.mark.parametrize(
    ("opts", "ffmpeg_out"),
    [
        (("--format", "f32"), ("-ac", "1", "-ar", "16000", "-f", "f32le", "-c:a", "pcm_f32le")),
        (("--rate", "8000", "--channels", "2"), ("-ac", "2", "-ar", "8000", "-c:a", "pcm_s16le")),
    ],
)
def test_estimate_covers_other_formats(
    media: dict[str, Path],
    run_cli: Cli,
    tmp_path: Path,
    opts: tuple[str, ...],
    ffmpeg_out: tuple[str, ...],
) -> None:
    src = media["mp3-120s"]
    done = run_cli("estimate", src, *opts)
    assert done.returncode == 0, done.stderr
    estimate = int(done.stdout)
    out = tmp_path / ("out.pcm" if "f32le" in ffmpeg_out else "out.wav")
    ffmpeg("-i", str(src), *ffmpeg_out, str(out))
    actual = out.stat().st_size
    assert estimate == actual


# -- errors: exit 2, one line, no traceback ------------------------------------------------------


def test_missing_file_exits_2(run_cli: Cli, tmp_path: Path) -> None:
    missing = tmp_path / "nope.mp3"
    done = run_cli("estimate", missing)
    assert done.returncode == 2
    assert done.stdout == ""
    line = one_line_error(done.stderr)
    assert str(missing) in line


@needs_ffmpeg
def test_garbage_file_exits_2(run_cli: Cli, tmp_path: Path) -> None:
    garbage = tmp_path / "x.mp3"
    garbage.write_bytes(os.urandom(64 * 1024))
    done = run_cli("estimate", garbage, "--json")
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stdout == ""
    line = one_line_error(done.stderr)
    assert "x.mp3" in line


@needs_ffmpeg
def test_empty_file_and_folder_exit_2(run_cli: Cli, tmp_path: Path) -> None:
    empty = tmp_path / "empty.wav"
    empty.touch()
    for target in (empty, tmp_path):
        done = run_cli("estimate", target)
        assert done.returncode == 2, (target, done.stdout, done.stderr)
        assert done.stdout == ""
        one_line_error(done.stderr)


def test_unknown_format_exits_2(run_cli: Cli, tmp_path: Path) -> None:
    done = run_cli("estimate", tmp_path / "a.mp3", "--format", "mp3")
    assert done.returncode == 2
    assert "--format" in one_line_error(done.stderr)


def test_missing_ffprobe_exits_2_naming_it(run_cli: Cli, tmp_path: Path) -> None:
    """PATH holds python but no ffprobe: a clear one-line error, not a traceback."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python3").symlink_to(sys.executable)
    (bin_dir / "python").symlink_to(sys.executable)
    media = tmp_path / "a.mp3"
    media.write_bytes(b"\xff\xfb" + os.urandom(4096))  # it never gets as far as reading it
    assert shutil.which("ffprobe", path=str(bin_dir)) is None
    done = run_cli("estimate", media, env={"PATH": str(bin_dir)})
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stdout == ""
    assert "ffprobe" in one_line_error(done.stderr)
    assert JANITOR_BIN.exists()


# -- names ffmpeg would read otherwise -----------------------------------------------------------


@needs_ffmpeg
@pytest.mark.parametrize("name", ["-talk.mp3", "talk:1.mp3", "a:b:c.m4a"])
def test_a_name_that_looks_like_an_option_or_a_protocol_is_read_as_a_file(
    media: dict[str, Path], run_cli: Cli, tmp_path: Path, name: str
) -> None:
    """The CLI hands the path to the one probe, which names it ``file:`` + its absolute path:
    ``-talk.mp3`` is not an option to ffprobe, nor ``talk:`` a protocol."""
    shutil.copyfile(media["mp3-10s-tagged"], tmp_path / name)
    plain = run_cli("estimate", "--json", media["mp3-10s-tagged"])
    assert plain.returncode == 0, plain.stderr
    done = run_cli("estimate", "--json", "--", name, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout)
    assert got["media"] == name
    assert got["bytes"] == json.loads(plain.stdout)["bytes"]


# -- one estimator: the CLI, the daemon's API, the pre-flight and what ffmpeg writes -------------


@needs_ffmpeg
def test_janitor_estimate_the_api_and_the_preflight_agree_with_what_ffmpeg_writes(
    tmp_path: Path, run_cli: Cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    """For a real 10-minute m4a (the issue's example), a real WAV and an m4a with tags (which
    reach the WAV's header), each estimated in its own
    process with its own probe cache: ``janitor estimate``, the real daemon's ``POST
    /v1/estimate`` of batchalign3's own command line, and ``janitor run``'s pre-flight give the
    same bytes, and they cover what ffmpeg then writes for that command (to the byte)."""
    from janitor import Janitor
    from janitor.commands.run import preflight
    from tests._daemon_helpers import daemon_setup, running_daemon, uds_client

    folder = tmp_path / "media"
    folder.mkdir()
    # the fast coder: the same frames, header and decoded length, a fourth of the encoding
    m4a = sine(folder / "talk 10min.m4a", 600, "-ac", "1", *AAC_FAST, "-b:a", "24k")
    wav = sine(folder / "room.wav", 20, "-ac", "2", "-ar", "44100")
    titled = sine(folder / "titled.m4a", 20, "-ac", "1", "-c:a", "aac", *TAGS)  # ffprobe reads it
    with daemon_setup(tmp_path / "d", settings={"JANITOR_CACHE_DIR": str(tmp_path / "c1")}) as s:
        cache, out = s.tree, tmp_path / "out"
        out.mkdir()
        # What the pre-flight counts: m4a's cache WAV, and each file's whole float32 PCM.
        wanted = [(m4a, "wav16"), (m4a, "f32"), (wav, "f32"), (titled, "wav16")]
        cli = {}
        for src, fmt in wanted:
            done = run_cli("estimate", src, "--format", fmt, env=s.env(JANITOR_CACHE_DIR=str(
                tmp_path / "c2")))  # fmt: skip
            assert done.returncode == 0, done.stderr
            cli[src, fmt] = int(done.stdout)

        def args(src: Path, fmt: str, dest: Path) -> list[str]:  # batchalign3's command lines
            codec = ["-acodec", "pcm_s16le"] if fmt == "wav16" else ["-f", "f32le", "-acodec",
                                                                     "pcm_f32le"]  # fmt: skip
            return ["-y", "-i", str(src), *codec, "-ar", "16000", "-ac", "1", str(dest)]

        api = {}
        with running_daemon(s), uds_client(s.socket) as client:
            for src, fmt in wanted:
                dest = cache / f"{'0' * 24}.tmp.wav" if fmt == "wav16" else tmp_path / "g.pcm"
                r = client.post("/v1/estimate", json={"args": args(src, fmt, dest), "cwd": "/"})
                assert r.status_code == 200 and r.json()["estimable"], r.text
                api[src, fmt] = r.json()["total_bytes"]

        s.apply_env(monkeypatch)
        monkeypatch.setenv("JANITOR_CACHE_DIR", str(tmp_path / "c3"))
        jan = Janitor.from_settings()
        try:
            pre = preflight(jan, [folder], cache_dir=cache, tmp_dir=out)
        finally:
            jan.ledger.close()
        plans = {Path(p.media): p for p in pre.files}
        ahead = {(src, "wav16"): plans[src].cache_bytes for src in (m4a, titled)}
        ahead |= {(src, "f32"): plans[src].pcm_bytes for src in (m4a, wav)}

        for src, fmt in wanted:
            dest = out / ("x.wav" if fmt == "wav16" else "x.pcm")
            ffmpeg("-i", str(src), *args(src, fmt, dest)[3:])
            written = dest.stat().st_size
            said = (cli[src, fmt], api[src, fmt], ahead[src, fmt])
            assert said == (said[0],) * 3, (src.name, fmt, said)
            assert said[0] >= written, (src.name, fmt, said, written)
            assert said[0] == written, (src.name, fmt, said, written)  # exact, in fact
        # The tagged m4a was ffprobe's to read (the daemon remembers it); the others' headers
        # said everything.
        assert len(list((tmp_path / "c1" / "probes").glob("*.probe"))) == 1
