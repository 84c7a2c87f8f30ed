"""The peer: the same hybrid search and chat wired as a Haystack 3 pipeline in one process, as a user
would wire it from Haystack's own components with their defaults (cosine similarity for the embedding
model, no progress bar per query).

InMemoryBM25Retriever, and SentenceTransformersTextEmbedder (sentence-transformers-haystack, the same
local MiniLM) -> InMemoryEmbeddingRetriever, top-N each, joined by DocumentJoiner with reciprocal rank
fusion; for chat, a ChatPromptBuilder writes the numbered passages the way Cairn's chat does and an
OpenAIChatGenerator asks the offline generator over HTTP (`python -m services.chat.offline_llm`).

The document store holds the bench index's chunk texts with the vectors Cairn's ingestion stored for
them (the same model over the same texts), so the corpus is not encoded a second time.
"""
from __future__ import annotations

import os

os.environ.setdefault("HAYSTACK_TELEMETRY_ENABLED", "False")  # no usage reports from a benchmark

from pathlib import Path  # noqa: E402

from haystack import Document, Pipeline  # noqa: E402
from haystack.components.builders import ChatPromptBuilder  # noqa: E402
from haystack.components.generators.chat import OpenAIChatGenerator  # noqa: E402
from haystack.components.joiners import DocumentJoiner  # noqa: E402
from haystack.components.retrievers.in_memory import InMemoryBM25Retriever, InMemoryEmbeddingRetriever  # noqa: E402
from haystack.document_stores.in_memory import InMemoryDocumentStore  # noqa: E402
from haystack.utils import ComponentDevice, Secret  # noqa: E402
from haystack_integrations.components.embedders.sentence_transformers import (  # noqa: E402
    SentenceTransformersTextEmbedder,
)

from bench.chunks import Chunks  # noqa: E402

# The context block format of services/chat/context_format.py, which the offline generator reads.
CHAT_TEMPLATE = """
{% message role="system" %}
Answer the question from the numbered passages only, citing them as [n].
<context>
{% for doc in documents %}[{{ loop.index }}] {{ doc.meta.title }}
{{ doc.content }}

{% endfor %}</context>
{% endmessage %}
{% message role="user" %}{{ query }}{% endmessage %}
"""


def document_store(chunks: Chunks) -> InMemoryDocumentStore:
    store = InMemoryDocumentStore(embedding_similarity_function="cosine")
    store.write_documents(
        [
            Document(id=chunk_id, content=text, meta={"title": title, "doc_id": doc_id}, embedding=vector.tolist())
            for chunk_id, doc_id, title, text, vector in zip(
                chunks.ids, chunks.doc_ids, chunks.titles, chunks.texts, chunks.vectors
            )
        ]
    )
    return store


def _retrieval(pipeline: Pipeline, store: InMemoryDocumentStore, *, model: Path, candidates: int, top_k: int) -> None:
    pipeline.add_component(
        "embedder",
        SentenceTransformersTextEmbedder(
            model=str(model), device=ComponentDevice.from_str("cpu"), local_files_only=True, progress_bar=False
        ),
    )
    pipeline.add_component("dense", InMemoryEmbeddingRetriever(store, top_k=candidates))
    pipeline.add_component("bm25", InMemoryBM25Retriever(store, top_k=candidates))
    pipeline.add_component("joiner", DocumentJoiner(join_mode="reciprocal_rank_fusion", top_k=top_k))
    pipeline.connect("embedder.embedding", "dense.query_embedding")
    pipeline.connect("dense", "joiner")
    pipeline.connect("bm25", "joiner")


class HaystackPipelines:
    """A search pipeline and a chat pipeline over one document store; `search` and `chat` block."""

    def __init__(
        self, chunks: Chunks, *, model: Path, llm_url: str, llm_model: str, candidates: int, search_top_k: int, chat_top_k: int
    ) -> None:
        store = document_store(chunks)
        self.search_pipeline = Pipeline()
        _retrieval(self.search_pipeline, store, model=model, candidates=candidates, top_k=search_top_k)
        self.chat_pipeline = Pipeline()
        _retrieval(self.chat_pipeline, store, model=model, candidates=candidates, top_k=chat_top_k)
        self.chat_pipeline.add_component("prompt", ChatPromptBuilder(template=CHAT_TEMPLATE, required_variables=["query", "documents"]))
        self.chat_pipeline.add_component(
            "llm",
            OpenAIChatGenerator(
                api_key=Secret.from_token("offline"), model=llm_model, api_base_url=f"{llm_url}/v1", timeout=60, max_retries=0
            ),
        )
        self.chat_pipeline.connect("joiner.documents", "prompt.documents")
        self.chat_pipeline.connect("prompt.prompt", "llm.messages")
        self.search_pipeline.warm_up()
        self.chat_pipeline.warm_up()

    def search(self, query: str) -> list[Document]:
        result = self.search_pipeline.run({"embedder": {"text": query}, "bm25": {"query": query}})
        return result["joiner"]["documents"]

    def chat(self, query: str) -> str:
        result = self.chat_pipeline.run({"embedder": {"text": query}, "bm25": {"query": query}, "prompt": {"query": query}})
        return result["llm"]["replies"][0].text or ""
