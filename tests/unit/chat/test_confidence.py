import pytest

from services.chat.confidence import (
    HIGH_AT,
    assess,
    no_information,
    rank_weighted,
    retrieval_strength,
    small_talk,
    support_share,
)
from services.chat.grounding import METHOD, Grounding

pytestmark = pytest.mark.unit

STRONG = [0.72, 0.65, 0.6, 0.5]
WEAK = [0.31, 0.3, 0.28]


def grounding(supported: int = 0, weak: int = 0, unsupported: int = 0) -> Grounding:
    return Grounding(score=0.0, supported=supported, weak=weak, unsupported=unsupported, method=METHOD)


def test_rank_weighting_favours_the_top_passage():
    assert rank_weighted([0.9, 0.1, 0.1]) > rank_weighted([0.1, 0.1, 0.9])
    assert rank_weighted([]) == 0.0
    assert rank_weighted([0.5, 0.5, 0.5, 0.0]) == pytest.approx(0.5)  # only the top three count


def test_retrieval_strength_runs_from_weak_to_strong_relevance():
    assert retrieval_strength([0.3]) == 0.0 and retrieval_strength([0.2]) == 0.0
    assert retrieval_strength([0.6]) == 1.0 and retrieval_strength([0.9]) == 1.0
    assert retrieval_strength([0.45]) == pytest.approx(0.5)


def test_support_counts_weak_citations_as_half():
    assert support_share(grounding(supported=2)) == 1.0
    assert support_share(grounding(supported=1, weak=1)) == 0.75
    assert support_share(grounding(supported=1, unsupported=1)) == 0.5
    assert support_share(grounding()) == 0.0


def test_strong_retrieval_with_every_citation_supported_is_high():
    result = assess(relevances=STRONG, relevant_sources=7, grounding=grounding(supported=3))
    assert result.level == "High" and HIGH_AT <= result.score <= 1
    assert result.reason == "7 relevant sources, 3 citations, all supported"


def test_strong_retrieval_with_half_the_citations_unsupported_is_medium_at_most():
    for relevances in (STRONG, [0.95, 0.95, 0.95]):
        result = assess(relevances=relevances, relevant_sources=5, grounding=grounding(supported=1, unsupported=1))
        assert result.level == "Medium"
        assert result.reason == "5 relevant sources, 2 citations, 1 of 2 supported, 1 unsupported"


def test_one_unsupported_citation_rules_out_high():
    result = assess(relevances=STRONG, relevant_sources=6, grounding=grounding(supported=5, unsupported=1))
    assert result.score >= HIGH_AT and result.level == "Medium"


def test_weak_citations_lower_the_score():
    supported = assess(relevances=STRONG, relevant_sources=5, grounding=grounding(supported=2))
    weak = assess(relevances=STRONG, relevant_sources=5, grounding=grounding(supported=1, weak=1))
    assert weak.score < supported.score
    assert weak.reason == "5 relevant sources, 2 citations, 1 of 2 supported"


def test_weak_retrieval_is_low_even_when_supported():
    result = assess(relevances=WEAK, relevant_sources=3, grounding=grounding(supported=2))
    assert result.level == "Low"
    assert result.reason.startswith("3 relevant sources, 2 citations, all supported; the passages match the question weakly")


def test_moderate_retrieval_with_supported_citations_is_medium():
    result = assess(relevances=[0.47, 0.42], relevant_sources=1, grounding=grounding(supported=1))
    assert result.level == "Medium"
    assert result.reason.startswith("1 relevant source, 1 citation, all supported; the passages match the question moderately")


def test_no_citation_is_always_low():
    result = assess(relevances=[0.95, 0.9], relevant_sources=2, grounding=grounding())
    assert result.level == "Low"
    assert result.reason == "2 relevant sources, no citation"


def test_small_talk_is_low_and_says_nothing_was_searched():
    result = small_talk()
    assert (result.level, result.score) == ("Low", 0.0)
    assert "small talk" in result.reason and "no documents were searched" in result.reason


def test_no_information_names_the_threshold():
    result = no_information(best_relevance=0.12, threshold=0.25)
    assert (result.level, result.score) == ("Low", 0.0)
    assert "0.12" in result.reason and "0.25" in result.reason
    assert "no passage" in no_information(best_relevance=None, threshold=0.25).reason
