"""Request bodies are I-JSON: a string holding an unpaired surrogate, an object naming a key twice, or
NaN, Infinity or -Infinity (which Python's json reads) is malformed JSON, in every route."""
from __future__ import annotations

import json
import re

import pytest
from fastapi import FastAPI
from fastapi.routing import APIRoute
from fastapi.testclient import TestClient

from services.analytics.main import create_app as create_analytics_app
from services.chat.main import create_app as create_chat_app
from services.chat.offline_llm.app import create_app as create_offline_llm_app
from services.gateway.main import create_app as create_gateway_app
from services.retrieval.main import create_app as create_retrieval_app
from shared.json_body import StrictJsonRoute, loads
from tests.support import app_routes

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("body", "value"),
    [
        (b'{"q": "a\\ud83d\\ude00b"}', {"q": "a\U0001f600b"}),  # a surrogate pair is one character
        ('{"q": "a\U0001f600b"}'.encode(), {"q": "a\U0001f600b"}),
        (b'{"q": "a\\\\ud800b"}', {"q": "a\\ud800b"}),  # an escaped backslash, then plain letters
        (b'{"q": "caf\\u00e9", "n": [1, 2.5, null, true]}', {"q": "café", "n": [1, 2.5, None, True]}),
    ],
)
def test_valid_text_is_read_as_json_reads_it(body: bytes, value: object) -> None:
    assert loads(body) == value


@pytest.mark.parametrize(
    ("body", "named"),
    [
        (b'{"q": "a\\ud800b"}', "\\ud800"),  # a high surrogate with no low one after it
        (b'{"q": "a\\uDC00"}', "\\udc00"),  # a low surrogate alone
        (b'{"q": ["ok", {"deep": "\\ude00\\ud83d"}]}', "\\ude00"),  # a pair in the wrong order, nested
        ('{"q": "a\ud800b"}'.encode("utf-8", "surrogatepass"), "\\ud800"),  # as raw bytes, not an escape
        (b'{"a\\ud800": 1}', "\\ud800"),  # in a key
    ],
)
def test_an_unpaired_surrogate_is_malformed_json(body: bytes, named: str) -> None:
    with pytest.raises(json.JSONDecodeError, match=f"unpaired surrogate {named.replace(chr(92), chr(92) * 2)}"):
        loads(body)


@pytest.mark.parametrize(
    ("body", "named"),
    [
        (b'{"team": "ops", "team": "dev"}', '"team"'),  # json alone would keep the last: team dev
        (b'{"q": "x", "filters": {"year": 2023, "n": 1, "year": 2024}}', '"year"'),
        (b'[{"a": 1}, {"b": 1, "b": 1}]', '"b"'),  # even with the same value
        (b'{"caf\\u00e9": 1, "caf\xc3\xa9": 2}', '"caf\\u00e9"'),  # the same key, spelt two ways
    ],
)
def test_an_object_naming_a_key_twice_is_malformed_json(body: bytes, named: str) -> None:
    with pytest.raises(json.JSONDecodeError, match=f"duplicate key {re.escape(named)} in an object"):
        loads(body)


@pytest.mark.parametrize(
    ("body", "named"),
    [
        (b'{"q": "x", "threshold": NaN}', "NaN"),
        (b'{"filters": {"year": {"$lt": Infinity}}}', "Infinity"),
        (b'[1, -Infinity]', "-Infinity"),
        (b"NaN", "NaN"),
    ],
)
def test_nan_and_infinity_are_malformed_json(body: bytes, named: str) -> None:
    with pytest.raises(json.JSONDecodeError, match=f"^{re.escape(named)} is not JSON"):
        loads(body)


def test_the_words_nan_and_infinity_are_read_in_strings_and_large_numbers_as_json_reads_them() -> None:
    assert loads(b'{"NaN": "Infinity", "n": 1e400, "m": -1e400}') == {"NaN": "Infinity", "n": float("inf"), "m": float("-inf")}


def test_a_key_may_recur_in_other_objects() -> None:
    body = b'{"a": {"team": "ops"}, "b": {"team": "ops"}, "team": "dev"}'
    assert loads(body) == {"a": {"team": "ops"}, "b": {"team": "ops"}, "team": "dev"}


def test_syntax_errors_stay_json_errors() -> None:
    with pytest.raises(json.JSONDecodeError):
        loads(b'{"q": ')


@pytest.mark.parametrize("depth", [5_000, 400_000])  # 400,000 fits a 1 MB body
def test_arrays_nested_too_deeply_are_malformed_json_not_a_recursion_error(depth: int) -> None:
    with pytest.raises(json.JSONDecodeError, match="nested too deeply"):
        loads(b'{"filters": {"a": ' + b"[" * depth + b"]" * depth + b"}}")


@pytest.mark.parametrize(
    ("body", "why"),
    [
        # Was a 500 and an "unhandled error" log in every service, the gateway first, for any caller.
        (b'{"messages": ' + b"[" * 5_000 + b"]" * 5_000 + b"}", "arrays and objects nested too deeply"),
        # Was a 400 that named no cause ("There was an error parsing the body").
        (b'{"max_tokens": ' + b"9" * 5_000 + b', "messages": []}', "a whole number too long to read"),
        # Was a 400 http_error, "There was an error parsing the body": a Latin-1 client's "j\xf6rg".
        (b'{"messages": [{"role": "user", "content": "j\xf6rg"}]}', "not UTF-8 text (byte 0xf6 at position 44)"),
    ],
)
def test_a_body_python_cannot_read_is_malformed_json(body: bytes, why: str) -> None:
    client = TestClient(create_offline_llm_app())
    response = client.post("/v1/chat/completions", content=body, headers={"Content-Type": "application/json"})
    assert response.status_code == 400, response.text
    assert response.json() == {"error": "malformed_json", "message": f"request body is not valid JSON: {why}"}


def _api_routes(app: FastAPI) -> list[APIRoute]:
    """Every APIRoute of the app, those of included routers too, but the API reference pages: fastapi-offline
    adds them before the app's route class is set, and they are GET pages that read no body."""
    return [
        route for route in app_routes(app)
        if isinstance(route, APIRoute) and route.endpoint.__module__ != "fastapi_offline.core"
    ]


@pytest.mark.parametrize(
    "create_app",
    [create_gateway_app, create_chat_app, create_retrieval_app, create_analytics_app, create_offline_llm_app],
    ids=["gateway", "chat", "retrieval", "analytics", "offline-llm"],
)
def test_every_route_of_every_service_reads_strict_json(create_app) -> None:
    routes = _api_routes(create_app())
    assert len(routes) > 3  # /healthz, /readyz, /metrics and the service's own
    assert [r.path for r in routes if not isinstance(r, StrictJsonRoute)] == []
