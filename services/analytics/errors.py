"""Analytics' named errors (mapped to JSON by shared.web like every ServiceError)."""
from __future__ import annotations

from shared.errors import ServiceError


class TooManyBuckets(ServiceError):
    """A time series would have more points than anyone can read: 422, like every other bad parameter."""

    status_code = 422
    code = "invalid_request"

    def __init__(self, *, buckets: int, bucket: str, limit: int) -> None:
        super().__init__(
            f"bucket: the range holds {buckets:,} {bucket} buckets, more than {limit:,}; "
            "choose a larger bucket or a shorter range"
        )
