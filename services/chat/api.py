"""Chat routes (mounted behind the internal service-token guard)."""
from __future__ import annotations

from fastapi import APIRouter

from services.chat.deps import CallerDep, PipelineDep
from services.chat.models import ChatRequest, ChatResponse

router = APIRouter(tags=["chat"])

_ERRORS = {
    401: {"description": "Missing or wrong service token"},
    422: {"description": "Invalid request or unknown model"},
    502: {"description": "The LLM failed (llm_unavailable)"},
    503: {"description": "Retrieval is unavailable (retrieval_unavailable)"},
}


@router.post("/chat", response_model=ChatResponse, responses=_ERRORS)
async def chat(body: ChatRequest, pipeline: PipelineDep, caller: CallerDep) -> ChatResponse:
    """Answer `query` from the document collection, with numbered citations."""
    return await pipeline.answer(request=body, caller=caller)
