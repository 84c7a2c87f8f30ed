"""Analytics' named errors (mapped to JSON by shared.web like every ServiceError)."""
from __future__ import annotations

from shared.errors import DependencyUnavailable, ServiceError


class TooManyBuckets(ServiceError):
    """A time series would have more points than anyone can read: 422, like every other bad parameter."""

    status_code = 422
    code = "invalid_request"

    def __init__(self, *, buckets: int, bucket: str, limit: int) -> None:
        super().__init__(
            f"bucket: the range holds {buckets:,} {bucket} buckets, more than {limit:,}; "
            "choose a larger bucket or a shorter range"
        )


class DatabaseBusy(DependencyUnavailable):
    """Every connection of the pool stayed in use for the whole pool timeout: the database cannot serve this
    request now, though it is up. A 503 like a database that is down, with a time to try again."""

    RETRY_AFTER_S = 2

    def __init__(self) -> None:
        message = "database is busy: every connection is in use; try again shortly"
        super().__init__("database", message, retry_after=self.RETRY_AFTER_S)


class QueryCancelled(DependencyUnavailable):
    """The database cancelled a statement before it had run for ANALYTICS_STATEMENT_TIMEOUT_S: someone cancelled
    it by hand (pg_cancel_backend). A 503 naming the database, which says no more than it knows."""

    def __init__(self, message: str = "database cancelled the query before it finished; try again later") -> None:
        super().__init__("database", message)


class QueryTimedOut(QueryCancelled):
    """The database cancelled a statement that ran past ANALYTICS_STATEMENT_TIMEOUT_S: a 503 naming the database,
    like one that is down, rather than a request (and a worker thread) waiting on it without end."""

    def __init__(self, *, timeout_s: float | None) -> None:
        limit = f", which may run for at most {timeout_s:g} s" if timeout_s is not None else ""
        super().__init__(f"database cancelled the query{limit}; try a shorter range, or again later")


class TooManyExports(ServiceError):
    """All export slots are streaming: 429, so that a download never waits on, or takes, the connections
    the reports need."""

    status_code = 429
    code = "too_many_exports"

    def __init__(self, *, limit: int, retry_after_s: int) -> None:
        super().__init__(f"{limit} CSV exports are being downloaded already; try again when one has finished")
        self.retry_after_s = retry_after_s

    def headers(self) -> dict[str, str]:
        return {"Retry-After": str(self.retry_after_s)}
