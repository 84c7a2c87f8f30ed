from __future__ import annotations

from datetime import date, datetime, timezone

import pytest

from services.retrieval.adapters.chroma_store import to_where
from shared.filters import Condition, Filter, InvalidFilter, as_date_filterable, matches, parse_filter

pytestmark = pytest.mark.unit

META = {"doc_id": "a.md", "category": "guide", "page": 3, "score": 0.5, "draft": False, "published": 1714521600}


def test_plain_values_mean_equality_and_operators_combine() -> None:
    parsed = parse_filter({"category": "guide", "page": {"$gte": 2, "$lt": 5}})
    assert parsed.conditions == (
        Condition("category", "$eq", "guide"),
        Condition("page", "$gte", 2),
        Condition("page", "$lt", 5),
    )
    assert not parse_filter(None) and not parse_filter({})
    assert parse_filter(parsed) is parsed


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ({"category": "guide"}, True),
        ({"category": "Guide"}, False),
        ({"page": 3.0}, True),  # numbers compare as numbers
        ({"page": "3"}, False),  # a string never equals a number
        ({"draft": False}, True),
        ({"draft": 0}, False),  # a boolean only equals a boolean
        ({"page": {"$ne": 4}}, True),
        ({"missing": {"$ne": "x"}}, True),  # as in Chroma: $ne matches a chunk without the key
        ({"missing": "x"}, False),
        ({"doc_id": {"$in": ["b.md", "a.md"]}}, True),
        ({"doc_id": {"$nin": ["a.md"]}}, False),
        ({"page": {"$in": [1, 2.0, 3]}}, True),
        ({"score": {"$in": [1, 0.5]}}, True),
        ({"page": {"$gt": 3}}, False),
        ({"page": {"$gte": 3, "$lte": 3}}, True),
        ({"score": {"$lt": 1}}, True),
        ({"category": {"$gt": 1}}, False),  # a range never matches a string
        ({"draft": {"$lt": 1}}, False),  # nor a boolean
        ({"missing": {"$gt": 0}}, False),
        ({"published": {"$gte": "2024-05-01"}}, True),  # 1714521600 = 2024-05-01T00:00:00Z
        ({"published": {"$gt": "2024-05-01T00:00:00+00:00"}}, False),
        ({"published": {"$lt": "2024-05-01T02:00:00+02:00"}}, False),  # the same instant
        ({"category": "guide", "page": {"$gt": 5}}, False),  # every condition must hold
    ],
)
def test_matches_follows_chroma_semantics(spec: dict, expected: bool) -> None:
    assert matches(parse_filter(spec), META) is expected


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"$or": "x"}, "plain field name"),
        ({"bad key": 1}, "plain field name"),
        ({"category": ["a", "b"]}, "strings, numbers or booleans"),
        ({"category": None}, "strings, numbers or booleans"),
        ({"category": {"$like": "a%"}}, "unknown operator"),
        ({"category": {}}, "empty operator object"),
        ({"doc_id": {"$in": []}}, "list of 1 to"),
        ({"doc_id": {"$in": "a.md"}}, "list of 1 to"),
        ({"doc_id": {"$in": ["a", 1]}}, "all be strings, all numbers"),
        ({"page": {"$gt": "soon"}}, "number or an ISO date"),
        ({"page": {"$gt": True}}, "number or an ISO date"),
        ({"page": {"$gt": float("nan")}}, "finite"),
        ({"page": 2**63}, "fit in 64 bits"),  # Chroma refuses it: a 503 "chroma unavailable" before
        # Chroma cuts the fraction off against a whole-number field; keyword search would compare exactly.
        ({"page": 2.5}, "page holds whole numbers, got 2.5"),
        ({"page": {"$lt": 1.5}}, "page holds whole numbers, got 1.5"),
        ({"chunk_index": {"$in": [1, 0.5]}}, "chunk_index holds whole numbers, got 0.5"),
        ({"pages": {"$gte": "2024-01-01T00:00:00.5"}}, "pages holds whole numbers"),
        ({"page": {"$gte": -(2**63) - 1}}, "fit in 64 bits"),
        ({"page": {"$in": [1, 2**64]}}, "fit in 64 bits"),
        ({"page": {"$in": [1, 1e19]}}, "fit in 64 bits"),  # a whole float, too big once it is an int
        ({"chunk_index": {"$gt": 1e19}}, "fit in 64 bits"),
        ({f"k{i}": 1 for i in range(11)}, "at most 10"),
    ],
)
def test_invalid_filters_say_what_is_wrong(spec: dict, message: str) -> None:
    with pytest.raises(InvalidFilter, match=message):
        parse_filter(spec)


@pytest.mark.parametrize(
    "spec",
    [{"published": {"$gt": "2024-" * 200_000}}, {"x" * 1_000_000: 1}, {"category": {"$" + "like" * 250_000: 1}}],
)
def test_a_refused_value_is_quoted_cut_short(spec: dict) -> None:
    # A megabyte sent where a date, a key or an operator belongs once came back whole in the 422.
    with pytest.raises(InvalidFilter) as refused:
        parse_filter(spec)
    assert len(str(refused.value)) < 300 and "..." in str(refused.value)


def test_whole_number_fields_take_whole_floats_as_ints() -> None:
    assert parse_filter({"page": 2.0, "chunk_index": {"$in": [1, 2.0]}}).conditions == (
        Condition("page", "$eq", 2), Condition("chunk_index", "$in", (1, 2)),
    )
    assert parse_filter({"level": 2.5}).conditions == (Condition("level", "$eq", 2.5),)  # other fields as given


def test_mixed_int_and_float_lists_become_floats_for_chroma() -> None:
    (condition,) = parse_filter({"score": {"$in": [1, 2.5]}}).conditions
    assert condition.value == (1.0, 2.5) and all(isinstance(v, float) for v in condition.value)


def test_chroma_where_is_one_clause_per_condition() -> None:
    assert to_where(None) is None and to_where({}) is None
    assert to_where({"category": "guide"}) == {"category": {"$eq": "guide"}}
    assert to_where({"doc_id": {"$in": ["a", "b"]}, "page": {"$gte": 2, "$lt": 5}}) == {
        "$and": [{"doc_id": {"$in": ["a", "b"]}}, {"page": {"$gte": 2}}, {"page": {"$lt": 5}}]
    }
    assert to_where(Filter((Condition("doc_id", "$ne", "x"),))) == {"doc_id": {"$ne": "x"}}


def test_dates_to_store_are_epoch_seconds_in_utc() -> None:
    assert as_date_filterable(date(2024, 5, 1)) == 1714521600
    assert as_date_filterable(datetime(2024, 5, 1, 2, tzinfo=timezone.utc)) == 1714521600 + 7200
