"""Contextual chunking: a short model-written prefix that situates each chunk in its document, so a
chunk such as "It rose 3 % that quarter" is embedded and keyword-indexed together with what "it" is.

Prefixes are cached by (model, prompt key, chunk hash), so re-ingesting costs no model call; the prompt key
covers everything else the model is shown (see Contextualizer.cache_key). The enrichment is optional: a
chunk whose prefix cannot be written, or is not written by the document's deadline, is indexed without one.

To measure its effect (`cairn eval`), `adapters.context_llm.build_contextualizer(settings, force=True)`
gives a Contextualizer whenever LLM_BASE_URL and LLM_MODEL are set (None otherwise); pass it as
`contextualizer=` to ingestion.ingest_document for the run with prefixes, and None for the run without.
"""
from __future__ import annotations

import asyncio
import hashlib
import logging

from services.retrieval.ports import ContextModel, PrefixCache
from shared.errors import ServiceError
from shared.reasoning import without_reasoning

log = logging.getLogger("cairn.retrieval.contextual")

SYSTEM = "You situate passages within the document they come from, to improve search retrieval. Answer in plain prose."
PROMPT = """<document>
{document}
</document>
Here is a chunk of that document:
<chunk>
{chunk}
</chunk>
In one or two short sentences, situate this chunk within the overall document (what it is about and \
where it fits) to improve search retrieval of the chunk. Answer only with those sentences."""
MAX_PREFIX_CHARS = 600
GIVE_UP_AFTER = 3  # failed calls for one document before the rest of its chunks go without a prefix


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _clean(answer: str) -> str | None:
    # A reasoning model's thoughts (all of the answer, when max_tokens cut them off) would be embedded as the prefix.
    text = " ".join(without_reasoning(answer).split())
    if not text:
        return None
    if len(text) > MAX_PREFIX_CHARS:  # a model that rambles: keep whole words
        text = text[:MAX_PREFIX_CHARS].rsplit(" ", 1)[0]
    return text


def _cleaned(cached: dict[str, str]) -> dict[str, str]:
    # Cleaned again as read: a prefix cached before the cleaning learnt of a reasoning format would still hold
    # the thoughts. One that was nothing but thoughts counts as missing, so it is asked for again.
    return {sha: prefix for sha, raw in cached.items() if (prefix := _clean(raw))}


class Contextualizer:
    """Writes, caches and returns the prefix of every chunk of a document."""

    def __init__(
        self,
        *,
        model: ContextModel,
        cache: PrefixCache,
        max_document_chars: int = 16000,
        concurrency: int = 4,
        max_tokens: int = 120,
        deadline_s: float = 90.0,
    ) -> None:
        if max_document_chars < 1 or concurrency < 1 or max_tokens < 1:
            raise ValueError("max_document_chars, concurrency and max_tokens must be >= 1")
        if deadline_s <= 0:
            raise ValueError("deadline_s must be > 0")
        self._model = model
        self._cache = cache
        self._max_document_chars = max_document_chars
        self._limit = asyncio.Semaphore(concurrency)
        self._max_tokens = max_tokens
        self._deadline_s = deadline_s

    @property
    def model_name(self) -> str:
        return self._model.model_name

    def prompt(self, *, document: str, chunk: str) -> str:
        """The user message for one chunk: the document (its first max_document_chars) and the chunk."""
        return PROMPT.format(document=self._shown(document), chunk=chunk)

    def cache_key(self, document: str) -> str:
        """The prefix cache's key for the chunks of `document`, besides model and chunk: everything else the
        model is given (instructions, the document as cut to max_document_chars, the answer's token limit),
        so that changing any of these writes prefixes anew instead of serving ones written from another prompt."""
        return sha256("\0".join((SYSTEM, PROMPT, self._shown(document), str(self._max_tokens))))

    def _shown(self, document: str) -> str:
        if len(document) <= self._max_document_chars:
            return document
        return document[: self._max_document_chars] + "\n[...]"

    async def prefixes(self, *, document: str, chunks: list[str]) -> list[str | None]:
        """One prefix per chunk, in order; None where the model failed or the document's deadline passed
        (logged as a warning, never raised)."""
        model, key = self.model_name, self.cache_key(document)
        shas = [sha256(chunk) for chunk in chunks]
        cached = _cleaned(await self._cache.get_many(model=model, document_sha=key, chunk_shas=sorted(set(shas))))
        missing = {sha: chunk for sha, chunk in zip(shas, chunks) if sha not in cached}
        deadline = asyncio.get_running_loop().time() + self._deadline_s
        failures = late = 0

        async def write(chunk: str) -> str | None:
            nonlocal failures, late
            if failures >= GIVE_UP_AFTER:
                return None
            try:
                # Waiting for a free slot counts too: other documents' calls may hold them all.
                async with asyncio.timeout_at(deadline) as budget, self._limit:
                    if failures >= GIVE_UP_AFTER:
                        return None
                    answer = await self._model.complete(
                        system=SYSTEM, user=self.prompt(document=document, chunk=chunk), max_tokens=self._max_tokens
                    )
            except (ServiceError, asyncio.TimeoutError) as exc:
                if budget.expired():
                    late += 1
                    return None
                failures += 1
                log.warning("contextual prefix failed; chunk indexed without it", extra={"model": model, "error": str(exc)[:200]})
                return None
            return _clean(answer)

        written = await asyncio.gather(*(write(chunk) for chunk in missing.values()))
        fresh = {sha: prefix for sha, prefix in zip(missing, written) if prefix}
        if fresh:
            await self._cache.put_many(model=model, document_sha=key, prefixes=fresh)
        if late:
            log.warning(
                "contextual prefix deadline passed; the document's remaining chunks indexed without prefixes",
                extra={"model": model, "deadline_s": self._deadline_s, "late": late, "chunks": len(chunks)},
            )
        if unwritten := sum(1 for p in written if not p):  # failed or late calls, or empty answers
            log.warning(
                "document indexed with missing contextual prefixes",
                extra={"model": model, "missing": unwritten, "chunks": len(chunks), "failed_calls": failures},
            )
        known = cached | fresh
        return [known.get(sha) for sha in shas]

    async def close(self) -> None:
        """Close the model's client and the cache, where they have something to close."""
        if (close_model := getattr(self._model, "close", None)) is not None:
            await close_model()
        if (close_cache := getattr(self._cache, "close", None)) is not None:
            close_cache()
