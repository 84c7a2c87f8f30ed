"""`POST /api/feedback`: a user rates one of their own answers; the rating goes out as FeedbackReceived."""
from __future__ import annotations

from typing import Literal

from fastapi import APIRouter
from pydantic import BaseModel, Field, field_validator

from services.gateway import feedback
from services.gateway.deps import PublisherDep, RateLimiterDep, RequestOwnersDep, SettingsDep, UserSession
from services.gateway.rate_limits import Limit
from services.gateway.responses import FEEDBACK
from shared.json_body import StrictJsonRoute
from shared.request_model import RequestModel

router = APIRouter(route_class=StrictJsonRoute, prefix="/api", tags=["feedback"])


class FeedbackRequest(RequestModel):
    request_id: str = Field(
        min_length=1, max_length=128, description="The answer's metadata.request_id (its X-Request-ID response header)"
    )
    rating: Literal[-1, 1] = Field(description="1 for a good answer, -1 for a bad one")
    comment: str | None = Field(None, max_length=feedback.MAX_COMMENT_CHARS)

    @field_validator("rating", mode="before")
    @classmethod
    def _not_a_boolean(cls, value: object) -> object:
        if isinstance(value, bool):  # JSON true would otherwise pass as 1
            raise ValueError("rating must be 1 or -1")
        return value


class FeedbackAccepted(BaseModel):
    status: Literal["accepted"] = "accepted"
    request_id: str = Field(description="The rated request")
    rating: Literal[-1, 1]


@router.post(
    "/feedback",
    status_code=202,
    response_model=FeedbackAccepted,
    responses=FEEDBACK,
)
async def rate_answer(
    body: FeedbackRequest,
    session: UserSession,
    owners: RequestOwnersDep,
    publisher: PublisherDep,
    limiter: RateLimiterDep,
    settings: SettingsDep,
) -> FeedbackAccepted:
    """Rate one of your answers; rating it again replaces the earlier rating."""
    await feedback.rate_answer(
        owners=owners,
        publisher=publisher,
        limiter=limiter,
        limit=Limit(settings.feedback_per_minute, window_s=60),
        session=session,
        rated_request_id=body.request_id,
        rating=body.rating,
        comment=body.comment,
    )
    return FeedbackAccepted(request_id=body.request_id, rating=body.rating)
