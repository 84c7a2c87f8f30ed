"""Named errors mapped to JSON HTTP responses in one place: `{"error": code, "message": text}`."""
from __future__ import annotations

from pydantic import BaseModel, Field


class ErrorBody(BaseModel):
    """The body of every error response, declared in the OpenAPI schema of each route that can fail."""

    error: str = Field(description="A stable code, e.g. not_found or chroma_unavailable.")
    message: str


class StartRefused(Exception):
    """A service cannot start with its settings or data. Raised from its lifespan, its message (naming the
    variables to change) is printed as one line, `<service>: cannot start: <message>`, without a traceback."""


_CAUSE_CHARS = 300  # enough for an address and a reason; a cause may quote a whole upstream answer


class ServiceError(Exception):
    status_code = 500
    code = "internal_error"

    def __init__(self, message: str | None = None, *, code: str | None = None, status_code: int | None = None) -> None:
        super().__init__(message or self.code)
        self.message = message or self.code.replace("_", " ")
        if code:
            self.code = code
        if status_code:
            self.status_code = status_code

    def body(self) -> dict:
        return {"error": self.code, "message": self.message}

    def headers(self) -> dict[str, str] | None:
        return None

    def log_fields(self) -> dict[str, str]:
        """The fields of the warning a failed request logs: its code and message, and what raised it when
        something did (a timeout, a refused connection...), which the response leaves out. Of the cause, its
        first line only: a database error goes on with the statement and its parameters, users' words among them."""
        fields = {"error": self.code, "detail": self.message}
        if (cause := self.__cause__) is not None:
            said = str(cause).partition("\n")[0].strip()
            fields["cause"] = f"{type(cause).__name__}: {said}"[:_CAUSE_CHARS] if said else type(cause).__name__
        return fields

    def event_data(self) -> dict:
        """The data of a stream's `error` event: the body a plain answer would have had, with its status and its
        Retry-After (seconds or a date) when it would carry one, so that a relay not yet streaming can answer them."""
        data: dict = {**self.body(), "status": self.status_code}
        if retry_after := (self.headers() or {}).get("Retry-After"):
            data["retry_after"] = retry_after
        return data


class BadRequest(ServiceError):
    status_code = 400
    code = "bad_request"


class Unauthorized(ServiceError):
    status_code = 401
    code = "unauthorized"

    def headers(self) -> dict[str, str] | None:
        return {"WWW-Authenticate": "Bearer"}


class Forbidden(ServiceError):
    status_code = 403
    code = "forbidden"


class NotFound(ServiceError):
    status_code = 404
    code = "not_found"


# The Retry-After of a 503 that knows no better time: a dependency restarting or failing over is often back
# within seconds, and a client that retries sooner only adds load. Not measured; a round figure.
RETRY_AFTER_S = 5


class DependencyUnavailable(ServiceError):
    """A dependency (redis, rabbitmq, retrieval, llm, ...) did not answer in time: 503 naming it, with a
    Retry-After (RFC 9110, 10.2.3): `retry_after`, seconds or an HTTP date relayed as received, else RETRY_AFTER_S.
    A subclass answering another status (502, say) sends none: the header means nothing there."""

    status_code = 503

    def __init__(self, dependency: str, message: str | None = None, *, retry_after: int | str | None = None) -> None:
        super().__init__(message or f"{dependency} is unavailable", code=f"{dependency}_unavailable")
        self.dependency = dependency
        self.retry_after = str(retry_after if retry_after is not None else RETRY_AFTER_S)

    def headers(self) -> dict[str, str] | None:
        return {"Retry-After": self.retry_after} if self.status_code == 503 else None


class UpstreamTimeout(ServiceError):
    status_code = 504

    def __init__(self, dependency: str, message: str | None = None) -> None:
        super().__init__(message or f"{dependency} did not answer in time", code=f"{dependency}_timeout")
        self.dependency = dependency
