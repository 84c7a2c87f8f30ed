"""The SciFact index the search benches run against (~20k chunks), built once through the real
ingestion path and kept under CAIRN_DATA_DIR/bench/; chunk embeddings go to the embedding cache, so
even a rebuilt index encodes nothing twice."""
from __future__ import annotations

import asyncio
import hashlib
import json
import sys
from pathlib import Path

from tqdm import tqdm

from bench.corpus import CHUNK_OVERLAP, CHUNK_TOKENS, documents, ingest_all
from services.retrieval.adapters.bm25_index import keyword_indexed
from services.retrieval.adapters.chroma_store import ChromaStore
from services.retrieval.adapters.embedder import SentenceTransformerEmbedder
from services.retrieval.embedding_cache import CachingEmbedder, model_fingerprint
from services.retrieval.settings import Settings

COLLECTION = "bench"
VERSION = "bench-index-v1"


def index_dir(settings: Settings, dataset_dir: Path) -> Path:
    """A CAIRN_DATA_DIR of its own (chroma/ inside), keyed by model, chunking, HNSW and corpus file."""
    corpus = next(dataset_dir.glob("corpus.jsonl*"))
    key = "|".join(
        [
            VERSION,
            model_fingerprint(settings.model_path(), backend="torch"),
            f"{CHUNK_TOKENS}/{CHUNK_OVERLAP}",
            f"{settings.hnsw_ef_construction}/{settings.hnsw_max_neighbors}",
            f"{corpus.name}:{corpus.stat().st_size}",
        ]
    )
    return settings.data_dir / "bench" / f"{dataset_dir.name}-{hashlib.sha256(key.encode()).hexdigest()[:12]}"


def store_for(settings: Settings, data_dir: Path) -> ChromaStore:
    return ChromaStore(
        collection=COLLECTION,
        path=data_dir / "chroma",
        timeout_s=120.0,
        ef_search=settings.hnsw_ef_search,
        ef_construction=settings.hnsw_ef_construction,
        max_neighbors=settings.hnsw_max_neighbors,
    )


async def ensure_index(settings: Settings, dataset_dir: Path) -> tuple[Path, dict[str, object]]:
    """The index folder and what building it cost (read back when it was built by an earlier run)."""
    folder = index_dir(settings, dataset_dir)
    marker = folder / "index.json"
    if marker.is_file():
        return folder, json.loads(marker.read_text()) | {"reused": True}
    chroma = store_for(settings, folder)
    await chroma.open()
    store, _, sync = keyword_indexed(chroma)
    await sync.refresh()
    model = await asyncio.to_thread(
        SentenceTransformerEmbedder, settings.model_path(), threads=settings.torch_threads, batch_size=settings.embed_batch_size, cache_size=0
    )
    cached = CachingEmbedder(model, path=settings.embedding_cache_path, model_id=model_fingerprint(settings.model_path(), backend="torch"))
    docs = documents(dataset_dir)
    print(f"building the {dataset_dir.name} bench index once ({len(docs)} documents) in {folder}; chunk embeddings are "
          f"cached in {settings.embedding_cache_path}", file=sys.stderr)
    try:
        with tqdm(total=len(docs), desc="bench index", unit="doc", file=sys.stderr, dynamic_ncols=True) as bar:
            report = await ingest_all(docs, embedder=cached, store=store, progress=bar.update)
    finally:
        cached.close()
        model.close()
        chroma.close()
    info = {
        "documents": report.documents,
        "chunks": report.chunks,
        "build_s": round(report.seconds, 1),
        "chunks_encoded": cached.stats.misses,
        "chunks_from_cache": cached.stats.hits,
        "chunk_tokens": CHUNK_TOKENS,
        "chunk_overlap": CHUNK_OVERLAP,
    }
    marker.write_text(json.dumps(info, indent=2))
    return folder, info | {"reused": False}


if __name__ == "__main__":
    from bench.common import scifact_dir

    print(asyncio.run(ensure_index(Settings(), scifact_dir(sys.argv[1] if len(sys.argv) > 1 else None))))
