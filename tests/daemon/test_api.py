"""The daemon's HTTP API over its REAL Unix socket (and loopback TCP), against a real daemon.

One daemon serves the module (a tmpfs with a cache tree and a scratch tree, started once);
schemathesis gets a daemon of its own so its random requests cannot disturb the others.
Every request goes through httpx over the socket the daemon made: nothing is in-process.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests._daemon_helpers import (
    Daemon,
    DaemonSetup,
    daemon_setup,
    eventually,
    free_port,
    running_daemon,
    uds_client,
)
from tests._fixtures.space import MiB, fill_file

#: The documented JSON shape of a reservation (README, "JSON shapes"), in the order the API
#: writes it (the README's, and ``ReservationOut``'s).
RESERVATION_KEYS_ORDERED = (
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
    "command_pid",
    "job_id",
)
RESERVATION_KEYS = set(RESERVATION_KEYS_ORDERED)
#: The documented JSON shape of a refusal.
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
    "queued",
    "waited_s",
    "output",
    "message",
}


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[DaemonSetup, Daemon]]:
    """One daemon for the module: cache tree ``cache`` (quota 8MiB) and scratch tree ``scratch``
    on a 32 MiB tmpfs, floor 4 MiB, also on 127.0.0.1:PORT. Yields once the first periodic
    sweep has run, so nothing it does later surprises a test."""
    root = tmp_path_factory.mktemp("api")
    with daemon_setup(
        root,
        volume={"floor": "4MiB"},
        tree={"quota": "8MiB"},
        settings={"JANITOR_HTTP_PORT": str(free_port())},
    ) as setup:
        scratch = setup.mount / "scratch"
        scratch.mkdir()
        setup.trees["scratch"] = {
            "role": "scratch",
            "path": str(scratch),
            "units": "dir",
            "orphan_age": "1h",
            "min_age": "0s",
        }
        setup.write_policy()
        with running_daemon(setup) as d:
            eventually(
                lambda: (
                    {t["name"] for t in (d.status_json() or {}).get("trees", [])}
                    == {"cache", "scratch"}
                ),
                what="the first periodic sweep",
            )
            yield setup, d


@pytest.fixture
def client(api: tuple[DaemonSetup, Daemon]) -> Iterator[httpx.Client]:
    setup, _ = api
    with uds_client(setup.socket) as c:
        yield c


def reserve(client: httpx.Client, **body: Any) -> httpx.Response:
    body.setdefault("tree", "cache")
    body.setdefault("owner_pid", os.getpid())
    return client.post("/v1/reservations", json=body)


def assert_json_error(r: httpx.Response, status: int) -> dict[str, Any]:
    assert r.status_code == status, r.text
    assert r.headers["content-type"].startswith("application/json"), r.headers
    data = r.json()
    assert isinstance(data.get("error"), str) and data["error"], data
    assert isinstance(data.get("message"), str) and data["message"], data
    return data


# -- the socket -----------------------------------------------------------------------------------


def test_socket_is_a_socket_with_mode_0600(api: tuple[DaemonSetup, Daemon]) -> None:
    setup, _ = api
    st = os.stat(setup.socket)
    assert stat.S_ISSOCK(st.st_mode)
    assert stat.S_IMODE(st.st_mode) == 0o600
    assert st.st_uid == os.getuid()
    # The daemon made its runtime dir private too.
    assert stat.S_IMODE(os.stat(setup.runtime_dir).st_mode) & 0o077 == 0


def test_loopback_tcp_serves_the_same_api_and_only_on_127_0_0_1(
    api: tuple[DaemonSetup, Daemon],
) -> None:
    import psutil

    setup, d = api
    port = int(setup.settings["JANITOR_HTTP_PORT"])
    r = httpx.get(f"http://127.0.0.1:{port}/v1/status", timeout=10)
    assert r.status_code == 200
    assert r.json()["daemon"]["pid"] == d.pid
    listening = [
        c.laddr
        for c in psutil.Process(d.pid).net_connections(kind="inet")
        if c.status == psutil.CONN_LISTEN
    ]
    assert listening and all(addr.ip == "127.0.0.1" for addr in listening), listening


# -- reservations ---------------------------------------------------------------------------------


def test_reserve_201_with_the_documented_body(
    api: tuple[DaemonSetup, Daemon], client: httpx.Client
) -> None:
    setup, _ = api
    before = time.time()
    r = reserve(client, bytes="1MiB", job="fa", ttl="10m")
    assert r.status_code == 201, r.text
    body = r.json()
    assert set(body) == RESERVATION_KEYS
    assert body["id"].startswith("r-")
    assert body["tree"] == "cache"
    assert body["device"] == os.stat(setup.mount).st_dev
    assert body["volume"] == str(setup.mount)
    assert body["bytes"] == MiB and body["outstanding"] == MiB
    assert body["job"] == "fa" and body["path"] is None
    assert body["owner_pid"] == os.getpid()
    assert body["state"] == "live" and body["ended"] is None and body["at_risk"] is None
    assert before - 1 <= body["created"] <= time.time() + 1
    assert body["expires"] - body["created"] == pytest.approx(600, abs=1)

    got = client.get(f"/v1/reservations/{body['id']}")
    assert got.status_code == 200
    assert {k: v for k, v in got.json().items() if k != "outstanding"} == {
        k: v for k, v in body.items() if k != "outstanding"
    }
    assert client.delete(f"/v1/reservations/{body['id']}").status_code == 200


def test_integer_bytes_and_a_path_count_only_what_is_not_yet_written(
    api: tuple[DaemonSetup, Daemon], client: httpx.Client
) -> None:
    setup, _ = api
    out = setup.tree / "sub" / "out.wav"
    r = reserve(client, bytes=2 * MiB, path=str(out))
    assert r.status_code == 201, r.text
    rid = r.json()["id"]
    assert r.json()["path"] == str(out) and r.json()["outstanding"] == 2 * MiB
    fill_file(out, MiB)
    got = client.get(f"/v1/reservations/{rid}").json()
    assert got["outstanding"] == MiB
    assert client.delete(f"/v1/reservations/{rid}").status_code == 200
    out.unlink()


def test_release_then_release_again_is_404(client: httpx.Client) -> None:
    rid = reserve(client, bytes=4096).json()["id"]
    first = client.delete(f"/v1/reservations/{rid}")
    assert first.status_code == 200
    assert set(first.json()) == RESERVATION_KEYS
    assert first.json()["state"] == "released" and first.json()["ended"] is not None
    again = assert_json_error(client.delete(f"/v1/reservations/{rid}"), 404)
    assert again["error"] == "not_found" and rid in again["message"]
    # The ended reservation can still be read, in its final state.
    assert client.get(f"/v1/reservations/{rid}").json()["state"] == "released"


@pytest.mark.parametrize(
    "content_type",
    [
        "application/json",
        "Application/JSON; charset=utf-8",
        "application/vnd.janitor+json",  # JSON to FastAPI too
    ],
)
def test_reserve_read_release_answer_with_the_documented_shape_and_headers(
    client: httpx.Client, content_type: str
) -> None:
    """Answers serialised once in the worker keep the documented keys, order and headers."""
    import email.utils
    import json

    body = json.dumps({"tree": "cache", "bytes": 4096, "job": "ct", "owner_pid": os.getpid()})
    r = client.post("/v1/reservations", content=body, headers={"content-type": content_type})
    assert r.status_code == 201, r.text
    assert r.headers["content-type"] == "application/json"
    assert int(r.headers["content-length"]) == len(r.content)
    assert list(r.json()) == list(RESERVATION_KEYS_ORDERED)
    sent = email.utils.parsedate_to_datetime(r.headers["date"]).timestamp()
    assert abs(sent - time.time()) < 5
    rid = r.json()["id"]
    got = client.get(f"/v1/reservations/{rid}")
    assert got.status_code == 200 and list(got.json()) == list(RESERVATION_KEYS_ORDERED)
    assert "date" in got.headers
    gone = client.delete(f"/v1/reservations/{rid}")
    assert gone.status_code == 200 and gone.json()["state"] == "released"
    assert gone.headers["content-type"] == "application/json"


def test_a_reserve_body_of_another_type_is_still_422(client: httpx.Client) -> None:
    r = client.post(
        "/v1/reservations",
        content=b'{"tree": "cache", "bytes": 1}',
        headers={"content-type": "text/plain"},
    )
    assert assert_json_error(r, 422)["error"] == "bad_request"


@pytest.mark.parametrize(
    ("method", "url"),
    [
        ("DELETE", "/v1/reservations/r-0000000000000000"),
        ("GET", "/v1/reservations/r-0000000000000000"),
        ("POST", "/v1/reservations/r-0000000000000000/renew"),
        ("DELETE", "/v1/reservations/not-an-id"),
    ],
)
def test_unknown_reservation_is_404_json(client: httpx.Client, method: str, url: str) -> None:
    data = assert_json_error(client.request(method, url), 404)
    assert data["error"] == "not_found"


def test_reserve_too_big_is_507_with_the_refusals_numbers(
    api: tuple[DaemonSetup, Daemon], client: httpx.Client
) -> None:
    setup, d = api
    with d.events() as ev:
        r = reserve(client, bytes="1GiB", job="huge")
        assert r.status_code == 507, r.text
        assert r.headers["content-type"].startswith("application/json")
        assert r.headers.get("retry-after") == "5"
        body = r.json()
        assert set(body) == REFUSAL_KEYS
        assert body["error"] == "refused"
        assert body["tree"] == "cache" and body["volume"] == str(setup.mount)
        assert body["requested"] == 1024 * MiB
        assert body["floor"] == 4 * MiB
        assert 0 < body["free"] <= 32 * MiB
        assert body["reserved"] >= 0
        assert body["available"] == max(0, body["free"] - body["floor"] - body["reserved"])
        assert body["shortfall"] == body["requested"] - body["available"]
        assert "1 GiB" in body["message"]
        # The refusal reaches the SSE stream and the refused counter.
        ev.wait_for("refused", lambda e: e["tree"] == "cache" and e["bytes"] == 1024 * MiB)
    eventually(
        lambda: 'janitor_reservations_refused_total{tree="cache"}' in d.metrics(),
        what="the refused counter",
    )


BAD_BODIES = {
    "missing tree": {"bytes": 1024},
    "missing bytes": {"tree": "cache"},
    "bytes abc": {"tree": "cache", "bytes": "abc"},
    "bytes zero": {"tree": "cache", "bytes": 0},
    "bytes negative": {"tree": "cache", "bytes": -5},
    "extra field": {"tree": "cache", "bytes": 1024, "color": "blue"},
    "unknown tree": {"tree": "nope", "bytes": 1024},
    "empty tree": {"tree": "", "bytes": 1024},
    "ttl bad": {"tree": "cache", "bytes": 1024, "ttl": "soon"},
    "ttl negative": {"tree": "cache", "bytes": 1024, "ttl": -1},
    "owner pid zero": {"tree": "cache", "bytes": 1024, "owner_pid": 0},
    "owner pid not running": {"tree": "cache", "bytes": 1024, "owner_pid": 2**22 + 12345},
    "path outside the tree": {"tree": "cache", "bytes": 1024, "path": "/etc/passwd"},
    "path escaping with ..": {"tree": "cache", "bytes": 1024, "path": "../x"},
    "a list": [],
    "a string": "x",
}


@pytest.mark.parametrize("body", list(BAD_BODIES.values()), ids=list(BAD_BODIES))
def test_bad_reserve_bodies_are_422_json(client: httpx.Client, body: Any) -> None:
    data = assert_json_error(client.post("/v1/reservations", json=body), 422)
    assert data["error"] == "bad_request"


def test_not_json_and_no_body_are_422_json(client: httpx.Client) -> None:
    r = client.post(
        "/v1/reservations", content=b"{not json", headers={"content-type": "application/json"}
    )
    assert_json_error(r, 422)
    assert_json_error(client.post("/v1/reservations"), 422)


@pytest.mark.parametrize("url", ["/v1/reservations", "/v1/sweep", "/v1/reservations/r-x/renew"])
def test_a_body_that_is_not_utf8_is_a_documented_json_error(client: httpx.Client, url: str) -> None:
    """Found by schemathesis: FastAPI answers 400 ``{"detail": ...}`` (undocumented status, not
    the API's ``{"error", "message"}`` shape) when the JSON body is not valid UTF-8."""
    r = client.post(
        url, content=b'{"tree": "\xff\xfe"}', headers={"content-type": "application/json"}
    )
    assert_json_error(r, 422)


def test_the_422_message_names_the_field(client: httpx.Client) -> None:
    assert (
        "tree"
        in assert_json_error(client.post("/v1/reservations", json={"bytes": 1}), 422)["message"]
    )
    assert (
        "color"
        in assert_json_error(
            client.post("/v1/reservations", json={"tree": "cache", "bytes": 1, "color": 1}), 422
        )["message"]
    )


# Found while writing these tests: inputs that pass validation but crash the handler (500, with
# the traceback on the daemon's stderr) instead of a 4xx JSON error. See the report.
CRASHERS = {
    "bytes 2**63 (too big for SQLite)": {"tree": "cache", "bytes": 2**63},
    "bytes 2**64": {"tree": "cache", "bytes": 2**64},
    "bytes '9999999TiB' (a typo away from a real size)": {"tree": "cache", "bytes": "9999999TiB"},
    "path with a NUL byte": {"tree": "cache", "bytes": 1024, "path": "a\x00b"},
}


@pytest.mark.parametrize("body", list(CRASHERS.values()), ids=list(CRASHERS))
def test_hostile_but_well_formed_bodies_are_4xx_not_500(
    api: tuple[DaemonSetup, Daemon], body: dict[str, Any]
) -> None:
    setup, _ = api
    body = {**body, "owner_pid": os.getpid()}
    with uds_client(setup.socket) as c:  # a 500 closes the connection: use a fresh client
        r = c.post("/v1/reservations", json=body)
    assert r.status_code in (422, 507), f"{r.status_code}: {r.text[:200]}"
    assert {"error", "message"} <= set(r.json())


def test_renew_is_200_and_moves_expiry(client: httpx.Client) -> None:
    rid = reserve(client, bytes=4096, ttl="1m").json()["id"]
    r = client.post(f"/v1/reservations/{rid}/renew", json={"ttl": "2h"})
    assert r.status_code == 200, r.text
    assert set(r.json()) == RESERVATION_KEYS
    assert r.json()["expires"] == pytest.approx(time.time() + 7200, abs=60)
    # No body: the default TTL (1 h).
    r = client.post(f"/v1/reservations/{rid}/renew")
    assert r.status_code == 200, r.text
    assert r.json()["expires"] == pytest.approx(time.time() + 3600, abs=60)
    # Seconds as a number work too; a bad TTL or an extra key is 422.
    assert client.post(f"/v1/reservations/{rid}/renew", json={"ttl": 90}).status_code == 200
    assert_json_error(client.post(f"/v1/reservations/{rid}/renew", json={"ttl": "later"}), 422)
    assert_json_error(client.post(f"/v1/reservations/{rid}/renew", json={"ttl": 5, "x": 1}), 422)
    assert client.delete(f"/v1/reservations/{rid}").status_code == 200
    assert_json_error(client.post(f"/v1/reservations/{rid}/renew"), 404)


def test_grow_is_200_then_507_with_the_refusals_numbers(
    api: tuple[DaemonSetup, Daemon], client: httpx.Client
) -> None:
    _setup, _ = api
    rid = reserve(client, bytes="1MiB").json()["id"]
    r = client.post(f"/v1/reservations/{rid}/grow", json={"bytes": "3MiB"})
    assert r.status_code == 200, r.text
    assert set(r.json()) == RESERVATION_KEYS
    assert r.json()["bytes"] == r.json()["outstanding"] == 3 * MiB
    r = client.post(f"/v1/reservations/{rid}/grow", json={"bytes": 1024 * MiB})
    assert r.status_code == 507, r.text
    assert r.headers.get("retry-after") == "5"
    body = r.json()
    assert set(body) == REFUSAL_KEYS and body["error"] == "refused"
    assert body["requested"] == 1024 * MiB  # nothing of it written yet
    assert body["shortfall"] == body["requested"] - body["available"] > 0
    # Refused: the reservation keeps what it had.
    assert client.get(f"/v1/reservations/{rid}").json()["bytes"] == 3 * MiB
    # A smaller total gives the difference back.
    assert client.post(f"/v1/reservations/{rid}/grow", json={"bytes": 4096}).json()["bytes"] == 4096
    assert_json_error(client.post(f"/v1/reservations/{rid}/grow", json={"bytes": "lots"}), 422)
    assert_json_error(client.post(f"/v1/reservations/{rid}/grow", json={}), 422)
    assert client.delete(f"/v1/reservations/{rid}").status_code == 200
    assert_json_error(client.post(f"/v1/reservations/{rid}/grow", json={"bytes": 8192}), 404)
    assert_json_error(client.post("/v1/reservations/r-nope/grow", json={"bytes": 8192}), 404)


# -- status, sweep --------------------------------------------------------------------------------


def test_status_is_200_with_volumes_trees_reservations_and_the_daemons_view(
    api: tuple[DaemonSetup, Daemon], client: httpx.Client
) -> None:
    setup, d = api
    rid = reserve(client, bytes=8192, job="status-probe").json()["id"]
    try:
        r = client.get("/v1/status")
        assert r.status_code == 200
        st = r.json()
        assert st["level"] in ("ok", "warn", "critical")
        assert st["policy"] == str(setup.policy)
        vols = [v for v in st["volumes"] if v["mount"] == str(setup.mount)]
        assert len(vols) == 1 and vols[0]["floor"] == 4 * MiB
        assert {t["name"] for t in st["trees"]} == {"cache", "scratch"}
        assert rid in {x["id"] for x in st["reservations"]}
        daemon = st["daemon"]
        assert daemon["pid"] == d.pid
        assert daemon["socket"] == str(setup.socket)
        assert any(v["mount"] == str(setup.mount) for v in daemon["volumes"])
    finally:
        client.delete(f"/v1/reservations/{rid}")


def _make_orphan(scratch: Path) -> Path:
    job = scratch / ".tmpabc123"
    pcm = job / "fa_v2" / "audio" / "0.pcm"
    fill_file(pcm, 256 * 1024)
    old = time.time() - 7200
    for p in (pcm, pcm.parent, pcm.parent.parent, job):
        os.utime(p, (old, old))
    return job


def test_sweep_dry_run_plans_and_deletes_nothing_then_a_real_sweep_deletes(
    api: tuple[DaemonSetup, Daemon], client: httpx.Client
) -> None:
    setup, _ = api
    job = _make_orphan(setup.mount / "scratch")
    try:
        r = client.post("/v1/sweep", json={"tree": "scratch", "dry_run": True})
        assert r.status_code == 200, r.text
        data = r.json()
        assert data["dry_run"] is True and data["deleted_bytes"] == 0
        items = data["items"]
        assert [(i["tree"], i["reason"], i["deleted"]) for i in items] == [
            ("scratch", "orphan", False)
        ]
        assert items[0]["path"].endswith(".tmpabc123")
        assert job.exists()

        r = client.post("/v1/sweep", json={"tree": "scratch"})
        assert r.status_code == 200, r.text
        assert r.json()["dry_run"] is False
        assert r.json()["items"][0]["deleted"] is True
        assert not job.exists()
    finally:
        shutil.rmtree(job, ignore_errors=True)


def test_sweep_bad_bodies(client: httpx.Client) -> None:
    assert_json_error(client.post("/v1/sweep", json={"tree": "nope"}), 422)
    assert_json_error(client.post("/v1/sweep", json={"dry_run": "perhaps"}), 422)
    assert_json_error(client.post("/v1/sweep", json={"dry_run": True, "force": True}), 422)
    # No body at all: sweep everything.
    assert client.post("/v1/sweep").status_code == 200


# -- OpenAPI --------------------------------------------------------------------------------------


def test_openapi_lists_the_endpoints(client: httpx.Client) -> None:
    r = client.get("/openapi.json")
    assert r.status_code == 200
    schema = r.json()
    assert schema["openapi"].startswith("3.")
    paths = schema["paths"]
    expected = {
        ("/v1/reservations", "post"),
        ("/v1/reservations/{rid}", "get"),
        ("/v1/reservations/{rid}", "delete"),
        ("/v1/reservations/{rid}/renew", "post"),
        ("/v1/reservations/{rid}/grow", "post"),
        ("/v1/estimate", "post"),
        ("/v1/guard/call", "post"),
        ("/v1/guard/call/wait", "post"),
        ("/v1/status", "get"),
        ("/v1/sweep", "post"),
        ("/v1/events", "get"),
        ("/metrics", "get"),
    }
    listed = {(p, m) for p, ops in paths.items() for m in ops}
    assert expected <= listed, expected - listed
    # One protocol for both front ends of the guard: the Python guard's own endpoints are gone.
    assert {"/v1/guard", "/v1/guard/wait"} & set(paths) == set()
    post = paths["/v1/reservations"]["post"]["responses"]
    assert {"201", "507", "422"} <= set(post)
    assert "404" in paths["/v1/reservations/{rid}"]["delete"]["responses"]
    assert {"ReservationOut", "RefusalOut", "ErrorOut"} <= set(schema["components"]["schemas"])
    refusal = schema["components"]["schemas"]["RefusalOut"]["properties"]
    assert set(refusal) >= REFUSAL_KEYS


# -- estimate -------------------------------------------------------------------------------------


@pytest.mark.skipif(shutil.which("ffmpeg") is None, reason="ffmpeg not installed")
def test_estimate_gives_each_outputs_bytes_and_tree_or_why_not(
    api: tuple[DaemonSetup, Daemon], client: httpx.Client
) -> None:
    setup, _ = api
    wav = setup.tree / "est.wav"
    subprocess.run(
        ["ffmpeg", "-loglevel", "error", "-y", "-f", "lavfi", "-i", "sine=duration=3", "-ac",
         "1", "-ar", "16000", str(wav)],
        check=True,
    )  # fmt: skip
    pcm = ["-f", "f32le", "-acodec", "pcm_f32le", "-ar", "16000", "-ac", "1"]
    try:
        r = client.post("/v1/estimate", json={
            "args": ["-y", "-ss", "0.5", "-to", "2.5", "-i", "est.wav", *pcm, "../scratch/o.pcm",
                     *pcm, "/elsewhere/whole.pcm"],
            "cwd": str(setup.tree),
        })  # fmt: skip
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["estimable"] is True, body
        first, second = body["outputs"]
        assert first["path"] == str(setup.mount / "scratch" / "o.pcm")
        assert (first["bytes"], first["tree"], first["in_tree"]) == (2 * 64_000, "scratch", True)
        assert second["bytes"] == 2 * 64_000 and second["tree"] is None  # not on our volume
        assert body["total_bytes"] == 4 * 64_000
        r = client.post("/v1/estimate", json={"args": ["-i", str(wav), "-c:a", "aac", "o.m4a"],
                                               "cwd": "/tmp"})  # fmt: skip
        assert r.status_code == 200 and r.json()["estimable"] is False, r.text
        assert "not PCM or WAV" in r.json()["reason"]
        r = client.post("/v1/estimate", json={"args": ["-i", "est.wav", *pcm, "o.pcm"]})
        assert_json_error(r, 422)
        assert "give cwd" in r.json()["message"]
    finally:
        wav.unlink()


# -- metrics --------------------------------------------------------------------------------------


def test_metrics_pass_promtool_and_carry_volume_and_tree_labels(
    api: tuple[DaemonSetup, Daemon], client: httpx.Client
) -> None:
    setup, d = api
    rid = reserve(client, bytes=4096).json()["id"]
    client.delete(f"/v1/reservations/{rid}")
    vol = f'volume="{setup.mount}"'
    eventually(
        lambda: 'janitor_reservations_granted_total{tree="cache"}' in d.metrics(),
        what="the granted counter",
    )
    r = client.get("/metrics")
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/plain")
    text = r.text
    for name in (
        "janitor_volume_free_bytes",
        "janitor_volume_size_bytes",
        "janitor_volume_floor_bytes",
        "janitor_volume_level",
        "janitor_volume_headroom_bytes",
        "janitor_volume_floor_eta_seconds",
    ):
        assert f"{name}{{{vol}}}" in text, name
    for tree in ("cache", "scratch"):
        assert f'janitor_tree_usage_bytes{{tree="{tree}",{vol}}}' in text, tree
    assert f'janitor_tree_quota_bytes{{tree="cache",{vol}}} 8.388608e+06' in text
    assert f"janitor_volume_level{{{vol}}} 0.0" in text

    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool is not installed (Debian package prometheus)")
    done = subprocess.run(
        [promtool, "check", "metrics"], input=text, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stdout + done.stderr


# -- schemathesis ---------------------------------------------------------------------------------


def test_schemathesis_against_the_served_schema(tmp_path: Path) -> None:
    """Every operation but ``/v1/events`` (an endless stream: a request never completes), with
    positive and negative data, sent over the Unix socket; no 5xx (but the documented 507) and
    every response conforms to the schema (status code, content type, body).

    Sweeps with real deletion stay in: this daemon has its own, empty tmpfs. Positive bodies of
    ``POST /v1/reservations`` are steered to the real tree and a live owner half of the time, so
    generation reaches admission instead of stopping at "unknown tree".
    """
    import schemathesis
    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis.errors import Unsatisfiable
    from schemathesis import GenerationMode
    from schemathesis.checks import not_a_server_error
    from schemathesis.specs.openapi.checks import (
        content_type_conformance,
        response_schema_conformance,
        status_code_conformance,
    )

    checks = [
        not_a_server_error,
        status_code_conformance,
        content_type_conformance,
        response_schema_conformance,
    ]
    with daemon_setup(tmp_path, volume={"floor": "4MiB"}) as setup, running_daemon(setup) as d:
        with d.client() as c:
            raw = c.get("/openapi.json").json()
        config = schemathesis.Config.from_dict(
            # 507 is the documented refusal, not a server error.
            {"checks": {"not_a_server_error": {"expected-statuses": ["2xx", "3xx", "4xx", "507"]}}}
        )
        schema = schemathesis.openapi.from_dict(raw, config=config)
        failures: dict[tuple[str, str, int, str], str] = {}  # one example per kind of failure
        calls = [0]
        skipped: list[str] = []

        def exercise(op: Any, mode: Any) -> None:
            steer = [0]

            @settings(
                max_examples=15,
                deadline=None,
                derandomize=True,
                database=None,
                suppress_health_check=list(HealthCheck),
                phases=[Phase.explicit, Phase.generate],
            )
            @given(case=op.as_strategy(generation_mode=mode))
            def run(case: Any) -> None:
                if (
                    op.path == "/v1/reservations"
                    and mode is GenerationMode.POSITIVE
                    and isinstance(case.body, dict)
                ):
                    steer[0] += 1
                    if steer[0] % 2:
                        case.body["tree"] = "cache"
                        if "owner_pid" in case.body:
                            case.body["owner_pid"] = os.getpid()
                kw = case.as_transport_kwargs(base_url="http://janitor")
                req = {k: kw[k] for k in ("method", "url", "headers", "params", "json") if k in kw}
                if "data" in kw:
                    req["content"] = kw["data"]
                with d.client() as cc:  # a fresh connection: a 500 would close the old one
                    resp = cc.request(**req)
                calls[0] += 1
                try:
                    case.validate_response(resp, checks=checks)
                except (Exception, BaseExceptionGroup) as exc:  # collect them all
                    kinds = [type(e).__name__ for e in getattr(exc, "exceptions", (exc,))]
                    key = (
                        f"{op.method.upper()} {op.path}",
                        str(mode),
                        resp.status_code,
                        ",".join(kinds),
                    )
                    failures.setdefault(key, str(exc)[:1200])

            try:
                run()
            except Unsatisfiable:
                # No negative data exists for an operation without constrained inputs
                # (GET /v1/status, /metrics; {rid} is any string).
                assert mode is GenerationMode.NEGATIVE, op.path
                skipped.append(f"{op.method.upper()} {op.path}")

        for result in schema.get_all_operations():
            op = result.ok()
            if op.path != "/v1/events":
                for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
                    exercise(op, mode)
        assert d.proc.poll() is None, "the daemon died under schemathesis:\n" + d.stderr()
    assert calls[0] > 50
    assert not failures, "\n\n".join(
        f"{op} [{mode}] -> {status} ({kinds}):\n{text}"
        for (op, mode, status, kinds), text in failures.items()
    )


# -- the thread pool ------------------------------------------------------------------------------


def test_the_thread_pool_keeps_the_event_loop_free_and_hands_back_results_and_errors() -> None:
    """Blocking calls (a ledger write waiting for another writer, a sweep) run in worker threads:
    a slow one does not hold up the loop or a quick one, errors arrive as exceptions, and with
    every worker busy a call waits for one instead of failing."""
    import asyncio
    import threading

    from janitor.daemon.thread_pool import ThreadPool
    from janitor.errors import UnknownReservation

    off = ThreadPool(max_workers=2)
    release = threading.Event()

    def slow(name: str) -> str:
        release.wait(10)
        return name

    def boom() -> None:
        raise UnknownReservation("r-x")

    async def main() -> None:
        ticks = 0

        async def ticker() -> None:
            nonlocal ticks
            while not release.is_set():
                ticks += 1
                await asyncio.sleep(0.01)

        tick = asyncio.create_task(ticker())
        first = asyncio.create_task(off.run(slow, "first"))
        assert await off.run(lambda: "quick") == "quick"  # beside the blocked worker
        with pytest.raises(UnknownReservation):
            await off.run(boom)
        second = asyncio.create_task(off.run(slow, "second"))  # now both workers block
        queued = asyncio.create_task(off.run(lambda: "queued"))
        await asyncio.sleep(0.3)
        assert ticks >= 10  # the loop ran all along
        assert not queued.done() and not first.done()
        release.set()
        assert await asyncio.gather(first, second, queued, tick) == [
            "first",
            "second",
            "queued",
            None,
        ]

    try:
        asyncio.run(main())
    finally:
        off.close()
