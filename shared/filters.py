"""Metadata filters: parsed once from the request, then applied the same way in every search mode.
Shared because chat checks a question's filters before it does any work (a model call to rewrite a
follow-up), as retrieval does before it searches.

A filter maps metadata keys to a condition; all conditions must hold (AND):

    {"category": "guide"}                        equality (also {"$eq": v}, {"$ne": v})
    {"doc_id": {"$in": ["a.md", "b.md"]}}        one of (also "$nin")
    {"page": {"$gte": 2, "$lt": 5}}              range on a number; several operators on one key combine
    {"published": {"$gte": "2024-01-01"}}        range on a date stored as epoch seconds

Semantics follow Chroma's, so dense search (Chroma `where`) and keyword search (`matches`) agree:
numbers compare as numbers (1 == 1.0), booleans only equal booleans, strings only strings; a range
never matches a non-number; "$ne"/"$nin" also match chunks that lack the key.

Dates: range bounds may be ISO 8601 dates or datetimes (UTC unless they carry an offset); they are
turned into epoch seconds, so date fields must be stored as numbers of epoch seconds.
"""
from __future__ import annotations

import math
import operator
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import date, datetime, timezone
from typing import Any, Literal


Scalar = str | int | float | bool
Operator = Literal["$eq", "$ne", "$in", "$nin", "$gt", "$gte", "$lt", "$lte"]

KEY_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]{0,63}$"
_KEY = re.compile(KEY_PATTERN)
_RANGE = {"$gt": operator.gt, "$gte": operator.ge, "$lt": operator.lt, "$lte": operator.le}
_LISTS = {"$in", "$nin"}
MAX_KEYS = 10
MAX_VALUES = 100
_QUOTED_CHARS = 80  # of a refused value, in the error message
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
# Metadata retrieval stores as whole numbers: filters on them take whole numbers only (see _as_whole_numbers).
WHOLE_NUMBER_FIELDS = frozenset({"page", "pages", "chunk_index", "char_start", "char_end"})


class InvalidFilter(ValueError):
    """A filter that cannot be applied; the message says which part and why."""


@dataclass(frozen=True)
class Condition:
    key: str
    op: Operator
    value: Scalar | tuple[Scalar, ...]


@dataclass(frozen=True)
class Filter:
    """Conditions that must all hold. Build one with `parse_filter`."""

    conditions: tuple[Condition, ...]

    def __bool__(self) -> bool:
        return bool(self.conditions)


def checked_filter(value: Mapping[str, Any] | None) -> Any:
    """`value` unchanged when parse_filter accepts it, else ValueError with its message: a pydantic validator
    for a request's `filters` field, so the 422 names the key."""
    try:
        parse_filter(value)
    except InvalidFilter as exc:
        raise ValueError(str(exc)) from None
    return value


def filter_schema() -> dict[str, Any]:
    """What parse_filter accepts, as far as JSON Schema can say it (dates in range bounds are ISO strings)."""
    scalar = {"type": ["string", "number", "boolean"]}
    one_kind_list = {
        "type": "array",
        "minItems": 1,
        "maxItems": MAX_VALUES,
        "anyOf": [{"items": {"type": kind}} for kind in ("string", "number", "boolean")],
    }
    date, date_time = {"type": "string", "format": "date"}, {"type": "string", "format": "date-time"}
    bound = {"anyOf": [{"type": "number"}, date, date_time]}
    operators = {
        "type": "object",
        "minProperties": 1,
        "additionalProperties": False,
        "properties": {
            "$eq": scalar,
            "$ne": scalar,
            "$in": one_kind_list,
            "$nin": one_kind_list,
            **{op: bound for op in ("$gt", "$gte", "$lt", "$lte")},
        },
    }
    return {
        "type": "object",
        "maxProperties": MAX_KEYS,
        "propertyNames": {"pattern": KEY_PATTERN},
        "additionalProperties": {"anyOf": [scalar, operators]},
    }


def parse_filter(raw: Mapping[str, Any] | Filter | None) -> Filter:
    """Validate a filter as sent in a request; raises InvalidFilter with a message naming the key."""
    if isinstance(raw, Filter):
        return raw
    if raw is None:
        return Filter(())
    if not isinstance(raw, Mapping):
        raise InvalidFilter("filters must be an object of metadata keys")
    if len(raw) > MAX_KEYS:
        raise InvalidFilter(f"at most {MAX_KEYS} filter keys")
    conditions: list[Condition] = []
    for key, spec in raw.items():
        if not isinstance(key, str) or not _KEY.fullmatch(key):
            raise InvalidFilter(f"filter key {_quoted(key)} must be a plain field name (letters, digits, _)")
        if isinstance(spec, Mapping):
            if not spec:
                raise InvalidFilter(f"filter {key!r}: empty operator object")
            conditions += [_condition(key, op, value) for op, value in spec.items()]
        else:
            conditions.append(_condition(key, "$eq", spec))
    return Filter(tuple(conditions))


def _condition(key: str, op: str, value: Any) -> Condition:
    condition = _parsed_condition(key, op, value)
    return _as_whole_numbers(condition) if key in WHOLE_NUMBER_FIELDS else condition


def _as_whole_numbers(condition: Condition) -> Condition:
    """A field stored as whole numbers takes whole numbers only: Chroma cuts a fraction off before comparing
    (page < 1.5 would find no page 1 in dense search), where keyword search would compare exactly."""
    values = condition.value if isinstance(condition.value, tuple) else (condition.value,)
    if fractions := [v for v in values if isinstance(v, float) and not v.is_integer()]:
        raise InvalidFilter(f"filter {condition.key!r}: {condition.key} holds whole numbers, got {fractions[0]!r}")
    whole = tuple(int(v) if isinstance(v, float) else v for v in values)
    for value in whole:  # 1e19 is a whole number, but not one Chroma can store
        _scalar(value, f"filter {condition.key!r}")
    return Condition(condition.key, condition.op, whole if isinstance(condition.value, tuple) else whole[0])


def _parsed_condition(key: str, op: str, value: Any) -> Condition:
    where = f"filter {key!r}"
    if op in ("$eq", "$ne"):
        return Condition(key, op, _scalar(value, where))
    if op in _LISTS:
        if not isinstance(value, list | tuple) or not 1 <= len(value) <= MAX_VALUES:
            raise InvalidFilter(f"{where}: {op} takes a list of 1 to {MAX_VALUES} values")
        values = tuple(_scalar(v, where) for v in value)
        kinds = {_kind(v) for v in values}
        if len(kinds) > 1:
            raise InvalidFilter(f"{where}: the values of {op} must all be strings, all numbers or all booleans")
        if kinds == {"number"} and any(isinstance(v, float) for v in values):
            values = tuple(float(v) for v in values)  # Chroma refuses a list mixing ints and floats
        return Condition(key, op, values)
    if op in _RANGE:
        return Condition(key, op, _bound(value, where))
    raise InvalidFilter(f"{where}: unknown operator {_quoted(op)} (use $eq, $ne, $in, $nin, $gt, $gte, $lt, $lte)")


def _scalar(value: Any, where: str) -> Scalar:
    if isinstance(value, float) and not math.isfinite(value):
        raise InvalidFilter(f"{where}: numbers must be finite")
    if isinstance(value, int) and not isinstance(value, bool) and not INT64_MIN <= value <= INT64_MAX:
        raise InvalidFilter(f"{where}: whole numbers must fit in 64 bits (as Chroma stores them)")
    if isinstance(value, str | int | float | bool):
        return value
    raise InvalidFilter(f"{where}: values must be strings, numbers or booleans, got {type(value).__name__}")


def _bound(value: Any, where: str) -> int | float:
    if isinstance(value, bool):
        raise InvalidFilter(f"{where}: a range bound must be a number or an ISO date")
    if isinstance(value, int | float):
        return _scalar(value, where)  # type: ignore[return-value]
    if isinstance(value, str):
        try:
            return _epoch(value)
        except ValueError:
            pass
    raise InvalidFilter(f"{where}: a range bound must be a number or an ISO date (e.g. 2024-05-01), got {_quoted(value)}")


def _quoted(value: Any) -> str:
    """`value` as a message quotes it, cut short: a request may send a megabyte where a name or date belongs."""
    text = repr(value)
    return text if len(text) <= _QUOTED_CHARS else text[:_QUOTED_CHARS] + "..."


def _epoch(text: str) -> float:
    parsed = datetime.fromisoformat(text.strip())
    if isinstance(parsed, datetime) and parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=timezone.utc)
    return parsed.timestamp()


def _kind(value: Scalar) -> str:
    if isinstance(value, bool):
        return "bool"
    return "number" if isinstance(value, int | float) else "str"


def _equal(stored: Any, wanted: Scalar) -> bool:
    return stored is not None and _kind(stored) == _kind(wanted) and stored == wanted


def _holds(condition: Condition, metadata: Mapping[str, Any]) -> bool:
    stored = metadata.get(condition.key)
    op, value = condition.op, condition.value
    if op == "$eq":
        return _equal(stored, value)  # type: ignore[arg-type]
    if op == "$ne":
        return not _equal(stored, value)  # type: ignore[arg-type]
    if op == "$in":
        return any(_equal(stored, v) for v in value)  # type: ignore[union-attr]
    if op == "$nin":
        return not any(_equal(stored, v) for v in value)  # type: ignore[union-attr]
    if stored is None or isinstance(stored, bool) or not isinstance(stored, int | float):
        return False
    return _RANGE[op](stored, value)


def matches(where: Filter, metadata: Mapping[str, Any]) -> bool:
    """True when `metadata` satisfies every condition."""
    return all(_holds(condition, metadata) for condition in where.conditions)


def as_date_filterable(value: date | datetime) -> float:
    """The number to store for a date field so that date range filters apply to it."""
    if not isinstance(value, datetime):
        value = datetime(value.year, value.month, value.day)
    return _epoch(value.isoformat())
