"""The gateway warns at start when its Redis may evict keys before they expire (a memory limit with a
policy other than noeviction), and says nothing under Redis's defaults."""
from __future__ import annotations

import logging

import pytest
from redis import Redis

from services.gateway.main import create_app
from services.gateway.settings import Settings
from tests.own_redis import OwnRedis
from tests.support import free_port, serve_in_thread

pytestmark = pytest.mark.integration

WARNING = "redis may evict keys before they expire"


def _start_gateway(url: str) -> None:
    settings = Settings(redis_url=url, chat_url=f"http://127.0.0.1:{free_port()}")
    with serve_in_thread(create_app(settings)):
        pass


def test_a_redis_that_evicts_keys_is_named_in_a_warning(own_redis: OwnRedis, caplog) -> None:
    with Redis(port=own_redis.port) as redis:
        redis.config_set("maxmemory", "64mb")
        redis.config_set("maxmemory-policy", "volatile-lru")
    caplog.set_level(logging.WARNING)
    _start_gateway(own_redis.url)
    warnings = [r for r in caplog.records if r.getMessage().startswith(WARNING)]
    assert len(warnings) == 1 and warnings[0].maxmemory_policy == "volatile-lru"


@pytest.mark.parametrize("limit, policy", [("0", "allkeys-lru"), ("64mb", "noeviction")])
def test_redis_that_keeps_every_key_gets_no_warning(own_redis: OwnRedis, caplog, limit: str, policy: str) -> None:
    with Redis(port=own_redis.port) as redis:
        redis.config_set("maxmemory", limit)
        redis.config_set("maxmemory-policy", policy)
    caplog.set_level(logging.WARNING)
    _start_gateway(own_redis.url)
    assert not [r for r in caplog.records if r.getMessage().startswith(WARNING)]
