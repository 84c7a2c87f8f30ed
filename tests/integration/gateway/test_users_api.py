"""/api/users against the real Redis: an admin manages users, and each change reaches logins and sessions."""
import pytest

from tests.integration.gateway.chat_stand_in import PASSWORD, login

pytestmark = pytest.mark.integration
NEW_PASSWORD = "a new password"


def _log_in(client, username, password=PASSWORD):
    return client.post("/auth/login", json={"username": username, "password": password})


def test_an_admin_adds_a_user_who_can_log_in_at_once(client):
    ada = login(client, "ada")
    cy = {"username": "cy", "password": NEW_PASSWORD, "roles": ["analyst"]}
    added = client.post("/api/users", json=cy, headers=ada)
    assert added.status_code == 201, added.text
    record = added.json()
    assert (record["username"], record["roles"], record["disabled"]) == ("cy", ["analyst"], False)
    assert record["created_at"] and "password_hash" not in record

    assert _log_in(client, "cy", NEW_PASSWORD).json()["user"]["roles"] == ["analyst"]
    assert client.get("/api/users/cy", headers=ada).json() == record
    listed = client.get("/api/users", headers=ada).json()["users"]
    assert [u["username"] for u in listed] == ["ada", "ann", "bob", "cy"]


@pytest.mark.parametrize(
    ("body", "status", "error"),
    [
        ({"username": "ann", "password": NEW_PASSWORD, "roles": ["user"]}, 409, "user_exists"),
        ({"username": "ANN", "password": NEW_PASSWORD, "roles": ["user"]}, 409, "user_exists"),
        ({"username": "dee", "password": "short", "roles": ["user"]}, 422, "invalid_request"),
        ({"username": "d e", "password": NEW_PASSWORD, "roles": ["user"]}, 422, "invalid_request"),
        ({"username": "dee", "password": NEW_PASSWORD, "roles": ["owner"]}, 422, "invalid_request"),
        ({"username": "dee", "password": NEW_PASSWORD, "roles": []}, 422, "invalid_request"),
        ({"username": "dee", "password": NEW_PASSWORD}, 422, "invalid_request"),
    ],
    ids=["taken", "taken in another case", "short password", "bad name", "unknown role", "no role", "roles missing"],
)
def test_a_user_that_cannot_be_added_is_refused_and_nothing_is_stored(client, body, status, error):
    ada = login(client, "ada")
    refused = client.post("/api/users", json=body, headers=ada)
    assert (refused.status_code, refused.json()["error"]) == (status, error), refused.text
    names = [u["username"] for u in client.get("/api/users", headers=ada).json()["users"]]
    assert names == ["ada", "ann", "bob"]


def test_only_admins_manage_users(client):
    ann = login(client, "ann")
    calls = [
        ("GET", "/api/users", None),
        ("POST", "/api/users", {"username": "eve", "password": NEW_PASSWORD, "roles": ["admin"]}),
        ("GET", "/api/users/ann", None),
        ("PATCH", "/api/users/ann", {"roles": ["admin"]}),
        ("PUT", "/api/users/bob/password", {"password": NEW_PASSWORD}),
        ("DELETE", "/api/users/bob", None),
    ]
    for method, path, body in calls:
        assert client.request(method, path, json=body, headers=ann).status_code == 403, path
        assert client.request(method, path, json=body).status_code == 401, path
    assert _log_in(client, "eve", NEW_PASSWORD).status_code == 401


def test_a_change_of_roles_or_disabling_ends_the_users_sessions_and_enabling_lets_it_in(client):
    ada, ann = login(client, "ada"), login(client, "ann")
    promoted = client.patch("/api/users/ann", json={"roles": ["user", "analyst"]}, headers=ada)
    assert promoted.status_code == 200, promoted.text
    assert promoted.json()["sessions_ended"] == 1 and promoted.json()["user"]["roles"] == ["user", "analyst"]
    assert client.get("/auth/me", headers=ann).status_code == 401  # the session carried the old roles
    assert _log_in(client, "ann").json()["user"]["roles"] == ["user", "analyst"]

    disabled = client.patch("/api/users/ann", json={"disabled": True}, headers=ada)
    assert disabled.json()["user"]["disabled"] is True and disabled.json()["sessions_ended"] == 1
    assert _log_in(client, "ann").status_code == 401
    enabled = client.patch("/api/users/ann", json={"disabled": False}, headers=ada)
    assert (enabled.json()["user"]["disabled"], enabled.json()["sessions_ended"]) == (False, 0)
    assert _log_in(client, "ann").status_code == 200


def test_a_password_reset_ends_the_sessions_and_the_old_password(client):
    ada, bob = login(client, "ada"), login(client, "bob")
    reset = client.put("/api/users/bob/password", json={"password": NEW_PASSWORD}, headers=ada)
    assert reset.status_code == 200 and reset.json()["sessions_ended"] == 1
    assert client.get("/auth/me", headers=bob).status_code == 401
    assert _log_in(client, "bob").status_code == 401
    assert _log_in(client, "bob", NEW_PASSWORD).status_code == 200
    short = client.put("/api/users/bob/password", json={"password": "short"}, headers=ada)
    assert (short.status_code, short.json()["error"]) == (422, "invalid_request")


def test_a_deleted_user_is_out_at_once_and_its_name_may_be_added_again(client):
    ada, bob = login(client, "ada"), login(client, "bob")
    bob_id = client.get("/api/users/bob", headers=ada).json()["id"]
    deleted = client.delete("/api/users/bob", headers=ada)
    assert deleted.status_code == 200, deleted.text
    assert (deleted.json()["user"]["username"], deleted.json()["sessions_ended"]) == ("bob", 1)
    assert client.get("/auth/me", headers=bob).status_code == 401
    assert _log_in(client, "bob").status_code == 401
    assert [u["username"] for u in client.get("/api/users", headers=ada).json()["users"]] == ["ada", "ann"]
    assert client.get("/api/users/bob", headers=ada).status_code == 404

    body = {"username": "bob", "password": NEW_PASSWORD, "roles": ["user"]}
    assert client.post("/api/users", json=body, headers=ada).status_code == 201
    assert _log_in(client, "bob", NEW_PASSWORD).json()["user"]["id"] != bob_id


def test_an_admin_cannot_lock_itself_out_but_may_change_another_admin(client):
    ada = login(client, "ada")
    for change in ({"disabled": True}, {"roles": ["analyst"]}, {"roles": ["analyst"], "disabled": False}):
        refused = client.patch("/api/users/ada", json=change, headers=ada)
        assert (refused.status_code, refused.json()["error"]) == (409, "own_account"), change
    refused = client.delete("/api/users/ada", headers=ada)
    assert (refused.status_code, refused.json()["error"]) == (409, "own_account")
    assert client.get("/auth/me", headers=ada).status_code == 200  # nothing changed, the session lives

    client.post("/api/users", json={"username": "zed", "password": NEW_PASSWORD, "roles": ["admin"]}, headers=ada)
    assert client.patch("/api/users/zed", json={"roles": ["user"]}, headers=ada).status_code == 200


@pytest.mark.parametrize(
    ("method", "path", "body", "status"),
    [
        ("GET", "/api/users/nobody", None, 404),
        ("GET", "/api/users/Ann", None, 404),  # names are matched exactly, as at login
        ("PATCH", "/api/users/nobody", {"disabled": True}, 404),
        ("PUT", "/api/users/nobody/password", {"password": NEW_PASSWORD}, 404),
        ("DELETE", "/api/users/nobody", None, 404),
        ("DELETE", "/api/users/Ann", None, 404),
        ("PATCH", "/api/users/ann", {}, 422),
        ("PATCH", "/api/users/ann", {"roles": ["owner"]}, 422),
        ("PATCH", "/api/users/ann", {"disabled": "yes"}, 422),
        ("PATCH", "/api/users/ann", {"role": ["admin"]}, 422),
    ],
    ids=["get unknown", "get in another case", "patch unknown", "reset unknown", "delete unknown",
         "delete in another case", "empty change", "unknown role",
         "disabled not a boolean", "misspelt field"],
)
def test_unknown_users_are_404_and_bad_changes_422(client, method, path, body, status):
    ada = login(client, "ada")
    response = client.request(method, path, json=body, headers=ada)
    assert response.status_code == status, response.text
    assert client.get("/api/users/ann", headers=ada).json()["roles"] == ["user"]
