"""A login cut short by the session store (Redis) after it stored its session: 503, and neither a live
session left behind nor a failed attempt counted against the user. On the real Redis, whose answer to one
call is lost after Redis did the work, as when the reply comes later than REDIS_TIMEOUT_S."""
from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from fastapi.testclient import TestClient

from services.gateway.main import create_app
from shared.errors import DependencyUnavailable
from tests.integration.gateway.chat_stand_in import PASSWORD, gateway_settings, login
from tests.support import free_port

pytestmark = pytest.mark.integration


class AnswerLost:
    """The store, whose `method` does its work in Redis on its `nth` call and then fails as a timeout would."""

    def __init__(self, store: Any, method: str, nth: int = 1) -> None:
        self._store, self._method, self._calls_left = store, method, nth

    def __getattr__(self, name: str) -> Any:
        call = getattr(self._store, name)
        if name != self._method:
            return call
        return self._lose_answer(call)

    def _lose_answer(self, call: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
        async def run(*args: Any, **kwargs: Any) -> Any:
            result = await call(*args, **kwargs)
            self._calls_left -= 1
            if self._calls_left == 0:
                raise DependencyUnavailable("session_store", "the session store (Redis) is unavailable")
            return result

        return run


@pytest.mark.parametrize(
    ("state", "method", "nth"),
    [
        ("sessions", "create", 1),  # the session stored, its answer lost
        ("users", "get", 2),  # the session stored, the user's second read lost
        ("rate_limiter", "give_back", 1),  # the session stored, the attempt given back, that answer lost
    ],
)
def test_a_login_the_session_store_cuts_short_leaves_no_session_and_counts_no_failure(
    redis_url: str, unique: str, state: str, method: str, nth: int
) -> None:
    settings = gateway_settings(
        redis_url=redis_url, prefix=unique, chat_url=f"http://127.0.0.1:{free_port()}", login_attempts_per_username=1
    )
    with TestClient(create_app(settings)) as client:
        real = getattr(client.app.state, state)
        setattr(client.app.state, state, AnswerLost(real, method, nth))
        cut_short = client.post("/auth/login", json={"username": "ann", "password": PASSWORD})
        assert cut_short.status_code == 503, cut_short.text
        assert cut_short.json()["error"] == "session_store_unavailable"
        setattr(client.app.state, state, real)

        auth = login(client, "ann")  # not 429: the attempt cut short was not a failed login
        sessions = client.get("/auth/sessions", headers=auth).json()["sessions"]
        assert len(sessions) == 1, sessions  # only this one: the one cut short was ended
