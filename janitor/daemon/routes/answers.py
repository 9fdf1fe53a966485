"""How the daemon's routes write their answers: JSON encoded once, and errors by the table.

Answers are serialised once, from the documented models' keys, rather than re-validated against
``response_model`` (which stays, for the schema). An error's status is read from the one table
(:mod:`janitor.error_statuses`), and its body is ``{"error": kind, "message": ...}``
(:class:`~janitor.daemon.routes.models.ErrorOut`).
"""

from __future__ import annotations

import json
from typing import Any

from fastapi.responses import Response

from janitor.daemon.routes.models import ErrorOut
from janitor.error_statuses import status_of

__all__ = ["ERROR_RESPONSES", "dumps", "error_answer", "json_answer"]

#: The errors every route documents (OpenAPI ``responses``), beside its own.
ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    status_of("not_found"): {"model": ErrorOut, "description": "Unknown reservation"},
    status_of("bad_request"): {"model": ErrorOut, "description": "Bad request"},
}


def dumps(data: Any) -> bytes:
    """JSON as Starlette's JSONResponse renders it (compact, UTF-8, no NaN)."""
    return json.dumps(data, ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode()


def json_answer(body: bytes, status: int = 200) -> Response:
    """A JSON answer of ``body``, encoded already."""
    return Response(body, status_code=status, media_type="application/json")


def error_answer(kind: str, message: str) -> tuple[int, bytes]:
    """An error of ``kind`` as a blocking half of a route hands it back: its status (from the
    table) and its body."""
    return status_of(kind), dumps({"error": kind, "message": message})
