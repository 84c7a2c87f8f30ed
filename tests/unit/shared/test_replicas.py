"""Round robin with passive health over a service's replicas, on an injectable clock; the URL-list setting."""
from __future__ import annotations

import aiohttp
import pytest
from prometheus_client import REGISTRY
from pydantic import ValidationError
from pydantic_settings import BaseSettings

from shared.replica_calls import NoReplicaConnected, on_a_replica
from shared.replicas import ReplicaPool, UrlList

A, B, C = "http://a:1", "http://b:1", "http://c:1"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def pool(*urls: str, clock: Clock | None = None, service: str = "retrieval") -> ReplicaPool:
    return ReplicaPool(service=service, urls=urls, cooldown_s=2, max_cooldown_s=8, clock=clock or Clock())


def test_replicas_take_turns():
    replicas = pool(A, B, C)
    assert [replicas.pick() for _ in range(6)] == [A, B, C, A, B, C]


def test_a_refusing_replica_is_skipped_for_its_cooldown_then_tried_again():
    clock = Clock()
    replicas = pool(A, B, C, clock=clock)
    replicas.mark_unreachable(B)
    assert [replicas.pick() for _ in range(4)] == [A, C, A, C]
    assert not replicas.reachable(B)
    clock.now += 2
    assert replicas.reachable(B)
    assert [replicas.pick() for _ in range(3)] == [A, B, C]


def test_the_cooldown_doubles_while_refusals_go_on_up_to_the_cap_and_resets_on_success():
    clock = Clock()
    replicas = pool(A, B, clock=clock)
    for expected in (2, 4, 8, 8):
        replicas.mark_unreachable(A)
        clock.now += expected - 0.01
        assert not replicas.reachable(A), f"still cooling down just before {expected}s"
        clock.now += 0.01
        assert replicas.reachable(A)
    replicas.mark_reachable(A)
    replicas.mark_unreachable(A)
    clock.now += 2
    assert replicas.reachable(A), "an answer resets the back-off to the first cooldown"


def test_when_every_replica_cools_down_the_pool_still_picks_in_turn():
    replicas = pool(A, B)
    replicas.mark_unreachable(A)
    replicas.mark_unreachable(B)
    assert {replicas.pick(), replicas.pick()} == {A, B}


def test_excluded_replicas_are_never_picked_and_none_is_left_when_all_are():
    replicas = pool(A, B)
    replicas.mark_unreachable(B)
    assert replicas.pick(exclude=[A]) == B, "a cooling replica beats no replica"
    assert replicas.pick(exclude=[A, B]) is None
    assert pool(A).pick(exclude=[A]) is None


def test_refusals_are_counted_per_service_and_replica():
    replicas = pool(A, B, service="chat-test-counter")
    replicas.mark_unreachable(A)
    replicas.mark_unreachable(A)
    sample = REGISTRY.get_sample_value("cairn_upstream_unreachable_total", {"service": "chat-test-counter", "upstream": A})
    assert sample == 2


def test_a_pool_needs_urls_and_a_sane_cooldown():
    with pytest.raises(ValueError):
        ReplicaPool(service="chat", urls=[])
    with pytest.raises(ValueError):
        ReplicaPool(service="chat", urls=[A], cooldown_s=5, max_cooldown_s=1)


class _Urls(BaseSettings):
    urls: UrlList = ("http://127.0.0.1:8002",)


def test_the_setting_reads_one_url_or_a_comma_separated_list_from_the_environment(monkeypatch):
    monkeypatch.setenv("URLS", " http://a:1/ ,http://b:2,, ")
    assert _Urls().urls == ("http://a:1", "http://b:2")
    monkeypatch.setenv("URLS", "http://only:1")
    assert _Urls().urls == ("http://only:1",)
    assert _Urls(urls=["http://x:1/"]).urls == ("http://x:1",)


@pytest.mark.parametrize("value", ["", " , ", "a:1", "ftp://files:21"])
def test_the_setting_refuses_no_url_or_one_that_is_not_http(monkeypatch, value):
    monkeypatch.setenv("URLS", value)
    with pytest.raises(ValidationError):
        _Urls()


def test_services_read_the_list_or_the_single_url_variables(monkeypatch):
    from services.analytics.settings import Settings as AnalyticsSettings
    from services.chat.settings import Settings as ChatSettings
    from services.gateway.settings import Settings as GatewaySettings

    monkeypatch.setenv("CHAT_URL", "http://chat-0:8001")
    monkeypatch.setenv("RETRIEVAL_URL", "http://retrieval-0:8002,http://retrieval-1:8002")
    gateway = GatewaySettings()
    assert gateway.chat_urls == ("http://chat-0:8001",)
    assert gateway.retrieval_urls == ("http://retrieval-0:8002", "http://retrieval-1:8002")
    monkeypatch.setenv("CHAT_URLS", "http://chat-1:8001,http://chat-2:8001")
    monkeypatch.setenv("RETRIEVAL_URLS", "http://retrieval-2:8002")
    assert GatewaySettings().chat_urls == ("http://chat-1:8001", "http://chat-2:8001"), "the list wins over the single"
    assert ChatSettings().retrieval_urls == ("http://retrieval-2:8002",)
    assert AnalyticsSettings().retrieval_url == "http://retrieval-2:8002"
    assert GatewaySettings(chat_url="http://given:1").chat_urls == ("http://given:1",)


async def test_a_request_refused_by_two_replicas_goes_to_the_third():
    """Two of three replicas down, both out of their cooldown at once: the third must still answer."""
    clock = Clock()
    replicas = pool(A, B, C, clock=clock, service="chat-refusals")
    down = {A, B}

    async def send(url: str) -> str:
        if url in down:
            raise aiohttp.ClientConnectorError(None, OSError(111, "refused"))  # type: ignore[arg-type]
        return url

    assert await on_a_replica(replicas, send) == C
    clock.now += 60  # every cooldown over: the pool starts again with A
    assert await on_a_replica(replicas, send) == C
    down.add(C)
    with pytest.raises(NoReplicaConnected):
        await on_a_replica(replicas, send)
