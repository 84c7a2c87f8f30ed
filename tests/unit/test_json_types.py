"""The request-field types of shared.json_types: what the schema says is what validation takes."""
from __future__ import annotations

import re
import sys
from typing import Annotated

import jsonschema
import pytest
from annotated_types import Ge, Le
from pydantic import BaseModel, Field, ValidationError, field_validator

from shared.json_types import (
    JSON_INTEGER,
    NO_NUL_SCHEMA,
    NOT_BLANK_PATTERN,
    VISIBLE_TEXT_PATTERN,
    JsonBool,
    JsonNumber,
    is_blank,
    trimmed_text_pattern,
    without_nul,
)

pytestmark = pytest.mark.unit


class Body(BaseModel):
    count: Annotated[int, Ge(1), Le(50), JSON_INTEGER] | None = None
    ratio: JsonNumber | None = None
    flag: JsonBool | None = None


def test_bounds_stay_in_the_schema() -> None:
    count = Body.model_json_schema()["properties"]["count"]["anyOf"][0]
    assert count == {"type": "integer", "minimum": 1, "maximum": 50}


@pytest.mark.parametrize("body", [{"count": "3"}, {"count": True}, {"count": 0}, {"ratio": "0.5"}, {"ratio": True},
                                  {"flag": 0}, {"flag": "true"}])
def test_values_of_another_json_type_are_refused(body: dict) -> None:
    with pytest.raises(ValidationError):
        Body.model_validate(body)


def test_json_integers_and_numbers_are_taken() -> None:
    assert Body.model_validate({"count": 3.0, "ratio": 1, "flag": False}) == Body(count=3, ratio=1.0, flag=False)


def test_the_not_blank_pattern_is_what_strip_keeps() -> None:
    pattern = re.compile(NOT_BLANK_PATTERN)
    assert all((pattern.search(chr(c)) is None) == chr(c).isspace() for c in range(sys.maxunicode + 1))


def test_blank_text_is_whitespace_and_the_invisible_characters_of_the_basic_plane() -> None:
    regex = pytest.importorskip("regex")
    invisible = regex.compile(r"\p{Default_Ignorable_Code_Point}")
    blank = [c for c in range(0x10000) if chr(c).isspace() or invisible.match(chr(c))]
    assert [c for c in range(0x10000) if is_blank(chr(c))] == blank
    assert is_blank("") and is_blank("\u200b\ufeff \u2060\u00ad\n") and not is_blank("\u200ba\u200b")
    pattern = re.compile(VISIBLE_TEXT_PATTERN)  # the rule as the schema says it
    assert all((pattern.search(chr(c)) is None) == is_blank(chr(c)) for c in range(sys.maxunicode + 1))


@pytest.mark.parametrize(
    "text",
    ["a", " a ", "\u3000abc\n", "a b c", "", " \t", "abcd", " abcd\u2003", "\u200b", " \u200b\u00ad ", "\u200ba",
     "a\u200b\u200b\u200b", "\u200b \u2060 x"],
)
def test_the_trimmed_text_pattern_is_the_length_once_trimmed_with_something_visible(text: str) -> None:
    assert bool(re.search(trimmed_text_pattern(3), text)) == (1 <= len(text.strip()) <= 3 and not is_blank(text))


class _OptionalText(BaseModel):
    title: str | None = Field(None, json_schema_extra=NO_NUL_SCHEMA)
    _no_nul = field_validator("title")(without_nul)


@pytest.mark.parametrize("title", [None, "a title", "a\u0000title"])
def test_the_schema_and_the_validator_agree_on_nul_in_an_optional_text(title: str | None) -> None:
    schema = _OptionalText.model_json_schema()
    try:
        _OptionalText(title=title)
        accepted = True
    except ValidationError:
        accepted = False
    assert jsonschema.Draft202012Validator(schema).is_valid({"title": title}) == accepted == (title != "a\u0000title")
