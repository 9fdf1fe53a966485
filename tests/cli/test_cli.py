"""The real ``janitor`` console script in a subprocess: output, JSON shapes and exit codes.

Exit codes (the brief): 0 ok; 1 ran and found a problem; 2 bad input or configuration (one line
on stderr, nothing changed); 75 refused or stopped for lack of space (EX_TEMPFAIL).
"""

from __future__ import annotations

import gc
import json
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from janitor.config.settings import shipped_policy_path
from tests._fixtures.console import JANITOR_BIN, janitor_in_process, one_line_error
from tests._fixtures.env import JanitorEnv
from tests._fixtures.policies import SHIPPED_TREES
from tests._fixtures.space import MiB, free_of
from tests._fixtures.volumes import Volume

Cli = Callable[..., subprocess.CompletedProcess[str]]
MakeVolume = Callable[..., Volume]
Mount = Callable[..., Path]

ID_RE = re.compile(r"^r-[0-9a-f]{16}$")
# The README's "JSON shapes": fields may be added, never renamed or removed, so the tests ask
# for at least these keys.
RESERVATION_KEYS = {
    "id",
    "tree",
    "device",
    "volume",
    "bytes",
    "path",
    "job",
    "owner_pid",
    "created",
    "expires",
    "state",
    "ended",
    "at_risk",
    "outstanding",
}
REFUSAL_KEYS = {
    "error",
    "tree",
    "volume",
    "requested",
    "free",
    "floor",
    "reserved",
    "available",
    "shortfall",
    "evicted",
    "message",
}
VOLUME_KEYS = {
    "device",
    "mount",
    "total",
    "free",
    "floor",
    "free_low",
    "free_target",
    "reserved",
    "headroom",
    "level",
    "reason",
    "trees",
    "fill_rate",
    "eta_floor",
    "forecast_updated",
}
TREE_KEYS = {"name", "role", "path", "exists", "device", "usage", "quota", "low_watermark"}
PATHS_KEYS = {
    "config",
    "config_exists",
    "policy",
    "state_dir",
    "ledger",
    "runtime_dir",
    "socket",
    "log_dir",
}
CHECK_KEYS = {
    "tree",
    "volume",
    "requested",
    "free",
    "floor",
    "reserved",
    "available",
    "shortfall",
    "fits",
    "level",
}


def _ok(done: subprocess.CompletedProcess[str]) -> subprocess.CompletedProcess[str]:
    assert done.returncode == 0, f"exit {done.returncode}\n{done.stdout}\n{done.stderr}"
    assert "Traceback" not in done.stderr
    return done


def _bad(done: subprocess.CompletedProcess[str], code: int = 2) -> str:
    """Exit ``code`` with one line on stderr, no traceback, nothing on stdout; the line."""
    assert done.returncode == code, f"exit {done.returncode}\n{done.stdout}\n{done.stderr}"
    assert done.stdout == ""
    return one_line_error(done.stderr)


def _json(done: subprocess.CompletedProcess[str]) -> Any:
    return json.loads(done.stdout)


# -- reserve / release / renew ---------------------------------------------------------------------


def _lib_reserve(vol: Volume, nbytes: int, **kwargs: Any) -> str:
    """Reserve through the library (owner: this test process); its connection is closed after,
    so the ledger file is complete on disk (no WAL) when a test compares its bytes."""
    jan = vol.janitor()
    rid = jan.reserve("t", nbytes, **kwargs).id
    jan.ledger.close()
    return rid


def test_reserve_prints_an_id_and_exits_0(managed_volume: MakeVolume, run_cli: Cli) -> None:
    vol = managed_volume("64m", floor="4MiB")
    done = _ok(run_cli("reserve", "t", "10M", "--job", "fa", "--path", vol.tree / "o.wav"))
    assert ID_RE.match(done.stdout.strip())
    assert done.stdout.count("\n") == 1
    line = one_line_error(done.stderr)  # the human note goes to stderr, one line
    assert "reserved 10 MiB" in line
    info = vol.janitor().get(done.stdout.strip())
    assert (info.state, info.bytes, info.job) == ("live", 10 * MiB, "fa")
    assert info.path == str(vol.tree / "o.wav")


def test_reserve_json_shape_and_default_owner(managed_volume: MakeVolume, run_cli: Cli) -> None:
    vol = managed_volume("64m", floor="4MiB")
    done = _ok(run_cli("reserve", "t", "1.5MiB", "--ttl", "30m", "--json", "--job", "j1"))
    data = _json(done)
    assert set(data) >= RESERVATION_KEYS
    assert ID_RE.match(data["id"])
    assert data["bytes"] == data["outstanding"] == 3 * MiB // 2
    assert (data["tree"], data["job"], data["state"], data["path"]) == ("t", "j1", "live", None)
    assert data["volume"] == str(vol.mount)
    assert data["device"] == os.stat(vol.mount).st_dev
    assert data["expires"] - data["created"] == pytest.approx(1800)
    # The default owner is the process that ran janitor: this test process.
    assert data["owner_pid"] == os.getpid()


def test_owner_pid_option(managed_volume: MakeVolume, run_cli: Cli) -> None:
    managed_volume("64m", floor="4MiB")
    sleeper = subprocess.Popen(["sleep", "600"])
    try:
        data = _json(_ok(run_cli("reserve", "t", "1M", "--json", "--owner-pid", str(sleeper.pid))))
        assert data["owner_pid"] == sleeper.pid
    finally:
        sleeper.kill()
        sleeper.wait()


def test_a_shell_scripts_reservation_ends_with_the_script(
    managed_volume: MakeVolume, run_cli: Cli
) -> None:
    """A wrapper script's ``janitor reserve`` belongs to the script: killing it ends the bytes."""
    vol = managed_volume("64m", floor="4MiB")
    script = subprocess.Popen(
        ["sh", "-c", '"$0" reserve t 20M && exec sleep 600', str(JANITOR_BIN)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    jan = vol.janitor()
    try:
        assert script.stdout is not None
        rid = script.stdout.readline().strip()
        assert ID_RE.match(rid), rid
        assert jan.would_fit("t", 1).reserved == 20 * MiB
        assert jan.get(rid).owner_pid == script.pid
    finally:
        script.kill()
        script.wait()
        if script.stdout is not None:
            script.stdout.close()
    check = _json(_ok(run_cli("check", "t", "1", "--json")))
    assert check["reserved"] == 0
    assert jan.get(rid).state == "dead"


def test_release_then_release_again(managed_volume: MakeVolume, run_cli: Cli) -> None:
    vol = managed_volume("64m", floor="4MiB")
    rid = _lib_reserve(vol, 5 * MiB)
    data = _json(_ok(run_cli("release", rid, "--json")))
    assert (data["id"], data["state"], data["bytes"]) == (rid, "released", 5 * MiB)
    jan = vol.janitor()
    assert jan.get(rid).state == "released"
    jan.ledger.close()
    ledger = jan.settings.ledger_path.read_bytes()
    line = _bad(run_cli("release", rid))
    assert rid in line and "released" in line
    assert jan.settings.ledger_path.read_bytes() == ledger


def test_release_and_renew_of_unknown_ids(
    managed_volume: MakeVolume, run_cli_many: Any, janitor_env: JanitorEnv, ledger_dump: Any
) -> None:
    vol = managed_volume("64m", floor="4MiB")
    _lib_reserve(vol, 5 * MiB)
    before = janitor_env.ledger.read_bytes()
    dump = ledger_dump(janitor_env.ledger)
    runs = [
        ("release", "r-0000000000000000"),
        ("release", "nonsense"),
        ("renew", "r-ffffffffffffffff"),
    ]
    for done in run_cli_many(runs):
        assert "no reservation" in _bad(done)
    assert janitor_env.ledger.read_bytes() == before
    assert ledger_dump(janitor_env.ledger) == dump


def test_renew(managed_volume: MakeVolume, run_cli: Cli) -> None:
    vol = managed_volume("64m", floor="4MiB")
    jan = vol.janitor()
    r = jan.reserve("t", 5 * MiB, ttl="1m")
    renewed = _json(_ok(run_cli("renew", r.id, "--ttl", "2h", "--json")))
    assert renewed["expires"] - r.info.created >= 7200
    assert jan.get(r.id).expires == renewed["expires"]
    r.release()
    assert "released" in _bad(run_cli("renew", r.id))


# -- refusals and check ----------------------------------------------------------------------------


def test_grow_extends_then_refuses_with_75(managed_volume: MakeVolume, run_cli: Cli) -> None:
    managed_volume(size="64m", floor="8MiB")
    me = str(os.getpid())
    rid = run_cli("reserve", "t", "1M", "--owner-pid", me).stdout.strip()
    done = run_cli("grow", rid, "3M", "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["bytes"] == 3 * MiB
    assert "grew" in one_line_error(done.stderr) and "3 MiB" in done.stderr
    done = run_cli("grow", rid, "1G", "--json")
    assert done.returncode == 75
    refusal = json.loads(done.stdout)
    assert refusal["error"] == "refused" and refusal["requested"] == 1024 * MiB
    assert f"cannot grow {rid}" in one_line_error(done.stderr)
    status = json.loads(run_cli("status", "--json").stdout)
    assert [r["bytes"] for r in status["reservations"]] == [3 * MiB]  # refused: unchanged
    done = run_cli("grow", "r-0000000000000000", "2M")
    assert done.returncode == 2 and "no reservation" in one_line_error(done.stderr)
    assert run_cli("grow", rid, "lots").returncode == 2


def test_refusal_exits_75_with_the_numbers(
    managed_volume: MakeVolume, run_cli_many: Any, fill: Callable[..., Path]
) -> None:
    vol = managed_volume("64m", floor="4MiB")
    fill(vol.mount / "data.bin", 20 * MiB)  # outside the cache: make-room cannot take it
    _lib_reserve(vol, 10 * MiB)
    free = free_of(vol.mount)
    request = free - 4 * MiB - 10 * MiB + 1
    plain, as_json = run_cli_many(
        [("reserve", "t", str(request)), ("reserve", "t", str(request), "--json")]
    )
    assert plain.returncode == 75
    assert plain.stdout == ""
    assert "refused" in one_line_error(plain.stderr)

    assert as_json.returncode == 75
    line = one_line_error(as_json.stderr)
    data = _json(as_json)
    assert set(data) >= REFUSAL_KEYS
    assert data["error"] == "refused"
    assert data["free"] == free == free_of(vol.mount)
    assert (data["floor"], data["reserved"], data["requested"]) == (4 * MiB, 10 * MiB, request)
    assert (data["available"], data["shortfall"]) == (request - 1, 1)
    assert (data["tree"], data["volume"]) == ("t", str(vol.mount))
    assert data["message"] in line
    assert vol.janitor().would_fit("t", 1).reserved == 10 * MiB  # nothing was added


def test_check_exit_codes_and_json(
    managed_volume: MakeVolume, run_cli_many: Any, run_cli: Cli, fill: Callable[..., Path]
) -> None:
    vol = managed_volume("64m", floor="4MiB")  # free_low defaults to 8 MiB
    fits, fits_plain, refused = run_cli_many(
        [("check", "t", "10M", "--json"), ("check", "t", "10M"), ("check", "t", "100M", "--json")]
    )
    data = _json(_ok(fits))
    assert set(data) >= CHECK_KEYS
    assert (data["fits"], data["level"], data["requested"]) == (True, "ok", 10 * MiB)
    assert data["free"] == free_of(vol.mount)
    assert data["available"] == data["free"] - 4 * MiB
    assert _ok(fits_plain).stdout == ""

    assert refused.returncode == 75
    data = _json(refused)
    assert data["fits"] is False
    assert data["shortfall"] == 100 * MiB - data["available"]
    assert "would refuse" in one_line_error(refused.stderr)

    # Below free_low but above the floor: it fits, and check says the volume is low (exit 1).
    fill(vol.tree / "x.bin", 58 * MiB)
    assert 4 * MiB < free_of(vol.mount) < 8 * MiB
    done = run_cli("check", "t", "4096", "--json")
    assert done.returncode == 1, done.stderr
    assert (_json(done)["fits"], _json(done)["level"]) == (True, "warn")
    assert vol.janitor().reservations() == []  # check reserves nothing


# -- status, paths, policy -------------------------------------------------------------------------


def test_status_json_shape(
    managed_volume: MakeVolume, run_cli_many: Any, fill: Callable[..., Path]
) -> None:
    vol = managed_volume("64m", floor="4MiB", quota="32MiB")
    fill(vol.tree / "a" / "b.bin", 3 * MiB)
    rid = _lib_reserve(vol, 7 * MiB, job="asr")
    as_json, wide = run_cli_many([("status", "--json"), (("status",), {"COLUMNS": "200"})])
    data = _json(_ok(as_json))
    assert set(data) >= {"time", "policy", "level", "volumes", "trees", "reservations"}
    assert data["policy"] == str(vol.policy)
    assert data["level"] == "ok"
    [v] = data["volumes"]
    assert set(v) >= VOLUME_KEYS
    assert v["mount"] == str(vol.mount)
    assert v["total"] == 64 * MiB
    assert v["free"] == free_of(vol.mount)
    assert (v["floor"], v["reserved"], v["level"], v["trees"]) == (4 * MiB, 7 * MiB, "ok", ["t"])
    assert v["headroom"] == v["free"] - v["floor"] - v["reserved"]
    [t] = data["trees"]
    assert set(t) >= TREE_KEYS
    assert (t["name"], t["path"], t["role"], t["quota"]) == ("t", str(vol.tree), "cache", 32 * MiB)
    assert t["usage"] == 3 * MiB
    [r] = data["reservations"]
    assert set(r) >= RESERVATION_KEYS
    assert (r["id"], r["job"], r["bytes"], r["owner_pid"]) == (rid, "asr", 7 * MiB, os.getpid())
    text = _ok(wide).stdout
    assert rid in text and "asr" in text and str(vol.mount) in text


def test_a_command_run_in_process_says_what_the_console_script_says(
    managed_volume: MakeVolume, run_cli: Cli, fill: Callable[..., Path], tmp_path: Path
) -> None:
    """tests._fixtures.console.janitor_in_process, which the scenario tests read the log and the
    status with, gives what the console script gives: the same stdout (the status's ``time``
    aside), stderr and exit code, in this process's environment or in the one it is given."""
    vol = managed_volume("64m", floor="4MiB", quota="32MiB")
    fill(vol.tree / "a.bin", 3 * MiB)
    _lib_reserve(vol, 7 * MiB, job="asr")
    released = _lib_reserve(vol, MiB)
    _ok(run_cli("release", released))
    other = tmp_path / "other.toml"
    other.write_text(f'[volume]\nfloor = "1MiB"\n[trees.u]\nrole = "cache"\npath = "{vol.tree}"\n')
    for args, env in [
        (("log", "--json"), {}),
        (("status", "--json"), {}),
        (("status", "--json"), {"JANITOR_POLICY": str(other)}),
        (("reserve", "nope", "1MiB"), {}),  # an unknown tree: one line, exit 2
    ]:
        by_script = run_cli(*args, env=env)
        in_process = janitor_in_process(*args, env={**os.environ, **env})
        said = [(d.returncode, d.stderr) for d in (by_script, in_process)]
        assert said[0] == said[1], (args, said)
        shown = [d.stdout for d in (by_script, in_process)]
        if args[0] == "status":
            shown = [json.loads(out) | {"time": 0} for out in shown]
            assert shown[0]["policy"] == str(other if env else vol.policy), shown[0]
        assert shown[0] == shown[1], args
        assert shown[0] or by_script.returncode == 2, args


def test_status_table_shows_whole_ids_at_80_columns(
    managed_volume: MakeVolume, run_cli: Cli
) -> None:
    """The table is how a person finds the id to pass to `janitor release`.

    BUG (janitor/cli.py _render_status): on an 80-column terminal (and whenever stdout is not
    a terminal) rich squeezes the id column to ``r-89a2abf…``, which cannot be released.
    """
    vol = managed_volume("64m", floor="4MiB")
    rid = _lib_reserve(vol, MiB, job="asr", path=vol.tree / "some" / "long" / "name.wav")
    text = _ok(run_cli("status", env={"COLUMNS": "80"})).stdout
    assert rid in text


def _is_shipped_policy(path: str) -> None:
    """The console script may run an installed copy while the tests import the source tree
    (CI installs non-editable), so the shipped policy is recognised by name and content."""
    assert Path(path).name == "batchalign3.toml"
    assert Path(path).read_bytes() == shipped_policy_path().read_bytes()


def test_paths_lists_every_resolved_path(run_cli_many: Any, janitor_env: JanitorEnv) -> None:
    as_json, text = run_cli_many([("paths", "--json"), ("paths",)])
    data = _json(_ok(as_json))
    assert set(data) >= PATHS_KEYS
    assert data["config"] == str(janitor_env.config_file)
    assert data["config_exists"] is False
    _is_shipped_policy(data["policy"])
    assert data["state_dir"] == str(janitor_env.state_dir)
    assert data["ledger"] == str(janitor_env.ledger)
    assert data["runtime_dir"] == str(janitor_env.runtime_dir / "space-janitor")
    assert data["socket"] == str(janitor_env.runtime_dir / "space-janitor" / "janitor.sock")
    assert data["log_dir"] == str(janitor_env.state_home / "space-janitor" / "log")
    for key in ("config", "policy", "state_dir", "ledger", "runtime_dir", "log_dir"):
        pattern = rf"^{key}\s+{re.escape(data[key])}"
        assert re.search(pattern, _ok(text).stdout, re.MULTILINE), (key, text.stdout)
    assert not janitor_env.ledger.exists()  # paths only reports; it creates nothing


def test_policy_show_json(managed_volume: MakeVolume, run_cli_many: Any) -> None:
    vol = managed_volume("64m", floor="5%", quota="50%")
    as_json, text = run_cli_many([("policy", "show", "--json"), ("policy", "show")])
    data = _json(_ok(as_json))
    assert set(data) >= {"source", "volumes", "trees"}
    assert data["source"] == str(vol.policy)
    [v] = data["volumes"]
    assert set(v) >= {"mount", "total", "floor", "free_low", "free_target"}
    assert (v["mount"], v["total"], v["floor"]) == (str(vol.mount), 64 * MiB, 64 * MiB * 5 // 100)
    assert v["free_low"] >= v["floor"] and v["free_target"] >= v["free_low"]
    t = data["trees"]["t"]
    assert set(t) >= {"role", "path", "quota", "quota_bytes", "low_watermark_bytes", "device"}
    assert (t["role"], t["path"], t["quota_bytes"]) == ("cache", str(vol.tree), 32 * MiB)
    assert t["device"] == os.stat(vol.mount).st_dev
    assert t["low_watermark_bytes"] == 32 * MiB * 9 // 10
    assert "tree t: cache" in _ok(text).stdout


def test_default_policy_status_works(run_cli: Cli) -> None:
    """The README's quick start: ``janitor status`` on the shipped policy, on a fresh machine."""
    data = _json(_ok(run_cli("status", "--json")))
    _is_shipped_policy(data["policy"])
    assert {t["name"] for t in data["trees"]} == SHIPPED_TREES


def test_policy_validate(tmp_path: Path, run_cli_many: Any) -> None:
    good = tmp_path / "good.toml"
    good.write_text(
        f'[volume]\nfloor = "4MiB"\n[trees.t]\nrole = "cache"\npath = "{tmp_path / "c"}"\n'
    )
    bad = tmp_path / "bad.toml"
    bad.write_text(f'[trees.t]\nrole = "cache"\npath = "{tmp_path / "c"}"\nquota = "lots"\n')
    ok, shipped, wrong, missing = run_cli_many(
        [
            ("policy", "validate", good),
            ("policy", "validate", shipped_policy_path()),
            ("policy", "validate", bad),
            ("policy", "validate", tmp_path / "missing.toml"),
        ]
    )
    assert "ok" in one_line_error(_ok(ok).stderr)
    _ok(shipped)
    line = _bad(wrong)
    assert str(bad) in line and "trees.t.quota" in line
    assert "missing.toml" in _bad(missing)


ISSUE_POLICY = (
    '[volume]\nfloor = "4MiB"\n\n[trees.media]\nrole = "cache"\npath = 5\nquota = \'lots\'\n'
)


def test_a_bad_policy_names_every_problem_in_our_words(
    tmp_path: Path, run_cli_many: Any, janitor_env: JanitorEnv
) -> None:
    """``janitor policy validate``, and any command that loads the policy, list each problem:
    the file first, then one indented line per key, exit 2, nothing on stdout or on disk."""
    bad = tmp_path / "bad.toml"
    bad.write_text(ISSUE_POLICY)
    before = sorted(janitor_env.root.rglob("*"))
    results = run_cli_many(
        [
            ("policy", "validate", bad),
            (("status",), {"JANITOR_POLICY": str(bad)}),
            ("--policy", bad, "reserve", "media", "1M"),
        ]
    )
    expected = [
        f"janitor: error: policy file {bad} has 2 problems:",
        '  trees.media.path = 5: wanted a folder path in quotes, e.g. "{user_cache_dir}/pip"',
        '  trees.media.quota = "lots": not a size; use e.g. "500M", "2G", "1.5GiB", "5%" or a '
        "number of bytes",
    ]
    for done in results:
        assert done.returncode == 2, done.stderr
        assert done.stdout == ""
        assert done.stderr.splitlines() == expected
    assert sorted(janitor_env.root.rglob("*")) == before
    assert not janitor_env.ledger.exists()
    assert bad.read_text() == ISSUE_POLICY


def test_a_bad_policy_with_many_problems_lists_ten(tmp_path: Path, run_cli: Cli) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("".join(f'[trees.t{i}]\nrole = "junk"\npath = 5\n' for i in range(6)))
    done = run_cli("policy", "validate", bad)
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    lines = done.stderr.splitlines()
    assert lines[0] == f"janitor: error: policy file {bad} has 12 problems:"
    assert lines[1:3] == [
        '  trees.t0.role = "junk": wanted "cache", "scratch" or "report"',
        '  trees.t0.path = 5: wanted a folder path in quotes, e.g. "{user_cache_dir}/pip"',
    ]
    assert len(lines) == 12 and lines[-1] == "  ... and 2 more problems"


# -- bad input: exit 2, one line, ledger untouched -------------------------------------------------

BAD_INPUT = [
    (("reserve", "nope", "1M"), "unknown tree 'nope'"),
    (("reserve", "t", "0"), "'0'"),
    (("reserve", "t", "--", "-5M"), "'-5M'"),
    (("reserve", "t", "abc"), "'abc'"),
    (("reserve", "t", "1M", "--ttl", "0"), "ttl"),
    (("reserve", "t", "1M", "--ttl", "soon"), "ttl"),
    (("reserve", "t", "1M", "--wait", "a while"), "wait"),
    (("reserve", "t", "1M", "--path", "/etc/passwd"), "outside tree"),
    (("reserve", "t", "1M", "--owner-pid", "4194000"), "owner pid"),
    (("check", "nope", "1M"), "unknown tree"),
    (("check", "t", "0"), "'0'"),
    (("check", "t", "1M", "--path", "/etc/passwd"), "outside tree"),
]


def test_bad_input_exits_2_and_changes_nothing(
    managed_volume: MakeVolume, run_cli_many: Any, janitor_env: JanitorEnv, ledger_dump: Any
) -> None:
    vol = managed_volume("64m", floor="4MiB")
    _lib_reserve(vol, MiB)  # so there is a ledger to leave untouched
    before = janitor_env.ledger.read_bytes()
    dump = ledger_dump(janitor_env.ledger)
    results = run_cli_many([args for args, _ in BAD_INPUT])
    for (args, needle), done in zip(BAD_INPUT, results, strict=True):
        line = _bad(done)
        assert needle in line, (args, line)
        assert line.startswith("janitor: error: "), (args, line)
    assert janitor_env.ledger.read_bytes() == before
    assert ledger_dump(janitor_env.ledger) == dump


def test_path_outside_the_tree_through_dotdot_and_symlink(
    managed_volume: MakeVolume, run_cli_many: Any, tmp_path: Path
) -> None:
    vol = managed_volume("64m", floor="4MiB")
    (vol.tree / "link").symlink_to(tmp_path)
    paths = [vol.tree / ".." / "x.bin", vol.tree / "link" / "x.bin", vol.mount / "x", vol.tree]
    results = run_cli_many([("reserve", "t", "1M", "--path", p) for p in paths])
    for done in results[:3]:
        assert "outside tree" in _bad(done)
    assert "root of tree" in _bad(results[3])


def test_negative_size_without_double_dash_is_one_line(
    managed_volume: MakeVolume, run_cli: Cli
) -> None:
    """``janitor reserve t -5M`` is what a person types; it must be one line naming the size.

    BUG (janitor/cli.py): click parses ``-5M`` as an unknown option and prints its usage
    block in a box (five lines, "No such option: -5"), not the one-line size error.
    """
    managed_volume("64m", floor="4MiB")
    done = run_cli("reserve", "t", "-5M")
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    assert "-5M" in one_line_error(done.stderr)


def test_missing_or_bad_policy_file(
    run_cli_many: Any, tmp_path: Path, janitor_env: JanitorEnv
) -> None:
    missing = tmp_path / "nope.toml"
    bad = tmp_path / "bad.toml"
    bad.write_text(f'[trees.t]\nrole = "cache"\npath = "{tmp_path / "c"}"\nquota = "-1"\n')
    system = tmp_path / "system.toml"
    system.write_text('[trees.t]\nrole = "cache"\npath = "/usr/share"\n')
    results = run_cli_many(
        [
            ("--policy", missing, "status"),
            (("reserve", "t", "1M"), {"JANITOR_POLICY": str(missing)}),
            (("check", "t", "1M"), {"JANITOR_POLICY": str(missing)}),
            ("--policy", bad, "status"),
            ("--policy", system, "reserve", "t", "1M"),
        ]
    )
    for done in results[:3]:
        line = _bad(done)
        assert str(missing) in line and "does not exist" in line
    line = _bad(results[3])
    assert str(bad) in line and "trees.t.quota" in line
    line = _bad(results[4])
    assert str(system) in line and "trees.t.path" in line
    assert not janitor_env.ledger.exists()


# -- a ledger that cannot be used ------------------------------------------------------------------

LEDGER_COMMANDS = [
    ("reserve", "t", "1M"),
    ("status",),
    ("status", "--json"),
    ("check", "t", "1M"),
    ("release", "r-0123456789abcdef"),
    ("renew", "r-0123456789abcdef"),
]


def test_corrupt_ledger_exits_2_and_is_left_as_it_was(
    managed_volume: MakeVolume, run_cli_many: Any, janitor_env: JanitorEnv
) -> None:
    managed_volume("64m", floor="4MiB")
    janitor_env.state_dir.mkdir(parents=True)
    garbage = os.urandom(3 * 4096 + 17)
    janitor_env.ledger.write_bytes(garbage)
    for args, done in zip(LEDGER_COMMANDS, run_cli_many(LEDGER_COMMANDS), strict=True):
        line = _bad(done)
        assert "corrupt" in line and str(janitor_env.ledger) in line, (args, line)
    assert janitor_env.ledger.read_bytes() == garbage


def test_ledger_with_garbage_after_its_header(
    managed_volume: MakeVolume, run_cli_many: Any, janitor_env: JanitorEnv
) -> None:
    """A real ledger whose pages after the first were overwritten with garbage.

    BUG (janitor/ledger.py Ledger.read): SQLite errors raised inside a read transaction's body
    are not translated, so `janitor status` dies with a sqlite3.DatabaseError traceback
    (exit 1) instead of the one-line "ledger ... is corrupt" (exit 2).
    """
    vol = managed_volume("64m", floor="4MiB")
    for _ in range(3):
        _lib_reserve(vol, MiB)
    data = bytearray(janitor_env.ledger.read_bytes())
    assert len(data) > 4096
    data[4096:] = os.urandom(len(data) - 4096)
    janitor_env.ledger.write_bytes(bytes(data))
    failures = []
    for args, done in zip(LEDGER_COMMANDS, run_cli_many(LEDGER_COMMANDS), strict=True):
        try:
            assert "corrupt" in _bad(done)
        except AssertionError as exc:
            failures.append(f"janitor {' '.join(args)}: {exc}")
    assert failures == []
    assert janitor_env.ledger.read_bytes() == bytes(data)


def test_unwritable_ledger_exits_2(
    run_cli: Cli,
    run_cli_many: Any,
    tmpfs: Mount,
    remount_tmpfs: Callable[[Path, str], None],
    managed_volume: MakeVolume,
) -> None:
    managed_volume("64m", floor="4MiB")
    state = tmpfs("4m", name="state")
    env = {"JANITOR_STATE_DIR": str(state)}
    rid = _ok(run_cli("reserve", "t", "1M", env=env)).stdout.strip()
    ledger = state / "ledger.sqlite3"
    before = ledger.read_bytes()
    remount_tmpfs(state, "ro")
    runs = [("reserve", "t", "1M"), ("release", rid), ("check", "t", "1M")]
    for done in run_cli_many(runs, env=env):
        assert str(ledger) in _bad(done)
    assert ledger.read_bytes() == before
    # A state dir that cannot even be created.
    line = _bad(run_cli("reserve", "t", "1M", env={"JANITOR_STATE_DIR": str(state / "sub")}))
    assert str(state / "sub") in line


def test_status_reads_a_read_only_state_dir(
    run_cli: Cli,
    tmpfs: Mount,
    remount_tmpfs: Callable[[Path, str], None],
    managed_volume: MakeVolume,
) -> None:
    """status.py: "Reading status never writes the ledger, so it works on a read-only state dir".

    BUG (janitor/ledger.py Ledger._connect): every connection sets WAL mode and needs the
    ``-shm`` file, which cannot be created on a read-only filesystem, so status exits 2
    ("unable to open database file") instead of reading.
    """
    managed_volume("64m", floor="4MiB")
    state = tmpfs("4m", name="state")
    env = {"JANITOR_STATE_DIR": str(state)}
    rid = _ok(run_cli("reserve", "t", "1M", env=env)).stdout.strip()
    remount_tmpfs(state, "ro")
    data = _json(_ok(run_cli("status", "--json", env=env)))
    assert [r["id"] for r in data["reservations"]] == [rid]


def test_state_dir_that_is_a_regular_file(
    managed_volume: MakeVolume, run_cli_many: Any, tmp_path: Path
) -> None:
    managed_volume("64m", floor="4MiB")
    not_a_dir = tmp_path / "state-file"
    not_a_dir.write_text("I am a file\n")
    runs = [("reserve", "t", "1M"), ("status",), ("check", "t", "1M")]
    for done in run_cli_many(runs, env={"JANITOR_STATE_DIR": str(not_a_dir)}):
        assert str(not_a_dir) in _bad(done)
    assert not_a_dir.read_text() == "I am a file\n"


def test_ledger_disk_full_refuses_with_75(
    run_cli: Cli,
    run_cli_many: Any,
    tmpfs: Mount,
    managed_volume: MakeVolume,
    fill_until_full: Callable[[Path], int],
) -> None:
    vol = managed_volume("64m", floor="4MiB")
    state = tmpfs("1m", name="state")
    env = {"JANITOR_STATE_DIR": str(state)}
    first = _ok(run_cli("reserve", "t", "1M", "--json", env=env))
    rid = _json(first)["id"]
    assert fill_until_full(state / "filler") > 0
    assert free_of(state) < 4096
    runs = [("reserve", "t", "1M"), ("reserve", "t", "1M", "--json")]
    for done in run_cli_many(runs, env=env):
        assert done.returncode == 75, f"exit {done.returncode}: {done.stdout}{done.stderr}"
        assert done.stdout == ""
        assert "disk is full" in one_line_error(done.stderr)
    # Nothing was granted behind our back: once space is back, only the first one is live.
    (state / "filler").unlink()
    data = _json(_ok(run_cli("status", "--json", env=env)))
    assert [r["id"] for r in data["reservations"]] == [rid]
    assert vol.free() == 64 * MiB


def test_version_help_and_usage_errors(run_cli_many: Any) -> None:
    version, help_, unknown = run_cli_many([("--version",), ("--help",), ("no-such-command",)])
    assert _ok(version).stdout.startswith("space-janitor ")
    assert "reserve" in _ok(help_).stdout
    assert unknown.returncode == 2
    assert "Traceback" not in unknown.stderr


# -- the cyclic GC: off for the quick commands, back on for the lasting ones -----------------------

_GC_PROBE = """
import atexit, gc, sys
import janitor.cli.app
atexit.register(lambda: print("gc-enabled:", gc.isenabled(), file=sys.stderr))
sys.argv = ["janitor", *sys.argv[1:]]
janitor.cli.app.main()
"""


@pytest.mark.parametrize(
    ("args", "enabled"),
    [
        (["check", "t", "1M"], False),
        (["status"], False),
        (["exec", "t", "1M", "--", "true"], True),
        (["sweep", "--dry-run"], True),
    ],
)
def test_the_cyclic_gc_runs_again_only_for_commands_that_last(
    write_policy: Callable[..., Path], tmp_path: Path, args: list[str], enabled: bool
) -> None:
    """Quick commands leave it off (and exit without a last collection over every object);
    the daemon's kind (exec, sweep, status --watch, daemon, emergency) turns it back on."""
    tree = tmp_path / "tree"
    tree.mkdir()
    write_policy({"t": tree})
    done = subprocess.run(
        [sys.executable, "-c", _GC_PROBE, *args], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert f"gc-enabled: {enabled}" in done.stderr.splitlines()


def test_in_process_main_leaves_the_callers_gc_as_it_was(
    write_policy: Callable[..., Path], tmp_path: Path
) -> None:
    from janitor.cli.app import main

    tree = tmp_path / "tree"
    tree.mkdir()
    write_policy({"t": tree})
    assert gc.isenabled()
    with pytest.raises(SystemExit) as done:
        main(["check", "t", "1M"])
    assert done.value.code in (0, None)
    assert gc.isenabled()
    gc.disable()
    try:
        with pytest.raises(SystemExit):
            main(["check", "t", "1M"])
        assert not gc.isenabled()
    finally:
        gc.enable()
