"""shared.validation_errors: a pydantic error as the one line every Cairn error message gives."""
from __future__ import annotations

import pytest
from pydantic import BaseModel, ConfigDict, ValidationError, field_validator, model_validator

from shared.validation_errors import one_line

pytestmark = pytest.mark.unit


class Turn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    body: str
    question: str

    @field_validator("question")
    @classmethod
    def _no_question_mark_only(cls, value: str) -> str:
        if value == "?":
            raise ValueError("must ask something")
        return value

    @model_validator(mode="after")
    def _differ(self) -> Turn:
        if self.body == self.question:
            raise ValueError("body and question must differ")
        return self


class Request(BaseModel):
    turns: list[Turn]


def first_error(**fields) -> dict:
    with pytest.raises(ValidationError) as refused:
        Request(**fields)
    return refused.value.errors()[0]


def test_a_validators_own_words_come_after_the_dotted_location():
    assert one_line(first_error(turns=[{"body": "b", "question": "?"}])) == "turns.0.question: must ask something"


def test_an_undeclared_field_is_called_unknown():
    assert one_line(first_error(turns=[{"body": "b", "question": "q", "extra": 1}])) == "turns.0.extra: unknown field"


def test_only_a_leading_body_is_fastapis_and_left_out():
    error = first_error(turns=[{"question": "q"}])
    assert one_line(error) == "turns.0.body: Field required"
    assert one_line({**error, "loc": ("body", *error["loc"])}) == "turns.0.body: Field required"


def test_a_check_across_fields_is_its_message_alone():
    with pytest.raises(ValidationError) as refused:
        Turn(body="same", question="same")
    assert one_line(refused.value.errors()[0]) == "body and question must differ"
