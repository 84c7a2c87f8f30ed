"""`cairn up` on a Redis or RabbitMQ that does not answer: the message names where it looked and the setting
to check, never the password that REDIS_URL or AMQP_URL carries."""
from __future__ import annotations

import pytest

from cairn import engines
from cairn.engines import EngineMissing, engines_for, ensure
from tests.support import free_port

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("host", ["127.0.0.1", "broker.invalid"], ids=["local-not-installed", "remote"])
def test_an_engine_that_does_not_answer_is_named_without_its_password(host, monkeypatch):
    monkeypatch.setattr(engines.shutil, "which", lambda binary: None)  # nothing to start here
    port = free_port()
    redis, rabbit = engines_for(
        redis_url=f"redis://cairn:redis-s3cret@{host}:{port}/0", amqp_url=f"amqp://cairn:amqp-s3cret@{host}:{port}/"
    )
    for engine, setting in ((redis, "REDIS_URL"), (rabbit, "AMQP_URL")):
        with pytest.raises(EngineMissing) as refused:
            ensure(engine, timeout_s=1)
        message = str(refused.value)
        assert "s3cret" not in message and "cairn:" not in message
        assert f"does not answer at {host}:{port} ({setting})" in message
