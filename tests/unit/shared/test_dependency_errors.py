"""Which errors say when to try again: a 503 always, with its own time or the default; a 502 or 504 never."""
from __future__ import annotations

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
