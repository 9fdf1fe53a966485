"""The API app's error handlers: every error is answered as JSON, its status from the table.

An error a ``Janitor`` call raised, a request that does not validate (or whose body cannot be
read), a route or a method the app does not have: each is answered ``{"error": kind,
"message": ...}`` with the status :mod:`janitor.error_statuses` gives its kind; a refusal with
its numbers and ``Retry-After``.
"""

from __future__ import annotations

from http import HTTPStatus

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from janitor.error_statuses import for_error, status_of
from janitor.errors import JanitorError, ReservationRefused

__all__ = ["add_error_handlers", "janitor_error"]

#: The kinds of the errors Starlette answers by itself (no such route; no such method).
_ROUTING_KINDS = ("not_found", "method_not_allowed")


def _error(status: int, kind: str, exc: BaseException | str) -> JSONResponse:
    return JSONResponse({"error": kind, "message": str(exc)}, status_code=status)


def janitor_error(exc: JanitorError) -> JSONResponse:
    """The answer to an error a ``Janitor`` call raised: its row of the table; a refusal's body
    is its numbers."""
    row = for_error(exc)
    headers = None if row.retry_after_s is None else {"Retry-After": str(row.retry_after_s)}
    if isinstance(exc, ReservationRefused):
        return JSONResponse(exc.as_dict(), status_code=row.status, headers=headers)
    return _error(row.status, row.kind, exc)


def add_error_handlers(app: FastAPI) -> None:
    """Answer ``app``'s errors as JSON, each with its status from the table."""
    routing = {status_of(kind): kind for kind in _ROUTING_KINDS}

    @app.exception_handler(JanitorError)
    async def _on_janitor_error(request: Request, exc: JanitorError) -> JSONResponse:
        return janitor_error(exc)

    @app.exception_handler(StarletteHTTPException)
    async def _on_http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        # An undecodable body (Starlette's 400): a bad request like any other.
        if exc.status_code == HTTPStatus.BAD_REQUEST:
            return _error(status_of("bad_request"), "bad_request", f"body: {exc.detail}")
        kind = routing.get(exc.status_code, "error")
        return _error(exc.status_code, kind, str(exc.detail))

    @app.exception_handler(RequestValidationError)
    async def _on_validation(request: Request, exc: RequestValidationError) -> JSONResponse:
        first = exc.errors()[0] if exc.errors() else {"loc": (), "msg": "invalid request"}
        where = ".".join(str(p) for p in first.get("loc", ()) if p != "body") or "body"
        return _error(status_of("bad_request"), "bad_request", f"{where}: {first.get('msg')}")
