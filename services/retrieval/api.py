"""Retrieval routes: documents in, ranked chunks out. Thin: the work is in ingestion and search."""
from __future__ import annotations

import logging
import time
from dataclasses import asdict
from typing import Annotated

from fastapi import APIRouter, Query, Request
from pydantic import AfterValidator
from starlette.convertors import PathConvertor, register_url_convertor

from services.retrieval import ingestion, paging, uploads
from services.retrieval import search as searching
from services.retrieval.deps import (
    ContextualizerDep,
    EmbedderDep,
    SearchPartsDep,
    SettingsDep,
    StoreDep,
)
from services.retrieval.models import (
    FILTERS_DESCRIPTION,
    FILTERS_EXAMPLE,
    ChunkMetadata,
    DeletedDocument,
    DocumentList,
    DocumentOut,
    DocumentSummary,
    SearchRequest,
    SearchResponse,
    SearchResult,
    SimilarDocumentOut,
    SimilarDocuments,
    filters_query,
)
from services.retrieval.similar import similar_documents
from shared.errors import NotFound
from shared.filters import filter_schema
from shared.json_body import StrictJsonRoute
from shared.web import error_responses

log = logging.getLogger("cairn.retrieval")


class DocumentIdConvertor(PathConvertor):
    """A doc_id in a path: may hold slashes, but does not end in /similar, which names GET .../similar.

    Without it DELETE /documents/a/similar would delete a document "a/similar", and which route a
    GET took would depend on the order they were registered in. Ingestion refuses such doc_ids
    (models.names_similar_documents). The lookbehind also sees the "/" before the doc_id, hence the
    doc_id "similar" on its own.
    """

    regex = "similar|.*(?<!/similar)"


register_url_convertor("doc_id", DocumentIdConvertor())

router = APIRouter(
    route_class=StrictJsonRoute,
    responses=error_responses({401: "Missing or wrong service token", 503: "Chroma is unavailable (chroma_unavailable)"})
)
_NO_DOCUMENT = error_responses({404: "No such document"})


@router.post(
    "/documents",
    response_model=DocumentOut,
    tags=["documents"],
    summary="Add or replace a document: JSON text, or a file upload (.md, .txt, .html, .pdf)",
    openapi_extra=uploads.OPENAPI_BODY,
    responses=error_responses(
        {
            400: "Malformed JSON or multipart body",
            413: "Body over MAX_UPLOAD_BYTES",
            415: "Unsupported file type or content type",
            422: "Invalid fields, or a corrupt or empty file (named)",
        }
    ),
)
async def add_document(
    request: Request, settings: SettingsDep, embedder: EmbedderDep, store: StoreDep, contextualizer: ContextualizerDep
) -> DocumentOut:
    started = time.perf_counter()
    document = await uploads.document_from_request(request, limit=settings.max_upload_bytes)
    result = await ingestion.ingest_document(
        document,
        embedder=embedder,
        store=store,
        chunk_size=settings.chunk_size_tokens,
        chunk_overlap=settings.chunk_overlap_tokens,
        contextualizer=contextualizer,
    )
    log.info(
        "document ingested",
        extra={
            **asdict(result),
            "chars": len(document.text),
            "pages": len(document.page_starts) or None,
            "took_ms": round((time.perf_counter() - started) * 1000, 1),
        },
    )
    return DocumentOut(**asdict(result))


@router.get(
    "/documents",
    response_model=DocumentList,
    tags=["documents"],
    responses=error_responses({422: f"limit is not an integer in 1..{paging.MAX_LIMIT}, or cursor is not base64url"}),
)
async def list_documents(
    store: StoreDep,
    limit: Annotated[int, Query(ge=1, le=paging.MAX_LIMIT, description="Documents per page.")] = paging.DEFAULT_LIMIT,
    after: Annotated[
        str | None,
        Query(
            alias="cursor",
            min_length=1,
            json_schema_extra={"pattern": paging.CURSOR_PATTERN},  # checked by doc_id_after, whose message says more
            description="The next_cursor of the previous page; absent for the first.",
        ),
        AfterValidator(paging.doc_id_after),
    ] = None,
) -> DocumentList:
    page = await store.document_page(after=after, limit=limit)
    return DocumentList(
        documents=[DocumentSummary.of(d) for d in page.documents],
        total=page.total,
        next_cursor=paging.next_cursor(page),
    )


@router.delete("/documents/{doc_id:doc_id}", response_model=DeletedDocument, tags=["documents"], responses=_NO_DOCUMENT)
async def delete_document(doc_id: str, store: StoreDep) -> DeletedDocument:
    deleted = await ingestion.delete_document(doc_id, store=store)
    if not deleted:
        raise NotFound(f"no document {doc_id!r}")
    log.info("document deleted", extra={"doc_id": doc_id, "deleted_chunks": deleted})
    return DeletedDocument(doc_id=doc_id, deleted_chunks=deleted)


@router.post(
    "/search",
    response_model=SearchResponse,
    tags=["search"],
    responses=error_responses(
        {
            400: "Malformed JSON",
            422: "Invalid query, filter or mode, or rerank asked for without a model (rerank_unavailable)",
        }
    ),
)
async def search(body: SearchRequest, parts: SearchPartsDep) -> SearchResponse:
    started = time.perf_counter()
    hits = await searching.search(
        query=body.query,
        top_k=body.top_k,
        threshold=body.threshold,
        mode=body.mode,
        filters=body.filters,
        embedder=parts.embedder,
        store=parts.store,
        keywords=parts.keywords,
        options=parts.options,
        reranker=parts.reranker,
        rerank=body.rerank,
    )
    took_ms = round((time.perf_counter() - started) * 1000, 2)
    log.info("search", extra={"mode": body.mode, "top_k": body.top_k, "results": len(hits), "took_ms": took_ms})
    return SearchResponse(
        query=body.query,
        mode=body.mode,
        took_ms=took_ms,
        results=[
            SearchResult(
                chunk_id=hit.chunk_id,
                doc_id=hit.doc_id,
                content=hit.content,
                score=hit.score,
                dense_score=hit.dense_score,
                keyword_score=hit.keyword_score,
                dense_rank=hit.dense_rank,
                keyword_rank=hit.keyword_rank,
                rerank_score=hit.rerank_score,
                metadata=ChunkMetadata.of(hit.metadata),
            )
            for hit in hits
        ],
    )


# `filters` as POST /search takes them, sent as one JSON object in the query string. Declared to FastAPI as text
# (a list, to refuse it given twice) and to OpenAPI as JSON, which FastAPI cannot say of a query parameter.
FiltersQuery = Annotated[list[str] | None, Query(include_in_schema=False), AfterValidator(filters_query)]
_FILTERS_PARAMETER = {
    "name": "filters",
    "in": "query",
    "required": False,
    "description": f"A JSON object, URL-encoded: the filters of POST /search. {FILTERS_DESCRIPTION}",
    "content": {"application/json": {"schema": filter_schema(), "example": FILTERS_EXAMPLE}},
}


@router.get(
    "/documents/{doc_id:path}/similar",
    response_model=SimilarDocuments,
    tags=["documents"],
    responses={**_NO_DOCUMENT, **error_responses({422: "top_k is not an integer in 1..50, or an invalid filter (named)"})},
    openapi_extra={"parameters": [_FILTERS_PARAMETER]},
)
async def similar(
    doc_id: str, store: StoreDep, top_k: int = Query(5, ge=1, le=50), filters: FiltersQuery = None
) -> SimilarDocuments:
    found = await similar_documents(doc_id=doc_id, top_k=top_k, store=store, filters=filters)
    if found is None:
        raise NotFound(f"no document {doc_id!r}")
    return SimilarDocuments(
        doc_id=doc_id,
        results=[
            SimilarDocumentOut(
                doc_id=d.doc_id,
                score=d.score,
                chunk_id=d.chunk_id,
                **{k: d.metadata[k] for k in ("title", "source", "url", "category") if isinstance(d.metadata.get(k), str)},
            )
            for d in found
        ],
    )


@router.get("/documents/{doc_id:doc_id}", response_model=DocumentSummary, tags=["documents"], responses=_NO_DOCUMENT)
async def get_document(doc_id: str, store: StoreDep) -> DocumentSummary:
    document = await store.get_document(doc_id)
    if document is None:
        raise NotFound(f"no document {doc_id!r}")
    return DocumentSummary.of(document)

