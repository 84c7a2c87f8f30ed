import pytest

from services.chat.confidence import assess, no_information, rank_weighted

pytestmark = pytest.mark.unit


def test_rank_weighting_favours_the_top_passage():
    assert rank_weighted([0.9, 0.1, 0.1]) > rank_weighted([0.1, 0.1, 0.9])
    assert rank_weighted([]) == 0.0
    assert rank_weighted([0.5, 0.5, 0.5, 0.0]) == pytest.approx(0.5)  # only the top three count


def test_strong_passages_with_several_citations_are_high():
    result = assess(relevances=[0.8, 0.7, 0.6], citation_count=2)
    assert result.level == "High"
    assert 0.6 <= result.score <= 1
    assert "2 citations" in result.reason


def test_moderate_passages_are_medium():
    assert assess(relevances=[0.45, 0.4], citation_count=1).level == "Medium"


def test_weak_passages_are_low():
    assert assess(relevances=[0.27, 0.26], citation_count=1).level == "Low"


def test_no_citation_is_always_low():
    result = assess(relevances=[0.95, 0.9], citation_count=0)
    assert result.level == "Low"
    assert "no passage is cited" in result.reason


def test_more_citations_raise_the_score():
    one = assess(relevances=[0.5], citation_count=1).score
    two = assess(relevances=[0.5], citation_count=2).score
    assert two > one


def test_no_information_names_the_threshold():
    result = no_information(best_relevance=0.12, threshold=0.25)
    assert (result.level, result.score) == ("Low", 0.0)
    assert "0.12" in result.reason and "0.25" in result.reason
    assert "no passage" in no_information(best_relevance=None, threshold=0.25).reason
