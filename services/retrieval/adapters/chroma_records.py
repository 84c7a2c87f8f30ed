"""Between Chroma's shapes and ours: `where` clauses from filters, records from `get` pages."""
from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from services.retrieval.document_metadata import document_fields
from shared.filters import Condition, Filter, parse_filter
from services.retrieval.ports import DocumentInfo, MetadataValue, StoredChunk, is_complete


def to_where(where: Filter | Mapping[str, Any] | None) -> dict[str, Any] | None:
    """A Chroma `where` clause for a filter (see shared.filters)."""
    clauses = [_clause(c) for c in parse_filter(where).conditions]
    if not clauses:
        return None
    return clauses[0] if len(clauses) == 1 else {"$and": clauses}


def _clause(condition: Condition) -> dict[str, Any]:
    """One condition as Chroma must be told it to compare as shared.filters.matches does.

    Chroma compares a field stored as an integer with a fraction cut towards zero (2 == 2.5, 2 < 2.5 is
    false, -2 <= -2.5 is true), but with a float exactly. A fraction therefore comes with whole-number
    bounds, which Chroma compares exactly with both kinds, that put the integers right.
    """
    key, op, value = condition.key, condition.op, condition.value
    plain = {key: {op: list(value) if isinstance(value, tuple) else value}}
    values = value if isinstance(value, tuple) else (value,)
    fractions = [v for v in values if isinstance(v, float) and not v.is_integer()]
    if not fractions:
        return plain
    if op in ("$in", "$nin", "$eq", "$ne"):
        # The integers Chroma would take for one of the fractions, when not asked for themselves.
        cut = sorted({int(v) for v in fractions} - {int(v) for v in values if float(v).is_integer()})
        if not cut:
            return plain
        if op in ("$in", "$eq"):
            return {"$and": [plain, {key: {"$nin": cut}}]}
        return {"$or": [plain, {key: {"$in": cut}}]}
    below, above = math.floor(fractions[0]), math.ceil(fractions[0])
    if op in ("$lt", "$lte"):  # an integer passes when <= below; a float as Chroma compares it, under `above`
        return {"$or": [{key: {"$lte": below}}, {"$and": [plain, {key: {"$lt": above}}]}]}
    return {"$or": [{key: {"$gte": above}}, {"$and": [plain, {key: {"$gt": below}}]}]}


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
                complete=is_complete(chunks),
            )
        )
    return documents
