"""Which errors say when to try again: a 503 always, with its own time or the default; a 502 or 504 never.
And what a failed request's warning says of its cause, which the response leaves out."""
from __future__ import annotations

import pytest

from services.chat.errors import LLMUnavailable
from shared.errors import RETRY_AFTER_S, DependencyUnavailable, UpstreamTimeout


def test_a_503_carries_the_default_retry_after_unless_given_one():
    assert DependencyUnavailable("redis").headers() == {"Retry-After": str(RETRY_AFTER_S)}
    assert DependencyUnavailable("redis", retry_after=12).headers() == {"Retry-After": "12"}
    date = "Wed, 21 Oct 2026 07:28:00 GMT"  # relayed as received, an HTTP date too
    assert DependencyUnavailable("analytics", retry_after=date).headers() == {"Retry-After": date}


def test_no_retry_after_on_a_502_or_a_504():
    assert LLMUnavailable("the model failed").headers() is None
    assert UpstreamTimeout("chat").headers() is None


def _raised_from(cause: Exception) -> DependencyUnavailable:
    try:
        raise DependencyUnavailable("session_store") from cause
    except DependencyUnavailable as error:
        return error


REFUSED = "Error 111 connecting to 127.0.0.1:6379. Connection refused."
WITH_STATEMENT = "connection lost\n[SQL: INSERT INTO requests]\n[parameters: ('my question',)]"


@pytest.mark.parametrize(
    ("cause", "logged"),
    [
        (TimeoutError(), "TimeoutError"),  # nothing said: the type alone
        (ConnectionRefusedError(REFUSED), f"ConnectionRefusedError: {REFUSED}"),
        # A database error goes on with its statement and parameters, which may hold users' questions.
        (RuntimeError(WITH_STATEMENT), "RuntimeError: connection lost"),
        (RuntimeError("x" * 1000), "RuntimeError: " + "x" * 286),  # at most 300 characters
    ],
)
def test_a_failures_warning_names_its_cause_in_one_short_line(cause, logged):
    fields = _raised_from(cause).log_fields()
    assert fields == {"error": "session_store_unavailable", "detail": "session_store is unavailable", "cause": logged}


def test_a_failure_raised_from_nothing_logs_no_cause():
    assert DependencyUnavailable("redis").log_fields() == {"error": "redis_unavailable", "detail": "redis is unavailable"}
