"""Rating answers: who asked which request, and the FeedbackReceived event a rating becomes.

When the gateway forwards a question (/api/chat, /api/chat/stream, /v1/chat/completions) it records
who asked under the request id (the X-Request-ID the client sent or the one the gateway made; the
answer's metadata.request_id), for `FEEDBACK_WINDOW_S`. Only that user may rate that answer:
someone else's request, an unknown one and one older than the window are all 404, alike.

A request id a client sends is kept for its first question only: reusing it, even by the same user, is
refused (409), or another user could make someone else's answer theirs to rate.

Rating the same answer again replaces the earlier rating: every rating is published, and the latest
(by `occurred_at`) is the one that counts. Each user may publish `FEEDBACK_PER_MINUTE` ratings in any 60 seconds.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Literal, Protocol

from services.gateway.domain import Session
from services.gateway.event_envelope import envelope
from services.gateway.rate_limits import Limit, RateLimiter, count_rating
from shared.errors import NotFound, ServiceError
from shared.events import FeedbackReceived, FeedbackReceivedData

if TYPE_CHECKING:
    from shared.broker import EventPublisher

MAX_COMMENT_CHARS = 2000


class RequestOwners(Protocol):
    """Who asked which request, for a while. Methods raise DependencyUnavailable when the store does not answer."""

    async def claim(self, request_id: str, *, user_id: str, ttl_s: int) -> bool:
        """Record `user_id` as the asker of `request_id` for `ttl_s` seconds; False when the id is already on
        record (asked before, by anyone)."""

    async def owner(self, request_id: str) -> str | None:
        """The user who asked `request_id`, or None when unknown or forgotten."""

    async def release(self, request_id: str) -> None:
        """Forget who asked `request_id`, so that the id may be claimed again."""


class RequestIdTaken(ServiceError):
    status_code = 409
    code = "request_id_taken"


async def remember_request(*, owners: RequestOwners, request_id: str | None, user_id: str, ttl_s: int) -> None:
    """Record the caller as the asker of the request being forwarded; 409 when the id was used before.

    One request id names one question, even the same user's retry: analytics joins a question's events by it,
    so a reused id would count one answer (and its rating) twice."""
    if request_id is None:  # outside a request context (never in the app): nothing to rate later
        return
    if not await owners.claim(request_id, user_id=user_id, ttl_s=ttl_s):
        raise RequestIdTaken("this X-Request-ID was already used for a question; send a new one or none")


async def rate_answer(
    *,
    owners: RequestOwners,
    publisher: EventPublisher,
    limiter: RateLimiter,
    limit: Limit,
    session: Session,
    rated_request_id: str,
    rating: Literal[-1, 1],
    comment: str | None,
) -> FeedbackReceived:
    """Publish the caller's rating of one of their own answers; 404 for any other request id, 429 over `limit`."""
    if await owners.owner(rated_request_id) != session.user_id:
        raise NotFound("no answer of yours has this request id (answers can be rated for a limited time)")
    await count_rating(limiter=limiter, limit=limit, user_id=session.user_id)
    event = FeedbackReceived(
        **envelope(session),
        data=FeedbackReceivedData(
            rated_request_id=rated_request_id, rating=rating, comment=(comment or "").strip() or None
        ),
    )
    publisher.submit(event)
    return event
