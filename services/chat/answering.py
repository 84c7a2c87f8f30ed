"""The response to a turn: citations resolved, grounding checked, confidence scored.

Three kinds of answer: small talk (no search, no model), "no information" (nothing relevant was
retrieved, or the model's answer cited nothing and so is not shown — said so when the model's content
filter withheld it, finish_reason "content_filter", or its token limit stopped it first, "length"), and a
cited answer.
"""
from __future__ import annotations

import logging
import re
import time
from dataclasses import dataclass

from services.chat import confidence as scoring
from services.chat.chunks import RetrievedChunk
from services.chat.citations import CitedAnswer, resolve_citations, says_anything
from services.chat.confidence import Confidence
from services.chat.grounding import GroundingReport, check_grounding
from services.chat.markdown_images import strip_images
from services.chat.models import ChatResponse, Metadata, UsageOut
from services.chat.ports import Generation
from services.chat.presentation import citation_out, confidence_out, grounding_out, related_docs, sources_out
from services.chat.turn import Turn, elapsed_ms
from shared.context import request_id_var
from shared.reasoning import without_reasoning

log = logging.getLogger(__name__)

NO_INFORMATION = "I couldn't find relevant information in the documents to answer that."
CONTENT_FILTERED = "The language model's content filter withheld its answer to that question, so there is none to show."
CONTENT_FILTER = "content_filter"  # the finish_reason of OpenAI and Azure OpenAI for a withheld answer
LENGTH_REACHED = (
    "The language model reached its length limit before it wrote a cited answer to that question, so there is none "
    "to show."
)
CUT_OFF = "(This answer is incomplete: the language model stopped at its length limit.)"
LENGTH = "length"  # the finish_reason of an answer the model stopped at max_tokens (LLM_MAX_TOKENS)
FILTERED_REST = "(This answer is incomplete: the language model's content filter withheld the rest of it.)"
# The answer instead of an uncited one the model was stopped in, by finish_reason.
_UNANSWERED = {LENGTH: LENGTH_REACHED, CONTENT_FILTER: CONTENT_FILTERED}
# The note after an answer the model was stopped in (else it reads as complete), by finish_reason.
_CUT_SHORT = {LENGTH: CUT_OFF, CONTENT_FILTER: FILTERED_REST}
_FENCE_LINE = re.compile(r" {0,3}(`{3,}|~{3,})(.*)")


@dataclass(frozen=True)
class _Outcome:
    kind: str
    cited: CitedAnswer
    confidence: Confidence
    grounding: GroundingReport | None = None


def compose(turn: Turn, generation: Generation | None, *, relevance_threshold: float) -> ChatResponse:
    step = time.perf_counter()
    outcome = _outcome(turn, generation, relevance_threshold)
    turn.timings.citations = elapsed_ms(step)
    turn.timings.total = elapsed_ms(turn.started)
    by_number = outcome.grounding.citations if outcome.grounding else {}
    citations = [citation_out(c, by_number.get(c.number)) for c in outcome.cited.citations]
    return ChatResponse(
        query=turn.request.query,
        answer=outcome.cited.answer,
        conversation_id=turn.conversation_id,
        new_conversation=turn.new_conversation,
        citations=citations,
        sources=sources_out(citations, {c.chunk_id: c for c in turn.retrieved}),
        related_docs=related_docs(turn.retrieved, outcome.cited.citations),
        confidence=confidence_out(outcome.confidence),
        grounding=grounding_out(outcome.grounding.summary) if outcome.grounding else None,
        metadata=Metadata(
            request_id=request_id_var.get(),
            kind=outcome.kind,
            model=generation.model if generation else None,
            reformulated_query=turn.query,
            chunks_retrieved=len(turn.retrieved),
            chunks_used=len(turn.used),
            timings_ms=turn.timings,
            usage=_usage(generation),
            finish_reason=generation.finish_reason if generation else None,
        ),
    )


def _outcome(turn: Turn, generation: Generation | None, relevance_threshold: float) -> _Outcome:
    if turn.small_talk is not None:
        return _Outcome("small_talk", CitedAnswer(turn.small_talk, []), scoring.small_talk())
    if generation is None:
        best = max((c.relevance for c in turn.retrieved), default=None)
        confidence = scoring.no_information(best_relevance=best, threshold=relevance_threshold)
        return _Outcome("no_information", CitedAnswer(NO_INFORMATION, []), confidence)
    text = without_reasoning(generation.text)  # what a reasoning model thought is neither shown nor cited
    # Before citations: an image's alt text stays and its URL goes, so the markers left are the ones shown.
    text = strip_images(text)
    cited = resolve_citations(text, turn.used) if says_anything(text) else CitedAnswer(text, [])
    grounding = check_grounding(cited.answer, cited.citations, passages=turn.used)
    confidence = scoring.assess(
        relevances=_relevances_behind(cited, turn.used),
        relevant_sources=len({c.doc_id for c in turn.used}),
        grounding=grounding.summary,
    )
    if not cited.citations:  # anti-hallucination: an answer that cites nothing is not shown
        # Not that the documents lack the information: the model's filter, or its token limit, stopped it.
        answer = _UNANSWERED.get(generation.finish_reason or "", NO_INFORMATION)
        if generation.finish_reason == LENGTH:
            # Most often a reasoning model that spent every token thinking: a setting the operator can change.
            log.warning(
                "the model reached LLM_MAX_TOKENS before citing anything: raise LLM_MAX_TOKENS",
                extra={"model": generation.model, "completion_tokens": generation.completion_tokens},
            )
        return _Outcome("no_information", CitedAnswer(answer, []), confidence, grounding)
    if note := _CUT_SHORT.get(generation.finish_reason or ""):
        cited = CitedAnswer(f"{_with_fences_closed(cited.answer)}\n\n{note}", cited.citations)
    return _Outcome("answer", cited, confidence, grounding)


def _with_fences_closed(text: str) -> str:
    """`text` with a code block it leaves open closed, so that what is appended is not shown as code."""
    opening = None
    for line in text.splitlines():
        if not (fence := _FENCE_LINE.fullmatch(line)):
            continue
        run, rest = fence.groups()
        if opening is None:
            if not (run[0] == "`" and "`" in rest):  # a backtick in the info string makes it no fence
                opening = run
        elif run[0] == opening[0] and len(run) >= len(opening) and not rest.strip():
            opening = None
    return f"{text}\n{opening}" if opening else text


def _relevances_behind(cited: CitedAnswer, used: list[RetrievedChunk]) -> list[float]:
    """Best first, the relevance of the passages the answer rests on: those it cites (an answer citing only
    the weakest passage is as strong as that passage), else all it was given."""
    cited_passages = {p.chunk_id: p for c in cited.citations for p in c.cited_passages}
    return sorted((p.relevance for p in (cited_passages.values() or used)), reverse=True)


def _usage(generation: Generation | None) -> UsageOut:
    if generation is None:
        return UsageOut()
    return UsageOut(
        prompt_tokens=generation.prompt_tokens,
        completion_tokens=generation.completion_tokens,
        total_tokens=generation.prompt_tokens + generation.completion_tokens,
    )
