"""One table maps errors to HTTP statuses (``janitor.error_statuses``): the daemon's error
handlers, its routes and the guard's verdicts read it, and no module that answers a client
writes an error status of its own; each error is answered as it was before the table.

The check of the source reads it with ``ast``; the answers are made by the app's own handler
from real exceptions.
"""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest

import janitor
from janitor import errors
from janitor.daemon.routes.errors import janitor_error
from janitor.error_statuses import ERROR_STATUSES, for_error, status_of
from janitor.guarding import protocol

PKG = Path(janitor.__file__).parent


def answering_modules() -> dict[str, Path]:
    """The modules that answer a client of the daemon: the API app (``daemon/api.py`` and
    ``daemon/routes/``) and every module of ``guarding/`` that makes a verdict."""
    found = {"janitor/daemon/api.py": PKG / "daemon" / "api.py"}
    for path in sorted((PKG / "daemon" / "routes").glob("*.py")):
        found[str(path.relative_to(PKG.parent))] = path
    for path in sorted((PKG / "guarding").rglob("*.py")):
        if "Verdict(" in path.read_text() and path.name != "protocol.py":
            found[str(path.relative_to(PKG.parent))] = path
    return found


def error_status_literals(source: str) -> list[tuple[int, int]]:
    """Each integer of ``source`` that could be an HTTP error status (400 to 599), and its
    line."""
    return [
        (node.value, node.lineno)
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Constant) and type(node.value) is int and 400 <= node.value <= 599
    ]


def test_the_status_check_sees_a_status_written_as_a_number() -> None:
    source = (
        '"""507 in a docstring is words."""\n'
        'ok = Verdict(200, {"action": "exec"})\n'
        'refused = Verdict(507, {"action": "refuse"})\n'
        'def f(): return 404, b"{}"\n'
        "x = {422: 'Bad request'}\n"
        "n = 4096\n"
    )
    assert sorted(error_status_literals(source), key=lambda s: s[1]) == [
        (507, 3),
        (404, 4),
        (422, 5),
    ]


def test_the_answering_modules_are_the_app_and_the_verdicts() -> None:
    names = set(answering_modules())
    assert {
        "janitor/daemon/api.py",
        "janitor/daemon/routes/errors.py",
        "janitor/daemon/routes/guard.py",
        "janitor/guarding/verdict.py",
        "janitor/guarding/probe_call.py",
    } <= names


@pytest.mark.parametrize("name", sorted(answering_modules()))
def test_no_module_that_answers_writes_an_error_status_of_its_own(name: str) -> None:
    """Every error status an answer carries is read from ``janitor.error_statuses``."""
    assert error_status_literals(answering_modules()[name].read_text()) == []


def test_the_table_names_each_kind_once_and_every_error_finds_a_row() -> None:
    kinds = [row.kind for row in ERROR_STATUSES]
    assert len(kinds) == len(set(kinds))
    raised = [cls for row in ERROR_STATUSES for cls in row.raised]
    assert len(raised) == len(set(raised))
    # the last resort: every error the janitor raises has a row
    assert errors.JanitorError in raised


def _refusal(cls: type[errors.ReservationRefused], error: str) -> errors.ReservationRefused:
    numbers = {"tree": "media_cache", "volume": "/mnt/v", "requested": 10, "free": 5}
    return cls.from_dict({**numbers, "error": error})


#: Each error a ``Janitor`` call can raise, and the status and ``error`` it was answered with
#: before the table (``api._janitor_error``'s ``isinstance`` chain at 7673b5f), written out.
ANSWERED_BEFORE: list[tuple[errors.JanitorError, int, str]] = [
    (errors.UnknownReservation("r-1"), 404, "not_found"),
    (errors.UnknownPin("p-1"), 404, "not_found"),
    (errors.LedgerFull("database or disk is full"), 507, "ledger_full"),
    (errors.LedgerError("unable to open database file"), 503, "ledger_unavailable"),
    (errors.ConfigError("bad size '2Q'"), 422, "bad_request"),
    (errors.PolicyError("policy.toml: bad", ["trees.x.quota: bad"]), 422, "bad_request"),
    (errors.UnknownTree("no tree 'x'"), 422, "bad_request"),
    (errors.SpaceRisk("r-1", "/mnt/v", "critical"), 400, "error"),
    (errors.JanitorError("anything else"), 400, "error"),
]


@pytest.mark.parametrize(
    ("exc", "status", "kind"),
    ANSWERED_BEFORE,
    ids=[type(e).__name__ for e, _, _ in ANSWERED_BEFORE],
)
def test_each_error_is_answered_as_before(exc: errors.JanitorError, status: int, kind: str) -> None:
    answer = janitor_error(exc)
    assert answer.status_code == status
    assert json.loads(answer.body) == {"error": kind, "message": str(exc)}
    assert "retry-after" not in answer.headers
    assert for_error(exc).status == status


@pytest.mark.parametrize(
    ("cls", "error"),
    [
        (errors.ReservationRefused, "refused"),
        (errors.NeverFits, "never_fits"),
        (errors.WaitWontHelp, "wait_wont_help"),
    ],
)
def test_a_refusal_is_507_with_its_numbers_and_retry_after(
    cls: type[errors.ReservationRefused], error: str
) -> None:
    exc = _refusal(cls, error)
    answer = janitor_error(exc)
    assert answer.status_code == 507
    assert answer.headers["retry-after"] == "5"
    assert json.loads(answer.body) == exc.as_dict()
    assert exc.as_dict()["error"] == error


def test_the_front_ends_carry_out_the_tables_refusal() -> None:
    """The front ends check a verdict's status (``protocol.VERDICTS``; the compiled guard's
    own test, in ``guard.c``): a refusal there is the table's refusal."""
    assert (status_of("refused"), "refuse") in protocol.VERDICTS
    source = (PKG / "native" / "guard.c").read_text()
    in_c = set(re.findall(r'status == (\d+) && !strcmp\(action, "refuse"\)', source))
    assert in_c == {str(status_of("refused"))}
