"""POST /auth/password against the real Redis: a user changes its own password, giving the current one."""
import pytest
from fastapi.testclient import TestClient

from services.gateway.main import create_app
from tests.integration.gateway.chat_stand_in import PASSWORD, gateway_settings, login
from tests.support import free_port

pytestmark = pytest.mark.integration
NEW_PASSWORD = "a brand new password"


@pytest.fixture
def settings(redis_url, unique):
    return gateway_settings(redis_url=redis_url, prefix=unique, chat_url=f"http://127.0.0.1:{free_port()}")


def _change(client, auth, current=PASSWORD, new=NEW_PASSWORD):
    return client.post("/auth/password", json={"current_password": current, "new_password": new}, headers=auth)


def _log_in(client, password, username="ann"):
    return client.post("/auth/login", json={"username": username, "password": password}).status_code


def test_a_user_changes_its_password_keeping_this_session_and_ending_the_others(settings):
    with TestClient(create_app(settings)) as client:
        here, elsewhere, bobs = login(client), login(client), login(client, "bob")
        changed = _change(client, here)
        assert changed.status_code == 200, changed.text
        assert changed.json() == {"sessions_ended": 1}
        assert client.get("/auth/me", headers=here).status_code == 200
        assert client.get("/auth/me", headers=elsewhere).status_code == 401
        assert client.get("/auth/me", headers=bobs).status_code == 200
        assert (_log_in(client, PASSWORD), _log_in(client, NEW_PASSWORD)) == (401, 200)


def test_a_wrong_current_password_changes_nothing_and_counts_as_a_failed_login(settings):
    settings = settings.model_copy(update={"login_attempts_per_username": 2})
    with TestClient(create_app(settings)) as client:
        ann = login(client)
        for _ in range(2):
            refused = _change(client, ann, current="not my password")
            assert (refused.status_code, refused.json()["error"]) == (403, "wrong_password")
        limited = _change(client, ann)  # even with the right one: a stolen token is no way around the limit
        assert limited.status_code == 429 and int(limited.headers["retry-after"]) > 0
        assert client.get("/auth/me", headers=ann).status_code == 200  # the session is not the failure
        assert _log_in(client, PASSWORD) == 429
        assert _log_in(client, PASSWORD, username="bob") == 200


@pytest.mark.parametrize(
    ("body", "status"),
    [
        ({"current_password": PASSWORD, "new_password": "short"}, 422),
        ({"current_password": PASSWORD}, 422),
        ({"current_password": PASSWORD, "new_password": NEW_PASSWORD, "user": "bob"}, 422),
    ],
    ids=["short", "missing", "unknown field"],
)
def test_a_new_password_that_cannot_be_used_is_refused_and_not_counted(settings, body, status):
    settings = settings.model_copy(update={"login_attempts_per_username": 1})
    with TestClient(create_app(settings)) as client:
        ann = login(client)
        refused = client.post("/auth/password", json=body, headers=ann)
        assert (refused.status_code, refused.json()["error"]) == (status, "invalid_request")
        assert _change(client, ann).status_code == 200
        assert client.post("/auth/password", json=body).status_code == 401
