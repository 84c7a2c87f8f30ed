"""Letting a question through to chat: counted against the asker's CHAT_REQUESTS_PER_MINUTE (429 when over),
then its request id claimed as theirs (409 when taken).

A question refused as asked (a 4xx other than 429, from the gateway's own checks or from chat: an invalid
body, say) is withdrawn: its count given back and its request id freed, so the corrected question is
neither rate limited by the mistake nor refused for reusing its id. Both stay in Redis until then, so
replicas never let more questions through than the limit, even a burst of invalid ones.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass

from services.gateway.feedback import RequestIdTaken, RequestOwners, remember_request
from services.gateway.rate_limits import Limit, RateLimiter, count_chat_request, give_back_chat_request
from shared.errors import DependencyUnavailable

log = logging.getLogger("cairn.gateway")


@dataclass(frozen=True)
class AdmittedQuestion:
    user_id: str
    event_id: str | None  # the count in the rate limit; None when there is no limit
    request_id: str | None


async def admit_question(
    *, limiter: RateLimiter, owners: RequestOwners, limit: Limit, user_id: str, request_id: str | None, ttl_s: int
) -> AdmittedQuestion:
    event_id = await count_chat_request(limiter=limiter, limit=limit, user_id=user_id)
    try:
        await remember_request(owners=owners, request_id=request_id, user_id=user_id, ttl_s=ttl_s)
    except RequestIdTaken:
        await give_back_chat_request(limiter=limiter, user_id=user_id, event_id=event_id)
        raise
    return AdmittedQuestion(user_id=user_id, event_id=event_id, request_id=request_id)


def is_refusal(status_code: int) -> bool:
    """A 4xx other than 429: the question was refused as asked, and may be sent again corrected."""
    return 400 <= status_code < 500 and status_code != 429


async def withdraw_question(*, limiter: RateLimiter, owners: RequestOwners, question: AdmittedQuestion) -> bool:
    """Give back the question's count and free its request id; False if Redis failed meanwhile, leaving
    both: the caller keeps its refusal, and the user is left counted, which errs on the safe side."""
    try:
        await give_back_chat_request(limiter=limiter, user_id=question.user_id, event_id=question.event_id)
        if question.request_id is not None:
            await owners.release(question.request_id)
    except DependencyUnavailable:
        log.warning("refused question not withdrawn", extra={"request_id": question.request_id})
        return False
    return True
