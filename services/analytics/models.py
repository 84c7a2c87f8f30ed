from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field


class SummaryResponse(BaseModel):
    model_config = ConfigDict(populate_by_name=True)

    from_: datetime | None = Field(None, alias="from", description="Start of the range (inclusive), UTC.")
    to: datetime | None = Field(None, description="End of the range (exclusive), UTC.")
    queries: int = Field(description="QuerySubmitted events.")
    answered: int = Field(description="ResponseGenerated events with an answer.")
    unanswered: int = Field(description="ResponseGenerated events saying no relevant information was found.")
    failed: int = Field(description="QueryFailed events.")
    mean_latency_ms: float | None = Field(description="Mean total time of the responses; null when none.")
    mean_citations: float | None = Field(description="Mean citations per response; null when none.")
