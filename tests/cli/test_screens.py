"""What a person reads, rendered as they see it (issue 24 items 1-3).

The real ``janitor`` console script runs in a pseudo-terminal of a set size (80 and 140
columns; 50 for the list layout) and through a pipe, and its output is read back as the
screen shows it: no line wider than the terminal, table headers on one line, names cut only
in the middle and still told apart, nothing cut at all in a pipe; doctor's lines; plurals and
durations in one form; and the hints and names that hold square brackets, whole.
"""

from __future__ import annotations

import fcntl
import importlib.util
import io
import json
import os
import re
import select
import shutil
import struct
import subprocess
import tempfile
import termios
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from rich.cells import cell_len
from rich.console import Console

from janitor.cli.layout import ELLIPSIS, Cut, Line, middle_cut
from janitor.cli.view import BATCHALIGN_EXTRA, render_checks, render_preflight, render_sweep
from janitor.commands.run import MediaPlan, Preflight, VolumeNeed
from janitor.doctor import Check
from tests._enforce_helpers import DAY, KiB, make_entry, make_job, scratch_tree
from tests._fixtures.console import JANITOR_BIN
from tests._fixtures.pipeline import REAL_FFMPEG

Cli = Callable[..., subprocess.CompletedProcess[str]]

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07")
#: A duration as the janitor printed it before issue 24 ("22h1s"): never again.
COMPACT_DURATION = re.compile(r"\b\d+(?:d|h|m|s)\d+(?:h|m|s)\b")
#: Three orphans that share a long start and differ only at their ends.
ORPHANS = tuple(
    f".tmp_batchalign3_forced_alignment_of_the_interviews_{end}"
    for end in ("0001_alpha", "0002_bravo", "0003_charlie")
)
BRACKETED = ".tmp[2019]"


# -- how a person sees it --------------------------------------------------------------------


@dataclass
class Screen:
    code: int
    out: str  # what the terminal (or the pipe) shows, colors taken out
    err: str

    @property
    def lines(self) -> list[str]:
        return self.out.splitlines()


def in_terminal(
    args: Sequence[str | os.PathLike[str]],
    columns: int,
    *,
    stderr_too: bool = False,
    timeout: float = 90,
) -> Screen:
    """Run the console script with a pseudo-terminal of ``columns`` x 40 as its terminal.

    stdin and stdout are the terminal (stderr too with ``stderr_too``, else a pipe). No
    ``COLUMNS``: a shell does not export it, so the width is the terminal's own.
    """
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, columns, 0, 0))
    env = dict(os.environ, TERM="xterm-256color")
    for name in ("COLUMNS", "LINES", "NO_COLOR", "FORCE_COLOR", "TTY_COMPATIBLE"):
        env.pop(name, None)
    proc = subprocess.Popen(
        [str(JANITOR_BIN), *map(os.fspath, args)],
        stdin=slave,
        stdout=slave,
        stderr=slave if stderr_too else subprocess.PIPE,
        env=env,
        start_new_session=True,
    )
    os.close(slave)
    chunks: list[bytes] = []
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.5)
            if not ready:
                if proc.poll() is not None and not select.select([master], [], [], 0.2)[0]:
                    break
                continue
            try:
                data = os.read(master, 65536)
            except OSError:  # EIO: every writer of the terminal has closed it
                break
            if not data:
                break
            chunks.append(data)
        code = proc.wait(timeout=max(1.0, deadline - time.monotonic()))
    finally:
        os.close(master)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    err = proc.stderr.read().decode() if proc.stderr else ""
    if proc.stderr:
        proc.stderr.close()
    text = ANSI.sub("", b"".join(chunks).decode()).replace("\r\n", "\n")
    # A carriage return starts the line again (a progress bar redrawn, then erased): what
    # the terminal shows is what was written last.
    shown = "\n".join(line.rpartition("\r")[2] for line in text.split("\n"))
    return Screen(code, shown, err)


def piped(run_cli: Cli, *args: str | os.PathLike[str]) -> Screen:
    """Run it with stdout and stderr pipes, and ``COLUMNS=80`` set: a pipe has no width."""
    done = run_cli(*args, env={"COLUMNS": "80", "NO_COLOR": None, "FORCE_COLOR": None})
    return Screen(done.returncode, done.stdout, done.stderr)


def assert_fits(screen: Screen, columns: int) -> None:
    wide = [line for line in screen.lines if cell_len(line) > columns]
    assert not wide, f"lines wider than {columns}:\n" + "\n".join(wide) + "\n---\n" + screen.out


def assert_headers_on_one_line(screen: Screen) -> None:
    """A table's header is one line (``┃ ... ┃``), never a header wrapped over several."""
    lines = screen.lines
    heads = [i for i, line in enumerate(lines) if line.startswith("┃")]
    assert all(i - 1 not in heads for i in heads), screen.out


def shown_as(name: str, text: str) -> str:
    """How ``name`` shows in ``text``: whole, or its start and end around ``…``."""
    if re.search(rf"(?<![^\s│]){re.escape(name)}(?![^\s│])", text):
        return name
    for token in re.findall(rf"\S*{ELLIPSIS}\S*", text):
        head, _, tail = token.strip("│").partition(ELLIPSIS)
        if head and tail and name.startswith(head) and name.endswith(tail):
            return token
    raise AssertionError(f"{name!r} cannot be told from the output:\n{text}")


def assert_told_apart(names: Sequence[str], text: str) -> None:
    shown = [shown_as(n, text) for n in names]
    assert len(set(shown)) == len(names), shown
    for n, s in zip(names, shown, strict=True):
        # what tells them apart (the end) is kept whole
        assert s.endswith(n.rsplit("_", 2)[-2] + "_" + n.rsplit("_", 1)[-1]), (n, s)


# -- scenes ----------------------------------------------------------------------------------


@pytest.fixture
def short_dir() -> Iterator[Path]:
    """A folder with a short path (under /tmp), so a tree's path fits a doctor line."""
    folder = Path(tempfile.mkdtemp(prefix="sj-", dir="/tmp"))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def orphans(tmp_path: Path, write_policy: Callable[..., Path]) -> Path:
    """A scratch tree with a long path, three long orphans sharing their start, and one with
    square brackets in its name; a cache tree with a long name over its quota."""
    jobs = tmp_path / "newuser" / "trees" / "job_temp_folders_of_the_batchalign3_pipeline"
    for name in (*ORPHANS, BRACKETED):
        make_job(jobs, name, "fa_v2", age=2 * DAY + 3 * 3600 + 7)
    cache = tmp_path / "newuser" / "trees" / "media_cache"
    make_entry(cache, "0123456789abcdef01234567", 16 * KiB, age=22 * 3600 + 1, lock=False)
    write_policy(
        {
            "job_temp_folders_of_the_batchalign3_pipeline": scratch_tree(jobs),
            "media_cache_of_the_batchalign3_speech_pipeline": {
                "role": "cache",
                "path": str(cache),
                "quota": "8KiB",
                "low_watermark": "0",
                "min_age": "1s",
            },
        },
        floor="1MiB",
    )
    return jobs


# -- item 1: sweep ---------------------------------------------------------------------------


@pytest.mark.parametrize("columns", [80, 140])
def test_sweep_dry_run_in_a_terminal_tells_every_orphan_apart(orphans: Path, columns: int) -> None:
    screen = in_terminal(["sweep", "--dry-run"], columns)
    assert screen.code == 0, screen.out + screen.err
    assert "Traceback" not in screen.err
    assert_fits(screen, columns)
    assert_headers_on_one_line(screen)
    assert_told_apart(ORPHANS, screen.out)
    assert shown_as(BRACKETED, screen.out) == BRACKETED  # no markup ate "[2019]"
    # the units are shown inside their tree: its name heads them, paths are relative to it
    assert "job_temp_folders_of_the_batchalign3_pipeline: " in screen.out
    assert f"{ORPHANS[0][:10]}" in screen.out and f"/{ORPHANS[0][:10]}" not in screen.out
    if columns == 140:  # room enough: every name whole
        for name in ORPHANS:
            assert name in screen.out
        assert "4 units; would free" in screen.out
    assert "2 d 3 h ago" in screen.out or "2 d 3 h" in screen.out, screen.out
    assert not COMPACT_DURATION.search(screen.out), screen.out


def test_sweep_dry_run_in_a_narrow_terminal_lists_the_units(orphans: Path) -> None:
    screen = in_terminal(["sweep", "--dry-run"], 50)
    assert screen.code == 0, screen.out + screen.err
    assert_fits(screen, 50)
    assert not any(line.startswith(("┃", "│")) for line in screen.lines), screen.out
    assert_told_apart(ORPHANS, screen.out)
    assert shown_as(BRACKETED, screen.out) == BRACKETED
    # one record per unit: the name, then what would happen to it, why, size, age; lines
    # break between those, never inside one ("2 d 3 h ago" whole)
    assert screen.out.count("would delete, orphan, 40 KiB,") == len(ORPHANS) + 1, screen.out
    ages = [line.strip() for line in screen.lines if "last used" in line]
    assert ages.count("last used 2 d 3 h ago") == len(ORPHANS) + 1, screen.out
    assert "job_temp_folders_of_the_batchalign3_pipeline:\n160 KiB in 4 units;" in screen.out


def test_sweep_dry_run_into_a_pipe_cuts_nothing(run_cli: Cli, orphans: Path) -> None:
    screen = piped(run_cli, "sweep", "--dry-run")
    assert screen.code == 0, screen.err
    assert ELLIPSIS not in screen.out
    assert_headers_on_one_line(screen)
    for name in (*ORPHANS, BRACKETED):
        assert f"│ {name} " in screen.out, screen.out
    assert f"in {orphans}\n" in screen.out  # the tree's whole path, on one line
    assert any(cell_len(line) > 80 for line in screen.lines)  # COLUMNS=80 did not wrap it
    assert "\x1b" not in screen.out


def test_sweep_counts_in_words(run_cli: Cli, tmp_path: Path, write_policy: Any) -> None:
    jobs = tmp_path / "jobs"
    make_job(jobs, ".tmponly", "fa_v2", age=2 * DAY)
    write_policy({"jobs": scratch_tree(jobs)}, floor="1MiB")
    screen = piped(run_cli, "sweep", "--dry-run")
    assert "in 1 unit;" in screen.out, screen.out
    assert "1 units" not in screen.out


# -- item 1: status --------------------------------------------------------------------------


@pytest.fixture
def status_scene(orphans: Path, run_cli: Cli) -> str:
    """The orphans' policy, and a live reservation for a path deep in the cache tree."""
    cache = orphans.parent / "media_cache"
    out = cache / "segments" / "0123456789abcdef01234567.tmp.wav"
    done = run_cli(
        "reserve",
        "media_cache_of_the_batchalign3_speech_pipeline",
        "1M",
        "--path",
        out,
        "--owner-pid",
        str(os.getpid()),
        "--ttl",
        "2h",
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


@pytest.mark.parametrize("columns", [80, 140])
def test_status_in_a_terminal_fits_and_keeps_headers_whole(
    status_scene: str, orphans: Path, columns: int
) -> None:
    screen = in_terminal(["status"], columns)
    assert screen.code == 0, screen.out + screen.err
    assert_fits(screen, columns)
    assert_headers_on_one_line(screen)
    assert status_scene in screen.out  # an id is copied into `janitor release`: never cut
    for tree in (
        "job_temp_folders_of_the_batchalign3_pipeline",
        "media_cache_of_the_batchalign3_speech_pipeline",
    ):
        assert tree in screen.out
    # the reservation's path, relative to its tree
    assert shown_as("segments/0123456789abcdef01234567.tmp.wav", screen.out)
    heads = [line for line in screen.lines if line.startswith("┃")]
    if columns == 80:  # too narrow for the tables: one record per volume, tree, reservation
        assert heads == [], screen.out
        assert any(line.startswith("  free, last hour ") for line in screen.lines), screen.out
    else:
        assert any("free, last hour" in h and "forecast" in h for h in heads), screen.out
    assert "lapses in 1 h 59 min" in screen.out or "│ 1 h 59 min │" in screen.out, screen.out


def test_status_into_a_pipe_cuts_nothing(run_cli: Cli, status_scene: str, orphans: Path) -> None:
    screen = piped(run_cli, "status")
    assert screen.code == 0, screen.err
    assert ELLIPSIS not in screen.out
    assert_headers_on_one_line(screen)
    assert str(orphans) in screen.out and str(orphans.parent / "media_cache") in screen.out
    assert "media_cache_of_the_batchalign3_speech_pipeline" in screen.out
    assert "│ segments/0123456789abcdef01234567.tmp.wav │" in screen.out
    assert any(cell_len(line) > 80 for line in screen.lines)


# -- item 1: space ---------------------------------------------------------------------------


@pytest.mark.parametrize("columns", [80, 140])
def test_space_in_a_terminal_fits(orphans: Path, columns: int) -> None:
    screen = in_terminal(["space"], columns)
    assert screen.code == 0, screen.out + screen.err
    assert_fits(screen, columns)
    assert_headers_on_one_line(screen)
    assert "media_cache_of_the_batchalign3_speech_pipeline" in screen.out


# -- item 2: doctor --------------------------------------------------------------------------


@pytest.fixture
def runtime_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    run = tmp_path / "run"
    run.mkdir(mode=0o700, exist_ok=True)
    monkeypatch.setenv("JANITOR_RUNTIME_DIR", str(run))
    return run


VERDICT = re.compile(r"^(  ok|warn|fail)  \S")


def test_doctor_in_a_terminal_reads_cleanly(
    short_dir: Path, write_policy: Callable[..., Path], runtime_dir: Path
) -> None:
    cache = short_dir / "media_cache_of_the_pipeline"
    cache.mkdir()
    write_policy({"media": {"role": "cache", "path": str(cache), "quota": "10MiB"}})
    screen = in_terminal(["doctor"], 80)
    assert screen.code in (0, 1), screen.out + screen.err
    assert_fits(screen, 80)
    for line in screen.lines:  # a verdict, or what runs on under the message
        assert VERDICT.match(line) or line.startswith("      "), line
    assert f"cache at {cache}" in screen.out  # the path moves whole, it does not break
    vol = [line for line in screen.lines if "volume " in line]
    assert vol, screen.out
    m = re.match(r"^ *\S+  volume (\S+): (.*)$", vol[0])
    assert m and not m.group(2).startswith(m.group(1) + ":"), vol[0]  # not "volume /: /:"
    assert re.search(r"volume \S+: [\d.]+ \w?i?B free of ", vol[0]), vol[0]
    assert ": 1 tree" in screen.out and "1 trees" not in screen.out, screen.out
    if "inotify" in screen.out:
        assert "1 folder to watch" in screen.out, screen.out


def test_doctor_into_a_pipe_is_a_line_per_finding(
    run_cli: Cli, short_dir: Path, write_policy: Callable[..., Path], runtime_dir: Path
) -> None:
    cache = short_dir / ("deep" * 10) / "media_cache_of_the_pipeline"
    cache.mkdir(parents=True)
    write_policy({"media": {"role": "cache", "path": str(cache), "quota": "10MiB"}})
    screen = piped(run_cli, "doctor")
    checks = json.loads(run_cli("doctor", "--json").stdout)
    fixes = sum(1 for c in checks if c["fix"] and c["verdict"] != "ok")
    assert len(screen.lines) == len(checks) + fixes, screen.out
    assert f"  ok  tree media: cache at {cache}\n" in screen.out


# -- item 3: square brackets -----------------------------------------------------------------


@pytest.mark.skipif(
    importlib.util.find_spec("blake3") is not None, reason="blake3 is installed: no hint"
)
@pytest.mark.skipif(shutil.which("ffprobe") is None, reason="needs ffprobe")
@pytest.mark.parametrize("columns", [80, 0])
def test_run_media_hint_survives_rendering(
    run_cli: Cli, tmp_path: Path, write_policy: Callable[..., Path], columns: int
) -> None:
    """`janitor run --media` without blake3 says how to install it, and the command it
    gives installs the extra: ``[batchalign]`` whole, on a line of its own. A media file
    with brackets in its name is named whole too."""
    media = tmp_path / "interviews [2019]"
    media.mkdir()
    subprocess.run(
        [REAL_FFMPEG, "-nostdin", "-loglevel", "error", "-f", "lavfi", "-i",
         "sine=duration=2", "-c:a", "aac", str(media / "talk [a].m4a")],
        check=True,
    )  # fmt: skip
    (media / "broken [b].m4a").write_bytes(b"not media")
    write_policy({"jobs": scratch_tree(tmp_path / "jobs")}, floor="1MiB")
    args = ["run", "--media", str(media), "--", "true"]
    if columns:
        screen = in_terminal(args, columns, stderr_too=True)
        assert_fits(screen, columns)
        text = screen.out
    else:
        screen = piped(run_cli, *args)
        text = screen.err
    assert screen.code == 0, text
    lines = [line.strip() for line in text.splitlines()]
    assert BATCHALIGN_EXTRA == "pip install 'space-janitor[batchalign]'"
    assert BATCHALIGN_EXTRA in lines, text
    assert "pip install 'space-janitor'" not in text
    assert "broken [b].m4a" in text.replace("\n", " ") or "broken [b].m4a" in text
    assert "pre-flight: 2 media files" in text, text


# -- item 3: every renderer takes text as text -------------------------------------------------


def _render(parts: Any, width: int = 200) -> str:
    console = Console(record=True, width=width, file=io.StringIO())
    for part in parts if isinstance(parts, list) else [parts]:
        console.print(part)
    return console.export_text()


def test_renderers_print_square_brackets_as_they_are() -> None:
    now = time.time()
    sweep = {
        "dry_run": False,
        "items": [
            {
                "tree": "t[1]",
                "path": "/x/t[1]/.tmp[bold]",
                "reason": "orphan",
                "bytes": 1,
                "last_use": now - 60,
                "deleted": False,
                "skipped": "in use by [pid 4]",
            }
        ],
        "trees": [
            {
                "tree": "t[1]",
                "path": "/x/t[1]",
                "usage": 1,
                "units": 1,
                "quota": None,
                "planned": 1,
                "reaches_target": True,
                "kept": {"[red]": 1},
            }
        ],
        "deleted_bytes": 0,
        "reclaimed_bytes": 0,
    }
    text = _render(render_sweep(sweep, now))
    for shown in ("t[1]", ".tmp[bold]", "kept: in use by [pid 4]", "1 [red]", "in /x/t[1]"):
        assert shown in text, text
    pre = Preflight(
        (
            MediaPlan("/m/a [x].m4a", 60.0, True, False, 1, 1),
            MediaPlan("/m/b [y].m4a", None, True, False, 0, 0, error="bad [data]"),
        ),
        1,
        (VolumeNeed("/[v]", 2, 10, ("media cache WAVs /c[1]",)),),
    )
    text = _render(render_preflight(pre))
    for shown in ("/[v]:", "/c[1]", "skipped /m/b [y].m4a: bad [data]"):
        assert shown in text, text
    checks = [Check("tree [a]", "warn", "at /p[1] [blue]x", "lower [volume] floor")]
    text = _render(render_checks(checks))
    assert "tree [a]: at /p[1] [blue]x" in text and "fix: lower [volume] floor" in text


# -- the pieces ------------------------------------------------------------------------------


def test_middle_cut_keeps_both_ends() -> None:
    name = ORPHANS[2]
    for width in (5, 12, 20, 33, len(name) - 1):
        cut = middle_cut(name, width)
        assert cell_len(cut) == width and cut.count(ELLIPSIS) == 1, cut
        head, _, tail = cut.partition(ELLIPSIS)
        assert name.startswith(head) and name.endswith(tail)
        assert len(tail) >= len(head)  # the end, where names differ, gets the odd cell
    assert middle_cut(name, len(name)) == name
    wide = "音声ファイル_の_キャッシュ_0042.wav"
    cut = middle_cut(wide, 20)
    assert cell_len(cut) <= 20 and cut.endswith("0042.wav"), cut


def test_a_line_cuts_its_names_and_keeps_the_rest() -> None:
    line = Line("size 40 KiB, ", Cut(ORPHANS[0]), " and ", Cut(ORPHANS[1]))
    text = _render(line, width=60).rstrip("\n")
    assert cell_len(text) <= 60 and text.startswith("size 40 KiB, ") and " and " in text
    assert_told_apart(ORPHANS[:2], text)
    assert _render(line, width=400).rstrip("\n") == str(line)  # room: nothing cut


def test_no_cli_text_is_rich_markup() -> None:
    """typer renders help texts (``help=`` and command docstrings) as rich markup, and the
    screens once did too: a ``[word]`` there vanishes. None is written as markup, and none
    holds an unescaped square bracket that typer would take for a tag."""
    import ast

    import janitor.cli

    tag = re.compile(r"\[/?(?:bold|dim|red|green|yellow|blue|italic|/)\b|\[/\]")
    for path in sorted(Path(janitor.cli.__file__).parent.glob("*.py")):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                assert not tag.search(node.value), f"{path.name}:{node.lineno}: {node.value!r}"
            if isinstance(node, ast.FunctionDef):
                doc = ast.get_docstring(node) or ""
                assert not re.search(r"(?<!\\)\[", doc), f"{path.name}: {node.name}'s docstring"
            if isinstance(node, ast.keyword) and node.arg == "help":
                for text in ast.walk(node.value):
                    if isinstance(text, ast.Constant) and isinstance(text.value, str):
                        assert not re.search(r"(?<!\\)\[", text.value), (path.name, text.value)
