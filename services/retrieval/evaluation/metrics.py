"""Ranking metrics by ir-measures (trec_eval's definitions, as BEIR and MTEB report them), and paired
differences between two systems scored on the same queries."""
from __future__ import annotations

import math
from dataclasses import dataclass

import ir_measures
from ir_measures import RR, R, nDCG

Qrels = dict[str, dict[str, int]]  # query id -> {doc id: relevance}
Run = dict[str, dict[str, float]]  # query id -> {doc id: score}, higher is better

MEASURES = {"ndcg@10": nDCG @ 10, "recall@10": R @ 10, "recall@100": R @ 100, "mrr@10": RR @ 10}


@dataclass(frozen=True)
class Scores:
    means: dict[str, float]  # name in MEASURES -> mean over the judged queries
    per_query: dict[str, dict[str, float]]  # name -> {query id: value}


@dataclass(frozen=True)
class PairedDifference:
    mean: float  # mean of (a - b) over the queries
    ci95: float | None  # half-width of the 95 % interval of that mean (normal approximation); None under 2 queries
    queries: int


def score(qrels: Qrels, run: Run) -> Scores:
    """Every measure in MEASURES over the queries in `qrels`; a query with no results scores 0."""
    if not qrels:
        raise ValueError("no judged queries")
    per_query = {name: dict.fromkeys(qrels, 0.0) for name in MEASURES}
    by_measure = {measure: name for name, measure in MEASURES.items()}
    judged_run = {qid: docs for qid, docs in run.items() if qid in qrels and docs}
    for metric in ir_measures.iter_calc(list(MEASURES.values()), qrels, judged_run):
        per_query[by_measure[metric.measure]][metric.query_id] = float(metric.value)
    means = {name: sum(values.values()) / len(values) for name, values in per_query.items()}
    return Scores(means=means, per_query=per_query)


def paired_difference(a: dict[str, float], b: dict[str, float]) -> PairedDifference:
    """a − b on the queries both were scored on (e.g. per-query nDCG@10 of two modes)."""
    shared = sorted(set(a) & set(b))
    if not shared:
        raise ValueError("no query in common")
    diffs = [a[q] - b[q] for q in shared]
    mean = sum(diffs) / len(diffs)
    if len(diffs) < 2:
        return PairedDifference(mean=mean, ci95=None, queries=len(diffs))  # no spread to measure
    variance = sum((d - mean) ** 2 for d in diffs) / (len(diffs) - 1)
    return PairedDifference(mean=mean, ci95=1.96 * math.sqrt(variance / len(diffs)), queries=len(diffs))
