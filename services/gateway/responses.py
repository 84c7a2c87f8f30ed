"""The error statuses each kind of gateway route can answer, as OpenAPI `responses=` sets.

Every route can answer 413 (the body limit runs before routing); a signed-in route adds 401 and the
session store's 503; a route for a role adds 403; an asking route the per-user rate limit (429) and
the request-id claim (409); a forwarded route whatever the service behind it answers, passed on as is.
"""
from __future__ import annotations

from typing import Any

from shared.web import error_responses

_BODY_LIMIT = {413: "The body is over MAX_BODY_BYTES, or MAX_UPLOAD_BYTES for uploads (payload_too_large)"}
_SESSION_STORE = {503: "The session store (Redis) is unavailable (session_store_unavailable, with Retry-After)"}
_SIGNED_IN = {401: "Missing, invalid or expired bearer token (unauthorized)", **_SESSION_STORE}
_ROLE = {403: "None of the caller's roles grants this route (forbidden)"}
_ASKING = {
    409: "The X-Request-ID sent was already used for a question (request_id_taken)",
    429: "Over CHAT_REQUESTS_PER_MINUTE (rate_limited, with Retry-After)",
}


def _service(name: str) -> dict[int, str]:
    return {
        502: f"The {name} service answered 502 (for chat: the LLM failed, llm_unavailable)",
        503: f"The {name} service, or something behind it, is unavailable ({name}_unavailable, "
        "session_store_unavailable, ..., with Retry-After)",
        504: f"The {name} service did not answer in time ({name}_timeout)",
    }


LOGIN = error_responses(
    {
        **_BODY_LIMIT,
        401: "Wrong username or password, or a disabled user (unauthorized)",
        429: "Too many failed logins for this username or address (rate_limited, with Retry-After)",
        **_SESSION_STORE,
    }
)
SIGNED_IN = error_responses({**_BODY_LIMIT, **_SIGNED_IN})
OWN_SESSION = error_responses(
    {**_BODY_LIMIT, **_SIGNED_IN, 404: "No session of the caller has this id (not_found)"}
)
FEEDBACK = error_responses(
    {
        **_BODY_LIMIT,
        **_SIGNED_IN,
        **_ROLE,
        404: "No answer of the caller has this request id, or it is older than FEEDBACK_WINDOW_S (not_found)",
        422: "Invalid body: rating not 1 or -1, comment over 2000 characters (invalid_request)",
        429: "The caller has sent FEEDBACK_PER_MINUTE ratings in the last 60 seconds (rate_limited)",
    }
)


_ADMIN = {**_BODY_LIMIT, **_SIGNED_IN, **_ROLE}
_UNKNOWN_USER = {404: "No user has exactly this name (not_found)"}
USERS = error_responses(_ADMIN)
NEW_USER = error_responses(
    {
        **_ADMIN,
        409: "A user has this name, as typed or in another case (user_exists)",
        422: "Invalid name, password or roles (invalid_request)",
    }
)
A_USER = error_responses({**_ADMIN, **_UNKNOWN_USER})
USER_CHANGE = error_responses(
    {
        **_ADMIN,
        **_UNKNOWN_USER,
        409: "The caller would disable, or take the admin role from, its own account (own_account)",
        422: "Invalid roles, or nothing to change (invalid_request)",
    }
)
USER_DELETE = error_responses(
    {**_ADMIN, **_UNKNOWN_USER, 409: "The caller would delete its own account (own_account)"}
)
PASSWORD_RESET = error_responses({**_ADMIN, **_UNKNOWN_USER, 422: "Invalid password (invalid_request)"})


OWN_PASSWORD = error_responses(
    {
        **_BODY_LIMIT,
        **_SIGNED_IN,
        403: "current_password is not the caller's password (wrong_password)",
        422: "new_password shorter than 8 or longer than 1024 characters (invalid_request)",
        429: "Too many failed logins, or wrong current passwords, for this user or address (rate_limited)",
    }
)


def forwarded(service: str, extra: dict[int, str] | None = None, *, asking: bool = False) -> dict[int | str, dict[str, Any]]:
    """A route passed on to `service`: the gateway's own checks, then that service's answers (`extra`:
    the statuses particular to the route, e.g. 404 for a document that does not exist)."""
    described = {
        **_BODY_LIMIT,
        **_SIGNED_IN,
        **_ROLE,
        **(_ASKING if asking else {}),
        400: f"Malformed JSON, or a request the {service} service refuses",
        422: f"A request the {service} service finds invalid (invalid_request)",
        **_service(service),
        **(extra or {}),
    }
    return error_responses(dict(sorted(described.items())))
