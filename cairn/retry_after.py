"""The wait an answer asks for in its Retry-After header (RFC 9110, 10.2.3): whole seconds or an HTTP date."""
from __future__ import annotations

import email.utils
import math
import time

import httpx


def retry_after_s(response: httpx.Response) -> float | None:
    """Seconds to wait before trying again (0 for a date already past); None without a readable header."""
    value = response.headers.get("Retry-After", "").strip()
    if value.isascii() and value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:  # "-0000": a date without a zone; HTTP dates are all in GMT
        return None
    return max(0.0, when.timestamp() - time.time())


def try_again_in(response: httpx.Response) -> str:
    """"try again in 5 seconds" for a 429 or 503 that says when; "" otherwise."""
    wait_s = retry_after_s(response) if response.status_code in (429, 503) else None
    if not wait_s:
        return ""
    seconds = math.ceil(wait_s)
    return f"try again in {seconds} second{'' if seconds == 1 else 's'}"
