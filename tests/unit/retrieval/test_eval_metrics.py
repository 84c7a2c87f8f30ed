"""The metrics `cairn eval` prints, checked against values computed by hand."""
from __future__ import annotations

import math

import pytest

from services.retrieval.evaluation.metrics import paired_difference, score
from services.retrieval.evaluation.ranking import best_chunk_per_document, rank_scores
from services.retrieval.search import SearchHit

pytestmark = pytest.mark.unit

QRELS = {"q1": {"d1": 1, "d2": 1}, "q2": {"d5": 1}, "q3": {"d9": 1}, "q4": {"d7": 1}}
RUN = {
    "q1": {"d3": 4.0, "d1": 3.0, "d4": 2.0, "d2": 1.0},  # relevant at ranks 2 and 4
    "q2": {f"x{i}": 100.0 - i for i in range(11)} | {"d5": 50.0},  # relevant at rank 12
    # q3: no results at all
    "q4": {"d7": 1.0, "d8": 0.5},  # relevant at rank 1
}


def test_ndcg_recall_and_mrr_match_the_hand_computed_values() -> None:
    scores = score(QRELS, RUN)
    # q1: DCG = 1/log2(3) + 1/log2(5); ideal DCG = 1/log2(2) + 1/log2(3)
    q1_ndcg = (1 / math.log2(3) + 1 / math.log2(5)) / (1 + 1 / math.log2(3))
    assert scores.per_query["ndcg@10"] == pytest.approx({"q1": q1_ndcg, "q2": 0.0, "q3": 0.0, "q4": 1.0})
    assert scores.means["ndcg@10"] == pytest.approx((q1_ndcg + 1.0) / 4)
    assert scores.per_query["mrr@10"] == pytest.approx({"q1": 0.5, "q2": 0.0, "q3": 0.0, "q4": 1.0})
    assert scores.means["recall@10"] == pytest.approx((1 + 0 + 0 + 1) / 4)
    assert scores.means["recall@100"] == pytest.approx((1 + 1 + 0 + 1) / 4), "rank 12 counts within 100, not 10"
    assert scores.means["mrr@10"] == pytest.approx(0.375)


def test_graded_relevance_gains_by_grade() -> None:
    scores = score({"q": {"a": 2, "b": 1}}, {"q": {"b": 2.0, "a": 1.0}})
    # DCG = 1/log2(2) + 2/log2(3); ideal = 2/log2(2) + 1/log2(3)
    assert scores.means["ndcg@10"] == pytest.approx((1 + 2 / math.log2(3)) / (2 + 1 / math.log2(3)))


def test_only_judged_queries_count() -> None:
    scores = score({"q": {"a": 1}}, {"q": {"a": 1.0}, "unjudged": {"b": 1.0}})
    assert scores.means["ndcg@10"] == 1.0 and set(scores.per_query["ndcg@10"]) == {"q"}


def test_no_judged_queries_is_an_error() -> None:
    with pytest.raises(ValueError):
        score({}, RUN)


def hit(doc_id: str, score: float, chunk: int = 0) -> SearchHit:
    return SearchHit(
        chunk_id=f"{doc_id}#{chunk}", doc_id=doc_id, content="", score=score, dense_score=score, keyword_score=None, metadata={}
    )


def test_a_document_ranks_by_its_best_chunk() -> None:
    hits = [hit("a", 0.9, 0), hit("b", 0.8, 0), hit("a", 0.7, 1), hit("c", 0.6), hit("b", 0.95, 3)]
    assert list(best_chunk_per_document(hits).items()) == [("b", 0.95), ("a", 0.9), ("c", 0.6)]
    assert list(best_chunk_per_document(hits, limit=2)) == ["b", "a"]


def test_tied_documents_keep_the_search_order_through_trec_eval() -> None:
    first_a = best_chunk_per_document([hit("a", 0.5), hit("b", 0.5)])
    first_b = best_chunk_per_document([hit("b", 0.5), hit("a", 0.5)])
    assert (list(first_a), list(first_b)) == (["a", "b"], ["b", "a"])
    qrels = {"q": {"b": 1}}
    # trec_eval re-sorts tied scores by document id, so both orders would score alike ...
    assert score(qrels, {"q": first_a}).means["mrr@10"] == score(qrels, {"q": first_b}).means["mrr@10"]
    # ... position scores make it evaluate the order Cairn returned.
    assert score(qrels, {"q": rank_scores(first_a)}).means["mrr@10"] == 0.5
    assert score(qrels, {"q": rank_scores(first_b)}).means["mrr@10"] == 1.0


def test_paired_difference_is_the_mean_per_query_difference_with_its_interval() -> None:
    a = {"q1": 1.0, "q2": 0.5, "q3": 0.0, "only_a": 1.0}
    b = {"q1": 0.5, "q2": 0.5, "q3": 0.5}
    diff = paired_difference(a, b)
    # differences 0.5, 0, -0.5: mean 0, sample sd 0.5
    assert (diff.mean, diff.queries) == (0.0, 3)
    assert diff.ci95 == pytest.approx(1.96 * 0.5 / math.sqrt(3))
    one_query = paired_difference({"q": 0.75}, {"q": 0.25})
    assert (one_query.mean, one_query.ci95) == (0.5, None)  # no interval from one query (was inf: not JSON)
    with pytest.raises(ValueError):
        paired_difference({"x": 1.0}, {"y": 1.0})


def test_a_query_judged_only_not_relevant_counts_as_zero_as_pytrec_eval_and_beir_count_it() -> None:
    scores = score({"q": {"a": 1}, "none": {"a": 0, "b": -1}}, {"q": {"a": 1.0}, "none": {"a": 2.0, "b": 1.0}})
    assert scores.per_query["ndcg@10"] == {"q": 1.0, "none": 0.0}
    assert scores.means["ndcg@10"] == scores.means["recall@100"] == 0.5
