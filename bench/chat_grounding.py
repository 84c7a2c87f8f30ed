"""What the offline generator and the grounding check cost per request, in-process.

The demo collection (docs/*.md) is cut crudely into ~800-character passages at paragraph ends; for each
of ~20 questions the 8 passages sharing the most question terms stand in for retrieval (not timed),
in rank order with a made-up falling relevance. Timed per question, as chat runs them: the offline
generator's work (parse the context out of the system message, extractive.answer), then
resolve_citations and check_grounding over the 8 passages. The figures are absolute times (their
baseline is 0 ms, "nothing added"); the target is the issue's budget of +30 ms p50. The stemmer caches
words, so a running service stems little; the "cold" figure empties that cache before every request.
"""
from __future__ import annotations

import math
import statistics
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from bench.common import REPO, Figure, percentile
from services.chat.chunks import RetrievedChunk
from services.chat.citations import resolve_citations
from services.chat.context_format import parse_context
from services.chat.grounding import check_grounding
from services.chat.offline_llm import extractive
from services.chat.prompt import build_prompt
from services.chat.text_terms import stem, terms_of

PASSAGE_CHARS = 800
PASSAGES_PER_QUESTION = 8
BUDGET_MS = 30.0
QUESTIONS = (
    "How do I add a user?",
    "What is the TTL of a session?",
    "How do I scale retrieval?",
    "How do I log out?",
    "Which roles does Cairn have?",
    "How are passwords stored?",
    "What happens when Redis is down?",
    "How do I start Cairn?",
    "How do I check that Cairn is healthy?",
    "Which port does the gateway listen on?",
    "How do I ingest a PDF document?",
    "How do I delete a document?",
    "What does the confidence level mean?",
    "How are citations numbered?",
    "Which embedding model does retrieval use?",
    "How do I read the analytics?",
    "How do I change the chunk size?",
    "What happens when RabbitMQ is down?",
    "What is the capital of France?",
    "Who won the 1998 World Cup?",
)


def demo_passages(docs_dir: Path = REPO / "docs", *, size: int = PASSAGE_CHARS) -> list[RetrievedChunk]:
    """Every docs/*.md file cut at paragraph ends into passages of about `size` characters."""
    passages: list[RetrievedChunk] = []
    for path in sorted(docs_dir.glob("*.md")):
        title, section, buffer = path.stem, "", ""
        for paragraph in path.read_text(encoding="utf-8").split("\n\n"):
            if paragraph.startswith("#"):
                section = paragraph.lstrip("#").strip().splitlines()[0]
            buffer = f"{buffer}\n\n{paragraph}" if buffer else paragraph
            if len(buffer) >= size:
                passages.append(_passage(path, title, section, buffer, len(passages)))
                buffer = ""
        if buffer:
            passages.append(_passage(path, title, section, buffer, len(passages)))
    return passages


def _passage(path: Path, title: str, section: str, text: str, index: int) -> RetrievedChunk:
    return RetrievedChunk(
        chunk_id=f"{path.stem}-{index}", doc_id=path.name, content=text.strip(), score=0.0, relevance=0.0,
        title=title, section=section, chunk_index=index,
    )


def top_passages(question: str, passages: list[RetrievedChunk], k: int = PASSAGES_PER_QUESTION) -> list[RetrievedChunk]:
    """The `k` best passages by BM25, with a made-up relevance falling 0.7, 0.65, ... (stands in for retrieval)."""
    texts = [Counter(terms_of(p.content)) for p in passages]
    average = sum(sum(t.values()) for t in texts) / len(texts)
    df = Counter(term for t in texts for term in t)

    def idf(term: str) -> float:
        return math.log(1 + (len(texts) - df[term] + 0.5) / (df[term] + 0.5))

    def bm25(terms: Counter[str]) -> float:
        norm = 1.2 * (0.25 + 0.75 * sum(terms.values()) / average)
        return sum(idf(q) * terms[q] * 2.2 / (terms[q] + norm) for q in set(terms_of(question)) if q in terms)

    ranked = sorted(range(len(passages)), key=lambda i: -bm25(texts[i]))[:k]
    return [
        replace(passages[i], score=0.7 - 0.05 * rank, relevance=0.7 - 0.05 * rank) for rank, i in enumerate(ranked)
    ]


def one_request(question: str, chunks: list[RetrievedChunk], system: str, *, cold: bool = False) -> dict[str, float]:
    """Milliseconds of each step for one question; `cold`: the stemmer's word cache emptied first."""
    if cold:
        stem.cache_clear()
    marks = [time.perf_counter()]
    text = extractive.answer(question, parse_context(system))
    marks.append(time.perf_counter())
    cited = resolve_citations(text, chunks)
    marks.append(time.perf_counter())
    check_grounding(cited.answer, cited.citations, passages=chunks)
    marks.append(time.perf_counter())
    steps = [(b - a) * 1000 for a, b in zip(marks, marks[1:])]
    return {"generate": steps[0], "cite": steps[1], "ground": steps[2], "total": sum(steps)}


def _cases(passages: list[RetrievedChunk]) -> list[tuple[str, list[RetrievedChunk], str]]:
    """(question, the passages in the prompt, the system message) per question."""
    cases = []
    for question in QUESTIONS:
        prompt = build_prompt(query=question, chunks=top_passages(question, passages), token_budget=10_000)
        cases.append((question, prompt.chunks, prompt.messages[0]["content"]))
    return cases


def run(*, repeats: int, log: Callable[[str], None] = print, rounds: int = 20) -> list[Figure]:
    """p50 and p95 over `rounds` passes of every question (warm word cache, as a running service has),
    and p50 with the cache emptied before every request; one value per repeat."""
    passages = demo_passages()
    cases = _cases(passages)
    note = (
        f"{len(QUESTIONS)} questions x {PASSAGES_PER_QUESTION} passages of ~{PASSAGE_CHARS} chars "
        f"from {len(passages)} docs/*.md passages; parse + extractive.answer + resolve_citations + check_grounding"
    )
    figures = {
        "p50": Figure(name="offline answer + grounding p50", unit="ms", kind="excess", target=BUDGET_MS,
                      baseline_name="nothing", note=note),
        "p95": Figure(name="offline answer + grounding p95", unit="ms", kind="excess", target=None, baseline_name="nothing"),
        "cold": Figure(name="offline answer + grounding p50, cold", unit="ms", kind="excess", target=BUDGET_MS,
                       baseline_name="nothing", note="the stemmer's word cache emptied before every request"),
    }
    for case in cases:  # warm-up
        one_request(*case)
    for repeat in range(repeats):
        samples = [one_request(*case) for _ in range(rounds) for case in cases]
        cold = [one_request(*case, cold=True)["total"] for case in cases]
        totals = [s["total"] for s in samples]
        figures["p50"].add(statistics.median(totals), 0.0)
        figures["p95"].add(percentile(totals, 95), 0.0)
        figures["cold"].add(statistics.median(cold), 0.0)
        parts = ", ".join(f"{step} {statistics.median(s[step] for s in samples):.2f}" for step in ("generate", "cite", "ground"))
        log(
            f"  repeat {repeat + 1}/{repeats}: p50 {statistics.median(totals):.2f} ms, p95 {percentile(totals, 95):.2f} ms "
            f"(medians: {parts} ms); cold p50 {statistics.median(cold):.2f} ms"
        )
    return list(figures.values())


if __name__ == "__main__":
    from bench.common import format_table

    print(format_table(run(repeats=3)))
