"""Turns pipeline results into the response shapes of models.py."""
from __future__ import annotations

from services.chat.chunks import RetrievedChunk
from services.chat.citations import Citation, snippet_of
from services.chat.confidence import Confidence
from services.chat.grounding import CitationSupport, Grounding
from services.chat.models import Citation as CitationOut
from services.chat.models import ConfidenceOut, GroundingOut, RelatedDoc, Source
from services.chat.models import Support as SupportOut


def passage_out(number: int, chunk: RetrievedChunk, *, snippet: str | None = None) -> CitationOut:
    return CitationOut(
        n=number,
        doc_id=chunk.doc_id,
        chunk_id=chunk.chunk_id,
        title=chunk.title,
        section=chunk.section,
        page=chunk.page,
        url=chunk.url,
        snippet=snippet if snippet is not None else snippet_of(chunk.content),
        content=chunk.content,
        chunk_ids=[chunk.chunk_id],
    )


def citation_out(citation: Citation, support: CitationSupport | None = None) -> CitationOut:
    out = passage_out(citation.number, citation.chunk, snippet=citation.snippet)
    out.chunk_ids = [passage.chunk_id for passage in citation.cited_passages]
    if support is not None:
        out.support = SupportOut(verdict=support.verdict, score=round(support.score, 3))
    return out


def sources_out(citations: list[CitationOut], chunks: dict[str, RetrievedChunk]) -> list[Source]:
    """One source per document URL (per doc_id when a document has no URL), in citation order."""
    sources: dict[str, Source] = {}
    for citation in citations:
        chunk = chunks[citation.chunk_id]
        key = chunk.url or f"doc:{chunk.doc_id}"
        sources.setdefault(key, Source(**citation.model_dump(), score=chunk.score))
    return list(sources.values())


def related_docs(retrieved: list[RetrievedChunk], citations: list[Citation]) -> list[RelatedDoc]:
    """Every document retrieval returned, once, in rank order, marked when the answer cites it."""
    cited = {c.chunk.doc_id for c in citations}
    related: dict[str, RelatedDoc] = {}
    for chunk in retrieved:
        related.setdefault(
            chunk.doc_id,
            RelatedDoc(
                doc_id=chunk.doc_id, title=chunk.title, url=chunk.url, category=chunk.category,
                score=chunk.score, cited=chunk.doc_id in cited,
            ),
        )
    return list(related.values())


def confidence_out(confidence: Confidence) -> ConfidenceOut:
    return ConfidenceOut(level=confidence.level, score=confidence.score, reason=confidence.reason)


def grounding_out(grounding: Grounding) -> GroundingOut:
    return GroundingOut(
        score=round(grounding.score, 3), supported=grounding.supported, weak=grounding.weak,
        unsupported=grounding.unsupported, method=grounding.method,
    )
