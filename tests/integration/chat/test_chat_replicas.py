"""Chat balancing its searches over several retrieval replicas over real HTTP: replicas take turns, and a question
still gets its answer when one replica refuses connections or when every replica but one is gone."""
from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import ExitStack, asynccontextmanager

import httpx
import pytest
from prometheus_client import REGISTRY

from services.chat.main import create_app
from services.chat.settings import Settings
from tests.integration.chat.stand_ins import HEADERS, TOKEN, fake_retrieval_app
from tests.support import free_port, serve_in_thread
from tests.unit.chat.fakes import ListPublisher

pytestmark = pytest.mark.integration
QUESTION = {"query": "How do I add a user?"}


@pytest.fixture(scope="module")
def retrievals() -> Iterator[list[tuple[str, list[dict]]]]:
    with ExitStack() as stack:
        apps = [fake_retrieval_app() for _ in range(2)]
        yield [(stack.enter_context(serve_in_thread(app)), calls) for app, calls in apps]


@asynccontextmanager
async def chat_client(**overrides) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(Settings(service_token=TOKEN, **overrides), publisher=ListPublisher())
    async with app.router.lifespan_context(app):
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://chat") as client:
            yield client


def refusals(url: str) -> float:
    return REGISTRY.get_sample_value("cairn_upstream_unreachable_total", {"service": "retrieval", "upstream": url}) or 0


async def test_questions_are_answered_by_the_replicas_in_turn_past_one_that_refuses_connections(retrievals):
    (first, first_calls), (second, second_calls) = retrievals
    dead = f"http://127.0.0.1:{free_port()}"
    before = len(first_calls), len(second_calls)
    async with chat_client(retrieval_urls=f"{first},{dead},{second}", retrieval_attempts=1) as client:
        answers = [await client.post("/chat", json=QUESTION, headers=HEADERS) for _ in range(4)]
        ready = await client.get("/readyz")
    assert [a.status_code for a in answers] == [200] * 4, answers[-1].text
    assert all("cairn user add" in a.json()["answer"] for a in answers)
    assert (len(first_calls) - before[0], len(second_calls) - before[1]) == (2, 2)
    assert refusals(dead) == 1, "refused once, then skipped while it cools down; one attempt sufficed"
    assert ready.json()["checks"]["retrieval"] is True


async def test_every_retrieval_replica_down_is_503_retrieval_unavailable(retrievals):
    dead = [f"http://127.0.0.1:{free_port()}" for _ in range(2)]
    async with chat_client(retrieval_urls=",".join(dead), retrieval_timeout_s=5, retrieval_backoff_s=0.01) as client:
        response = await client.post("/chat", json=QUESTION, headers=HEADERS)
        ready = await client.get("/readyz")
    assert response.status_code == 503 and response.json()["error"] == "retrieval_unavailable"
    assert ready.status_code == 200 and ready.json()["checks"]["retrieval"] is False  # reported, not needed
    assert sum(refusals(url) for url in dead) >= 2


async def test_the_streamed_answer_uses_the_replicas_too(retrievals):
    (first, first_calls), _ = retrievals
    dead = f"http://127.0.0.1:{free_port()}"
    before = len(first_calls)
    async with chat_client(retrieval_urls=[dead, first]) as client:
        async with client.stream("POST", "/chat/stream", json=QUESTION, headers=HEADERS) as response:
            body = (await response.aread()).decode()
    assert response.status_code == 200 and "event: done" in body
    assert len(first_calls) == before + 1 and refusals(dead) == 1
