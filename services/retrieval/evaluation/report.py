"""What `cairn eval` prints: one JSON-ready dict, and the same as a table."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from itertools import combinations
from typing import Any

from services.retrieval.evaluation.ann import AnnReport
from services.retrieval.evaluation.metrics import MEASURES, paired_difference
from services.retrieval.evaluation.runner import IngestReport, ModeReport

_HEADERS = {"ndcg@10": "nDCG@10", "recall@10": "R@10", "recall@100": "R@100", "mrr@10": "MRR@10"}


@dataclass
class EvalReport:
    dataset: str
    split: str
    queries: int
    chunking: dict[str, Any]  # whole_docs, chunk_size_tokens, chunk_overlap_tokens
    ingest: IngestReport
    embeddings: dict[str, int]  # computed, reused
    modes: list[ModeReport]
    ann: AnnReport | None = None
    dense_lookup: str = "hnsw"  # "exact": the kept vectors scanned, as the service does up to exact_max_chunks
    exact_max_chunks: int = 0
    contextual: dict[str, Any] = field(default_factory=dict)
    embedding: dict[str, str] = field(default_factory=dict)  # model, backend

    def as_dict(self) -> dict[str, Any]:
        return {
            "dataset": self.dataset,
            "split": self.split,
            "queries": self.queries,
            "documents": self.ingest.documents,
            "chunks": self.ingest.chunks,
            "chunking": self.chunking,
            "embedding": self.embedding,
            "ingest": {"seconds": round(self.ingest.seconds, 2), **self.embeddings, "failures": self.ingest.failures},
            "modes": {
                m.mode: {
                    **{name: round(value, 4) for name, value in m.scores.means.items()},
                    "latency_ms": {k: round(v, 2) for k, v in m.latency_ms.items()},
                    "chunks_requested": m.chunks_requested,
                }
                for m in self.modes
            },
            "paired_ndcg@10": [
                {"a": a, "b": b, "mean": round(d.mean, 4), "ci95": _rounded(d.ci95), "queries": d.queries}
                for a, b, d in self.paired()
            ],
            "dense_lookup": self.dense_lookup,
            "ann": None if self.ann is None else asdict(self.ann),
            "contextual": self.contextual,
        }

    def paired(self) -> list[tuple[str, str, Any]]:
        """nDCG@10 of every pair of modes, a − b per query; a is the later mode in the run order."""
        return [
            (a.mode, b.mode, paired_difference(a.scores.per_query["ndcg@10"], b.scores.per_query["ndcg@10"]))
            for b, a in combinations(self.modes, 2)
        ]

    def as_table(self) -> str:
        chunking = (
            "whole documents (truncated to the model's limit)"
            if self.chunking.get("whole_docs")
            else f"chunks of {self.chunking['chunk_size_tokens']} tokens, overlap {self.chunking['chunk_overlap_tokens']}"
        )
        lines = [
            f"{self.dataset} ({self.split}): {self.queries} queries, {self.ingest.documents} documents, "
            f"{self.ingest.chunks} chunks — {chunking}"
            + (f"; {self.embedding['model']} on {self.embedding['backend']}" if self.embedding else ""),
            f"ingest {self.ingest.seconds:.1f} s: {self.embeddings['computed']} embeddings computed, "
            f"{self.embeddings['reused']} reused from the cache; {len(self.ingest.failures)} documents failed",
            "",
            f"{'mode':<9}" + "".join(f"{_HEADERS[name]:>9}" for name in MEASURES) + f"{'p50 ms':>9}{'p95 ms':>9}{'chunks':>8}",
        ]
        for m in self.modes:
            lines.append(
                f"{m.mode:<9}"
                + "".join(f"{m.scores.means[name]:>9.4f}" for name in MEASURES)
                + f"{m.latency_ms['p50']:>9.1f}{m.latency_ms['p95']:>9.1f}{m.chunks_requested:>8}"
            )
        lines.append("(latency: one search call for that many chunks, query encoding included; documents ranked by best chunk)")
        lines.append(self._dense_lookup_line())
        for a, b, d in self.paired():
            lines.append(f"paired nDCG@10 {a} − {b}: {d.mean:+.4f} ± {_interval(d.ci95)} (95 % CI, {d.queries} queries)")
        if self.ann is not None:
            lines.append(
                f"HNSW (searches above the exact-scan limit): {self.ann.recall:.4f} of the exact top-{self.ann.k} returned "
                f"over {self.ann.chunks} chunks ({self.ann.queries} queries); store query p50 {self.ann.query_ms['p50']:.2f} ms, "
                f"p95 {self.ann.query_ms['p95']:.2f} ms"
            )
        if self.contextual:
            lines.append(f"contextual chunking: {self.contextual.get('summary', 'not measured')}")
        return "\n".join(lines)

    def _dense_lookup_line(self) -> str:
        if self.dense_lookup == "exact":
            return (f"dense lookups: an exact scan of the {self.ingest.chunks} chunk vectors, as the service answers "
                    f"searches up to EXACT_SEARCH_MAX_CHUNKS={self.exact_max_chunks}")
        return (f"dense lookups: Chroma's HNSW index, as the service answers them above "
                f"EXACT_SEARCH_MAX_CHUNKS={self.exact_max_chunks} chunks")


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


def _interval(ci95: float | None) -> str:
    return "n/a" if ci95 is None else f"{ci95:.4f}"
