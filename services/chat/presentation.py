"""Turns pipeline results into the response shapes of models.py."""
from __future__ import annotations

from services.chat.chunks import RetrievedChunk
from services.chat.citations import Citation
from services.chat.confidence import Confidence
from services.chat.models import Citation as CitationOut
from services.chat.models import ConfidenceOut, RelatedDoc, Source

MAX_RELATED_DOCS = 5


def citation_out(citation: Citation) -> CitationOut:
    chunk = citation.chunk
    return CitationOut(
        number=citation.number,
        doc_id=chunk.doc_id,
        chunk_id=chunk.chunk_id,
        title=chunk.title,
        section=chunk.section,
        page=chunk.page,
        url=chunk.url,
        snippet=citation.snippet,
    )


def source_out(citation: Citation) -> Source:
    return Source(**citation_out(citation).model_dump(), content=citation.chunk.content, score=citation.chunk.score)


def sources_out(citations: list[Citation]) -> list[Source]:
    """One source per document URL (per doc_id when a document has no URL), in citation order."""
    sources: dict[str, Source] = {}
    for citation in citations:
        key = citation.chunk.url or f"doc:{citation.chunk.doc_id}"
        sources.setdefault(key, source_out(citation))
    return list(sources.values())


def related_docs(relevant: list[RetrievedChunk], citations: list[Citation]) -> list[RelatedDoc]:
    """Documents among the relevant passages that the answer does not cite, best first."""
    cited = {c.chunk.doc_id for c in citations}
    related: dict[str, RelatedDoc] = {}
    for chunk in relevant:
        if chunk.doc_id not in cited and chunk.doc_id not in related:
            related[chunk.doc_id] = RelatedDoc(doc_id=chunk.doc_id, title=chunk.title, url=chunk.url, score=chunk.score)
    return list(related.values())[:MAX_RELATED_DOCS]


def confidence_out(confidence: Confidence) -> ConfidenceOut:
    return ConfidenceOut(level=confidence.level, score=confidence.score, reason=confidence.reason)
