"""Schemathesis against each service's OpenAPI, with every check on: no 5xx, no undocumented status
and no response that breaks its schema. Real services over HTTP; a bounded number of examples."""
from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
import schemathesis
from hypothesis import HealthCheck, settings

from services.chat.main import create_app as create_chat_app
from services.chat.settings import Settings as ChatSettings
from services.retrieval.main import create_app as create_retrieval_app
from services.retrieval.settings import Settings as RetrievalSettings
from tests.support import serve_in_thread
from tests.unit.chat.fakes import FakeRetriever, ListPublisher

pytestmark = pytest.mark.integration

TOKEN = "contract-token"
INTERNAL = {"X-Service-Token": TOKEN, "X-User-Id": "contract-user", "X-User-Roles": "user", "X-Session-Id": "s1"}
EXAMPLES = settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))


@pytest.fixture(scope="module")
def retrieval_url(tmp_path_factory, embedder) -> Iterator[str]:
    settings_ = RetrievalSettings(service_token=TOKEN, data_dir=tmp_path_factory.mktemp("contracts"), chroma_collection="contracts")
    with serve_in_thread(create_retrieval_app(settings_, embedder=embedder)) as url:
        yield url


def chat_settings() -> ChatSettings:
    return ChatSettings(service_token=TOKEN, redis_prefix=f"contracts-{uuid.uuid4().hex}")


@pytest.fixture(scope="module")
def chat_url(redis_url) -> Iterator[str]:
    settings_ = chat_settings().model_copy(update={"redis_url": redis_url})
    with serve_in_thread(create_chat_app(settings_, publisher=ListPublisher(), retriever=FakeRetriever())) as url:
        yield url


# The schema is read from the app itself; the calls go to the served app over HTTP.
chat = schemathesis.openapi.from_dict(create_chat_app(chat_settings()).openapi())


@chat.parametrize()
@EXAMPLES
def test_chat_keeps_its_contract(case, chat_url):
    case.call_and_validate(base_url=chat_url, headers=INTERNAL)
