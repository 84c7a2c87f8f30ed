"""MODEL_PRICES as operators write it: JSON, or nothing at all (an empty value in .env or a ConfigMap)."""
import pytest
from pydantic import ValidationError

from services.analytics.pricing import BUILT_IN_MODEL, ModelPrice, with_built_in
from services.analytics.settings import Settings
from services.chat.settings import OFFLINE_MODEL

pytestmark = pytest.mark.unit


FREE = {OFFLINE_MODEL: ModelPrice(input=0, output=0)}


@pytest.mark.parametrize("value", ["", "  ", "{}"], ids=["empty", "blank", "empty object"])
def test_an_empty_value_prices_no_model(value, monkeypatch, tmp_path):
    # An empty value stopped analytics with pydantic-settings' "error parsing value for field" and no hint.
    monkeypatch.setenv("MODEL_PRICES", value)
    assert Settings(data_dir=tmp_path).model_prices == {}


def test_prices_are_read_as_json(monkeypatch, tmp_path):
    monkeypatch.setenv("MODEL_PRICES", '{"gpt-4o": {"input": 2.5, "output": 10}}')
    assert Settings(data_dir=tmp_path).model_prices == {"gpt-4o": ModelPrice(input=2.5, output=10)}


def test_the_built_in_offline_model_is_free_unless_priced():
    """It runs inside Cairn: its answers cost nothing, and the dashboard says 0 rather than 'no price'."""
    assert BUILT_IN_MODEL == OFFLINE_MODEL
    assert with_built_in({}) == FREE
    priced = {OFFLINE_MODEL: ModelPrice(input=0.1, output=0.2)}  # the cost of its machine, say
    assert with_built_in(priced) == priced


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("gpt-4o=2.5", "must be a JSON object"),
        ('{"gpt-4o": {"input": -1, "output": 10}}', "greater than or equal to 0"),
        ('{"gpt-4o": {"input": 1}}', "output"),
        ('{"gpt-4o": {"in": 1, "output": 2}}', "in"),
    ],
    ids=["not json", "negative", "missing output", "unknown key"],
)
def test_a_price_that_cannot_be_read_is_refused_naming_the_variable(value, problem, monkeypatch, tmp_path):
    monkeypatch.setenv("MODEL_PRICES", value)
    with pytest.raises(ValidationError) as refused:
        Settings(data_dir=tmp_path)
    assert problem in str(refused.value)
