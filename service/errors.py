"""One error shape for every failure: `{"error": {"code", "message", "details"}}`."""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel
from sqlalchemy.exc import DataError, OperationalError
from sqlalchemy.exc import TimeoutError as SQLAlchemyTimeoutError
from starlette.exceptions import HTTPException

log = logging.getLogger(__name__)


class ApiError(Exception):
    """An error a client caused or can act on, with its HTTP status."""

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        details: Any = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.details = details
        self.headers = headers


class ErrorDetail(BaseModel):
    code: str
    message: str
    details: Any = None


class ErrorResponse(BaseModel):
    """The body of every 4xx and 5xx response."""

    error: ErrorDetail


# documented on every API route, so the OpenAPI description says what errors look like
ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    status: {"model": ErrorResponse, "description": description}
    for status, description in (
        (401, "no API token, or an unknown or revoked one"),
        (403, "the token's role may not do this"),
        (404, "no such object (or not yours)"),
        (409, "conflicts with the object's state"),
        (413, "request body too large"),
        (422, "invalid request"),
        (503, "the database is unavailable; retry"),
    )
}


def not_found(what: str, key: object) -> ApiError:
    return ApiError(404, "not_found", f"{what} {key} does not exist")


def error_body(code: str, message: str, details: Any = None) -> dict[str, Any]:
    return {"error": {"code": code, "message": message, "details": details}}


def _validation_details(exc: RequestValidationError) -> list[dict[str, Any]]:
    """Pydantic's errors without the echoed input (it can be huge or binary)."""
    return [
        {key: value for key, value in error.items() if key in ("loc", "msg", "type")}
        for error in jsonable_encoder(exc.errors())
    ]


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(ApiError)
    async def _api_error(_request: Request, exc: ApiError) -> JSONResponse:
        return JSONResponse(
            error_body(exc.code, exc.message, jsonable_encoder(exc.details)),
            exc.status,
            headers=exc.headers,
        )

    @app.exception_handler(RequestValidationError)
    async def _invalid(_request: Request, exc: RequestValidationError) -> JSONResponse:
        details = _validation_details(exc)
        first = details[0] if details else {"loc": [], "msg": "invalid request"}
        where = ".".join(str(part) for part in first.get("loc", []))
        what = str(first.get("msg")).removeprefix("Value error, ")  # a validator's own words
        message = f"invalid request: {where}: {what}" if where else "invalid request"
        return JSONResponse(error_body("validation_error", message, details), 422)

    @app.exception_handler(HTTPException)
    async def _http(_request: Request, exc: HTTPException) -> JSONResponse:
        code = "not_found" if exc.status_code == 404 else f"http_{exc.status_code}"
        return JSONResponse(error_body(code, str(exc.detail)), exc.status_code, headers=exc.headers)

    @app.exception_handler(DataError)
    async def _unstorable(_request: Request, _exc: DataError) -> JSONResponse:
        # the database refused a value the schemas let through (PostgreSQL stores no NUL
        # character in text): nothing was written
        message = "a value in the request cannot be stored (e.g. it holds a NUL character)"
        return JSONResponse(error_body("invalid_value", message), 422)

    @app.exception_handler(OperationalError)
    @app.exception_handler(SQLAlchemyTimeoutError)
    async def _database_down(request: Request, exc: Exception) -> JSONResponse:
        # the database restarting or unreachable, or every pooled connection busy for the
        # pool's timeout: nothing was changed, ask to retry
        log.warning("database unavailable on %s %s: %s", request.method, request.url.path, exc)
        body = error_body("database_unavailable", "the database is unavailable; retry shortly")
        return JSONResponse(body, 503, headers={"Retry-After": "1"})

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error on %s %s", request.method, request.url.path)
        return JSONResponse(error_body("internal_error", "internal server error"), 500)
