"""User records in the real Redis that lack a field or hold a bad value (edited by hand, or written by an older
version): logins fail as with a wrong password or go on, nothing answers 500, and an admin sees, repairs or deletes
the record."""
import logging

import pytest

from tests.integration.gateway.chat_stand_in import PASSWORD, login

pytestmark = pytest.mark.integration
NEW_PASSWORD = "a new password"
NOT_A_HASH = "hunter2-typed-in-by-hand"

# Each damage done to bob's record, the field it makes bad, and whether bob's right password still logs him in.
DAMAGES = {
    "no password_hash": (lambda r, key: r.hdel(key, "password_hash"), "password_hash", False),
    "password_hash not a hash": (lambda r, key: r.hset(key, "password_hash", NOT_A_HASH), "password_hash", False),
    "no id": (lambda r, key: r.hdel(key, "id"), "id", False),
    "disabled not 0 or 1": (lambda r, key: r.hset(key, "disabled", "yes"), "disabled", False),
    "no username": (lambda r, key: r.hdel(key, "username"), "username", True),
    "unknown role": (lambda r, key: r.hset(key, "roles", "user,owner"), "roles", True),
    "no roles": (lambda r, key: r.hdel(key, "roles"), "roles", True),
    "created_at not a time": (lambda r, key: r.hset(key, "created_at", "yesterday"), "created_at", True),
    "created_at a number": (lambda r, key: r.hset(key, "created_at", "1700000000"), "created_at", True),
}


def _log_in(client, username, password=PASSWORD):
    return client.post("/auth/login", json={"username": username, "password": password})


def _without_request_id(error: dict) -> dict:
    return {k: v for k, v in error.items() if k != "request_id"}


@pytest.mark.parametrize("damage", DAMAGES, ids=list(DAMAGES))
def test_a_damaged_record_fails_a_login_as_a_wrong_password_does_and_is_listed_for_the_admin(
    client, raw, unique, caplog, damage
):
    damage_record, field, still_logs_in = DAMAGES[damage]
    ada = login(client, "ada")
    damage_record(raw, f"{unique}:user:bob")

    with caplog.at_level(logging.WARNING):
        logged_in = _log_in(client, "bob")
    if still_logs_in:
        assert logged_in.status_code == 200, logged_in.text
    else:
        wrong = _log_in(client, "bob", "not bob's password")
        assert logged_in.status_code == wrong.status_code == 401, logged_in.text
        assert _without_request_id(logged_in.json()) == _without_request_id(wrong.json())
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING and getattr(r, "username", None) == "bob"]
    assert warnings and warnings[0].bad_fields == [field], [r.__dict__ for r in caplog.records]
    logged = " ".join(str(r.__dict__) for r in caplog.records)
    assert NOT_A_HASH not in logged and "$argon2" not in logged

    listed = client.get("/api/users", headers=ada)
    assert listed.status_code == 200, listed.text
    by_name = {u["username"]: u for u in listed.json()["users"]}
    assert list(by_name) == ["ada", "ann", "bob"]
    assert by_name["bob"]["problems"] == [field] and by_name["ann"]["problems"] == []
    shown = client.get("/api/users/bob", headers=ada)
    assert (shown.status_code, shown.json()["problems"]) == (200, [field]), shown.text


@pytest.mark.parametrize("damage", DAMAGES, ids=list(DAMAGES))
def test_an_admin_changes_or_deletes_a_damaged_record(client, raw, unique, damage):
    damage_record, _, _ = DAMAGES[damage]
    ada = login(client, "ada")
    damage_record(raw, f"{unique}:user:bob")

    changed = client.patch("/api/users/bob", json={"roles": ["user"]}, headers=ada)
    assert changed.status_code == 200, changed.text
    reset = client.put("/api/users/bob/password", json={"password": NEW_PASSWORD}, headers=ada)
    assert reset.status_code == 200, reset.text
    deleted = client.delete("/api/users/bob", headers=ada)
    assert deleted.status_code == 200, deleted.text
    assert client.get("/api/users/bob", headers=ada).status_code == 404
    assert [u["username"] for u in client.get("/api/users", headers=ada).json()["users"]] == ["ada", "ann"]


@pytest.mark.parametrize("damage", ["no password_hash", "password_hash not a hash", "no id", "no username"])
def test_resetting_the_password_of_a_damaged_record_lets_the_user_in_again(client, raw, unique, damage):
    damage_record, _, _ = DAMAGES[damage]
    ada = login(client, "ada")
    damage_record(raw, f"{unique}:user:bob")

    reset = client.put("/api/users/bob/password", json={"password": NEW_PASSWORD}, headers=ada)
    assert reset.status_code == 200, reset.text
    assert reset.json()["user"]["problems"] == [] and reset.json()["user"]["id"]
    logged_in = _log_in(client, "bob", NEW_PASSWORD)
    assert logged_in.status_code == 200, logged_in.text
    assert logged_in.json()["user"]["id"] == reset.json()["user"]["id"]


def test_a_disabled_field_of_another_value_than_0_or_1_refuses_the_logins(client, raw, unique):
    raw.hset(f"{unique}:user:bob", "disabled", "true")  # as an operator disabling bob by hand may type it
    assert _log_in(client, "bob").status_code == 401
    ada = login(client, "ada")
    assert client.get("/api/users/bob", headers=ada).json()["disabled"] is True


def test_a_signed_in_user_whose_record_is_damaged_meanwhile_gets_no_500(client, raw, unique):
    bob = login(client, "bob")
    raw.hdel(f"{unique}:user:bob", "password_hash")

    assert client.get("/auth/me", headers=bob).status_code == 200
    changed = client.post(
        "/auth/password", json={"current_password": PASSWORD, "new_password": NEW_PASSWORD}, headers=bob
    )
    assert (changed.status_code, changed.json()["error"]) == (403, "wrong_password"), changed.text


def _set_instead_of_a_hash(raw, key):
    raw.delete(key)
    raw.set(key, "bob")


def test_a_user_key_that_is_no_hash_is_a_damaged_record_not_an_unavailable_store(client, raw, unique, caplog):
    ada = login(client, "ada")
    _set_instead_of_a_hash(raw, f"{unique}:user:bob")

    with caplog.at_level(logging.WARNING):
        logged_in = _log_in(client, "bob")
    wrong = _log_in(client, "bob", "not bob's password")
    assert logged_in.status_code == wrong.status_code == 401, logged_in.text
    assert _without_request_id(logged_in.json()) == _without_request_id(wrong.json())
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING and getattr(r, "username", None) == "bob"]
    assert warnings and warnings[0].bad_fields == ["record"], [r.__dict__ for r in caplog.records]

    listed = client.get("/api/users", headers=ada)
    assert listed.status_code == 200, listed.text
    by_name = {u["username"]: u for u in listed.json()["users"]}
    assert list(by_name) == ["ada", "ann", "bob"] and by_name["bob"]["problems"] == ["record"]
    shown = client.get("/api/users/bob", headers=ada)
    assert (shown.status_code, shown.json()["problems"]) == (200, ["record"]), shown.text
    assert client.post("/api/users", json={"username": "bob", "password": PASSWORD, "roles": ["user"]},
                       headers=ada).status_code == 409
    deleted = client.delete("/api/users/bob", headers=ada)
    assert deleted.status_code == 200, deleted.text
    assert [u["username"] for u in client.get("/api/users", headers=ada).json()["users"]] == ["ada", "ann"]


def test_resetting_the_password_of_a_user_key_that_is_no_hash_makes_it_a_hash_again(client, raw, unique):
    ada = login(client, "ada")
    _set_instead_of_a_hash(raw, f"{unique}:user:bob")

    reset = client.put("/api/users/bob/password", json={"password": NEW_PASSWORD}, headers=ada)
    assert reset.status_code == 200, reset.text
    assert reset.json()["user"]["problems"] == ["roles"]  # nothing to keep from the key: set-role repairs that
    changed = client.patch("/api/users/bob", json={"roles": ["user"]}, headers=ada)
    assert (changed.status_code, changed.json()["user"]["problems"]) == (200, []), changed.text
    assert _log_in(client, "bob", NEW_PASSWORD).status_code == 200


def test_cairn_user_lists_and_deletes_a_user_key_that_is_no_hash(client, raw, unique, cairn_user):
    _set_instead_of_a_hash(raw, f"{unique}:user:bob")

    code, out, err = cairn_user("list")
    assert code == 0, err
    assert [line.split()[0] for line in out.splitlines()] == ["ada", "ann", "bob"]
    assert out.splitlines()[2].endswith("(damaged: record)")
    assert cairn_user("delete", "bob")[:2] == (0, "deleted bob; 0 sessions ended\n")
    assert [line.split()[0] for line in cairn_user("list")[1].splitlines()] == ["ada", "ann"]


def test_a_name_left_in_the_set_of_users_without_a_record_is_no_user_and_may_be_added_again(client, raw, unique):
    ada = login(client, "ada")
    raw.delete(f"{unique}:user:bob")  # deleted by hand, its name left behind

    assert [u["username"] for u in client.get("/api/users", headers=ada).json()["users"]] == ["ada", "ann"]
    assert client.get("/api/users/bob", headers=ada).status_code == 404
    added = client.post("/api/users", json={"username": "Bob", "password": PASSWORD, "roles": ["user"]}, headers=ada)
    assert added.status_code == 201, added.text
    assert raw.smembers(f"{unique}:users") == {"ada", "ann", "Bob"}
    assert _log_in(client, "Bob").status_code == 200


def test_deleting_a_name_left_without_a_record_removes_the_name(client, raw, unique, cairn_user):
    raw.delete(f"{unique}:user:bob")

    code, _, err = cairn_user("delete", "bob")
    assert (code, err) == (2, "error: no user 'bob'\n")
    assert raw.smembers(f"{unique}:users") == {"ada", "ann"}
    ada = login(client, "ada")
    raw.sadd(f"{unique}:users", "bob")
    assert client.delete("/api/users/bob", headers=ada).status_code == 404
    assert raw.smembers(f"{unique}:users") == {"ada", "ann"}
    assert cairn_user("add", "bob", "--role", "user", "--password-stdin", stdin=f"{PASSWORD}\n")[0] == 0
