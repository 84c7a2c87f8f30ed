"""Between Chroma's shapes and ours: `where` clauses from filters, records from `get` pages."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from services.retrieval.document_metadata import document_fields
from shared.filters import Filter, parse_filter
from services.retrieval.ports import DocumentInfo, MetadataValue, StoredChunk


def to_where(where: Filter | Mapping[str, Any] | None) -> dict[str, Any] | None:
    """A Chroma `where` clause for a filter (see shared.filters)."""
    conditions = parse_filter(where).conditions
    clauses = [{c.key: {c.op: list(c.value) if isinstance(c.value, tuple) else c.value}} for c in conditions]
    if not clauses:
        return None
    return clauses[0] if len(clauses) == 1 else {"$and": clauses}


def clean(metadata: dict[str, Any]) -> dict[str, MetadataValue]:
    # Chroma accepts only str/int/float/bool values.
    return {key: value for key, value in metadata.items() if value is not None}


def chunk_fields(meta: Mapping[str, Any]) -> dict[str, MetadataValue]:
    """A stored chunk's metadata as written: without the doc_id the store adds to every chunk."""
    return {key: value for key, value in meta.items() if key != "doc_id"}


def chunks_of(page: dict[str, Any], with_embeddings: bool) -> list[StoredChunk]:
    # Rows of one float32 matrix, not lists: a replica reading every vector (the keyword index keeps them
    # for exact search) would otherwise build hundreds of MB of Python floats at each full reload.
    embeddings = page.get("embeddings") if with_embeddings else None
    rows = np.asarray(embeddings, dtype=np.float32) if embeddings is not None and len(embeddings) else None
    return [
        StoredChunk(
            chunk_id=cid,
            doc_id=str(meta.get("doc_id", "")),
            content=doc or "",
            embedding=rows[i] if rows is not None else [],
            metadata=chunk_fields(meta),
        )
        for i, (cid, doc, meta) in enumerate(zip(page["ids"], page["documents"], page["metadatas"]))
    ]


def group(metadatas: list[dict[str, Any]]) -> list[DocumentInfo]:
    by_doc: dict[str, list[dict[str, Any]]] = {}
    for meta in metadatas:
        by_doc.setdefault(str(meta.get("doc_id", "")), []).append(meta)
    documents = []
    for doc_id in sorted(by_doc):
        chunks = sorted(by_doc[doc_id], key=lambda m: m.get("chunk_index", 0))
        documents.append(
            DocumentInfo(
                doc_id=doc_id,
                chunks=len(chunks),
                content_hashes=frozenset(str(m.get("content_hash", "")) for m in chunks),
                metadata=document_fields(chunks[0]),
            )
        )
    return documents
