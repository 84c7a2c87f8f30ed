"""`cairn eval DATASET_DIR`: score Cairn's retrieval on a BEIR-format dataset.

The corpus goes through the service's own ingestion (chunker, embedder, Chroma with the configured
HNSW parameters, BM25 index keeping the chunk vectors) into a temporary collection, the queries through
the service's own search function with the configured fusion settings; dense lookups go where the
service sends them (the exact scan up to EXACT_SEARCH_MAX_CHUNKS, Chroma's HNSW above). Chunk
embeddings are cached under CAIRN_DATA_DIR, so evaluating the same corpus again encodes nothing.
"""
from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import sys
import tempfile
from collections.abc import Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from pydantic import ValidationError
from tqdm import tqdm

from services.retrieval import ingestion
from services.retrieval import search as search_module
from services.retrieval.adapters.bm25_index import keyword_indexed
from services.retrieval.adapters.chroma_store import ChromaStore
from services.retrieval.adapters.context_llm import build_contextualizer
from services.retrieval.adapters.embedder import embedder_from_settings
from services.retrieval.contextual import Contextualizer
from services.retrieval.embedding_cache import CachingEmbedder, model_fingerprint
from services.retrieval.evaluation.ann import AnnReport, ann_recall
from services.retrieval.evaluation.beir import BeirDataset, DatasetError, load_beir
from services.retrieval.evaluation.corpus import RecordingStore
from services.retrieval.evaluation.metrics import paired_difference
from services.retrieval.evaluation.report import EvalReport
from services.retrieval.evaluation.runner import (
    DOCUMENTS_RANKED,
    IngestReport,
    ModeReport,
    chunks_to_request,
    ingest_corpus,
    run_mode,
)
from services.retrieval.ports import Embedder
from services.retrieval.settings import Settings
from shared.settings import print_settings_problems

MODE_ORDER = ("dense", "keyword", "hybrid")  # report order: the two legs, then their fusion
# Ended like Ctrl-C, which asyncio.run already turns into a cancelled run: their default action would end the
# process on the spot and leave the temporary collection behind.
STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP)
T = TypeVar("T")


@dataclass
class _Measured:
    ingest: IngestReport
    modes: list[ModeReport]
    ann: AnnReport
    dense_lookup: str  # "exact" or "hnsw": which of the two answered the unfiltered dense lookups


def run(
    dataset_dir: Path,
    *,
    split: str,
    mode: str,
    whole_docs: bool,
    as_json: bool,
    settings: Settings | None = None,
    embedder: Embedder | None = None,
) -> int:
    """Print the report; 2 when the settings are invalid or the dataset cannot be read, 128 + the signal
    number when SIGTERM or SIGHUP stopped it. `embedder` replaces the configured model (tests)."""
    try:
        settings = settings or Settings()
    except ValidationError as exc:
        print_settings_problems(exc, prefix="error: ")
        return 2
    modes = [m for m in MODE_ORDER if m in search_module.MODES] if mode == "all" else [mode]
    try:
        dataset = load_beir(dataset_dir, split=split)
    except DatasetError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if dataset.relevant_missing:
        print(
            f"note: {dataset.relevant_missing} (query, document) pairs that qrels/{split}.tsv marks relevant name a "
            "document the corpus lacks; no mode can find them, so they lower every score",
            file=sys.stderr,
        )
    if dataset.queries_in_corpus:
        print(
            f"note: {dataset.queries_in_corpus} queries have the id of a corpus document; as in BEIR's evaluation, "
            "that document is left out of their rankings",
            file=sys.stderr,
        )
    # Made and deleted outside asyncio.run, which returns (also when cancelled) only once every worker thread
    # has finished: deleted inside, it raced the Chroma writes still running and was left behind.
    with tempfile.TemporaryDirectory(prefix="cairn-eval-") as scratch:
        evaluating = _evaluate(
            dataset, split=split, settings=settings, modes=modes, whole_docs=whole_docs, embedder=embedder, scratch=Path(scratch)
        )
        try:
            report = asyncio.run(_stoppable(evaluating))
        except _Stopped as stopped:
            print(f"\nstopped by {signal.Signals(stopped.signum).name}", file=sys.stderr)
            return 128 + stopped.signum
    print(json.dumps(report.as_dict(), indent=2, allow_nan=False) if as_json else report.as_table())
    return 0


class _Stopped(Exception):
    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


async def _stoppable(work: Coroutine[Any, Any, T]) -> T:
    """`work`, cancelled by any of STOP_SIGNALS; _Stopped then says which."""
    loop = asyncio.get_running_loop()
    task = asyncio.current_task()
    received: list[int] = []

    def stop(signum: int) -> None:
        received.append(signum)
        if task is not None:
            task.cancel()

    previous = {signum: signal.getsignal(signum) for signum in STOP_SIGNALS}
    for signum in STOP_SIGNALS:
        loop.add_signal_handler(signum, stop, signum)
    try:
        return await work
    except asyncio.CancelledError:
        if received:
            raise _Stopped(received[0]) from None
        raise
    finally:
        for signum, handler in previous.items():
            loop.remove_signal_handler(signum)
            signal.signal(signum, handler)  # remove_signal_handler leaves the default action, not the one before


async def _evaluate(
    dataset: BeirDataset,
    *,
    split: str,
    settings: Settings,
    modes: list[str],
    whole_docs: bool,
    embedder: Embedder | None,
    scratch: Path,
) -> EvalReport:
    model_path = settings.model_path()
    owned = None
    if embedder is None:
        # No query cache: every mode pays for its query encodes, so latencies compare fairly.
        owned = embedder = await asyncio.to_thread(embedder_from_settings, settings, cache_size=0)
    backend = getattr(embedder, "backend", settings.embedding_backend)
    cached = CachingEmbedder(embedder, path=settings.embedding_cache_path, model_id=model_fingerprint(model_path, backend=backend))
    contextualizer = build_contextualizer(settings, force=True)
    try:
        measured = await _measure(
            dataset, settings=settings, embedder=cached, modes=modes, whole_docs=whole_docs, folder=scratch / "plain"
        )
        embeddings = {"computed": cached.stats.misses, "reused": cached.stats.hits}
        contextual: dict[str, Any] = {"measured": False, "summary": "not measured (LLM_BASE_URL and LLM_MODEL not set)"}
        if contextualizer is not None:
            with_prefixes = await _measure(
                dataset, settings=settings, embedder=cached, modes=modes, whole_docs=whole_docs,
                folder=scratch / "contextual", contextualizer=contextualizer,
            )
            contextual = _contextual_effect(measured.modes, with_prefixes.modes, model=settings.llm_model)
    finally:
        cached.close()
        if owned is not None:
            owned.close()
        if contextualizer is not None:
            await contextualizer.close()
    size = cached.max_tokens if whole_docs else min(settings.chunk_size_tokens, cached.max_tokens)
    return EvalReport(
        dataset=dataset.name,
        split=split,
        queries=len(dataset.queries),
        chunking={
            "whole_docs": whole_docs,
            "chunk_size_tokens": size,
            "chunk_overlap_tokens": 0 if whole_docs else settings.chunk_overlap_tokens,
        },
        ingest=measured.ingest,
        embeddings=embeddings,
        modes=measured.modes,
        ann=measured.ann,
        dense_lookup=measured.dense_lookup,
        exact_max_chunks=settings.exact_search_max_chunks,
        contextual=contextual,
        embedding={"model": str(settings.embedding_model_path or "all-MiniLM-L6-v2 (packaged)"), "backend": backend},
    )


async def _measure(
    dataset: BeirDataset,
    *,
    settings: Settings,
    embedder: CachingEmbedder,
    modes: list[str],
    whole_docs: bool,
    folder: Path,
    contextualizer: Contextualizer | None = None,
) -> _Measured:
    """Index the corpus into a temporary collection kept in `folder`, run the queries, check the ANN index."""
    size = embedder.max_tokens if whole_docs else min(settings.chunk_size_tokens, embedder.max_tokens)
    overlap = 0 if whole_docs else settings.chunk_overlap_tokens
    options = search_module.SearchOptions(
        candidates=settings.hybrid_candidates,
        rrf_k=settings.rrf_k,
        dense_weight=settings.hybrid_dense_weight,
        keyword_weight=settings.hybrid_keyword_weight,
    )
    # Closed at the end: Chroma would keep the temporary index, files and memory, until the process ends.
    with contextlib.closing(ChromaStore(
        collection="cairn-eval",
        path=folder,
        timeout_s=max(settings.chroma_timeout_s, 60.0),
        ef_search=settings.hnsw_ef_search,
        ef_construction=settings.hnsw_ef_construction,
        max_neighbors=settings.hnsw_max_neighbors,
    )) as chroma:
        recording = RecordingStore(chroma)
        store, keywords, keyword_sync = keyword_indexed(
            recording,
            interval_s=settings.keyword_sync_interval_s,
            exact_max_chunks=settings.exact_search_max_chunks,
            max_scan_batch=settings.search_max_query_batch,
        )
        await keyword_sync.refresh()  # loads the (empty) index; every later write goes through `store`

        async def ingest(document: ingestion.NewDocument) -> ingestion.IngestResult:
            return await ingestion.ingest_document(
                document, embedder=embedder, store=store, chunk_size=size, chunk_overlap=overlap, contextualizer=contextualizer
            )

        async def search(query: str, mode: str, top_k: int) -> list[search_module.SearchHit]:
            return await search_module.search(
                query=query, top_k=top_k, embedder=embedder, store=store, keywords=keywords, mode=mode, options=options
            )

        label = f"ingesting {dataset.name}" + (" with contextual prefixes" if contextualizer else "")
        with _bar(len(dataset.corpus), label) as bar:
            ingested = await ingest_corpus(
                dataset,
                ingest=ingest,
                truncate_to=embedder.max_tokens if whole_docs else None,
                count_tokens=embedder.count_tokens,
                progress=bar.update,
            )
        # Built before the first query, as a replica's index is once its writes settle: otherwise dense
        # lookups would go to Chroma until some keyword search built it, and the modes would not compare.
        await asyncio.to_thread(keywords.build)
        dense_lookup = "exact" if keywords.exact_dense() is not None else "hnsw"
        # One more document when a query's own document is left out of its ranking, so that 100 remain.
        ranked = DOCUMENTS_RANKED + 1 if dataset.queries_in_corpus else DOCUMENTS_RANKED
        depth = chunks_to_request(chunks=ingested.chunks, documents=ingested.documents, ranked=ranked)
        results = []
        for mode in modes:
            # Hybrid fuses the top `candidates` of each leg, as served; asking for more would deepen the legs.
            top_k = min(depth, options.candidates) if mode == "hybrid" else depth
            with _bar(len(dataset.queries), f"{mode} search") as bar:
                results.append(await run_mode(dataset, mode=mode, search=search, top_k=top_k, progress=bar.update))
        ann = await ann_recall(
            queries=list(dataset.queries.values()), embed_query=embedder.embed_query, store=chroma, embeddings=recording.embeddings
        )
        return _Measured(ingest=ingested, modes=results, ann=ann, dense_lookup=dense_lookup)


def _contextual_effect(without: list[ModeReport], with_prefixes: list[ModeReport], *, model: str) -> dict[str, Any]:
    effect = {}
    for plain, enriched in zip(without, with_prefixes, strict=True):
        diff = paired_difference(enriched.scores.per_query["ndcg@10"], plain.scores.per_query["ndcg@10"])
        effect[plain.mode] = {
            "without": round(plain.scores.means["ndcg@10"], 4),
            "with": round(enriched.scores.means["ndcg@10"], 4),
            "paired_mean": round(diff.mean, 4),
            "ci95": None if diff.ci95 is None else round(diff.ci95, 4),
        }
    summary = "; ".join(f"{m} nDCG@10 {e['without']:.4f} → {e['with']:.4f} ({e['paired_mean']:+.4f} ± {'n/a' if e['ci95'] is None else format(e['ci95'], '.4f')})" for m, e in effect.items())
    return {"measured": True, "model": model, "ndcg@10": effect, "summary": f"with prefixes by {model}: {summary}"}


def _bar(total: int, description: str) -> tqdm:
    """Drawn only when standard error is a terminal (disable=None): in a log file its redraws would pile up."""
    return tqdm(
        total=total, desc=description, unit="", file=sys.stderr, leave=False, dynamic_ncols=True, disable=None
    )
