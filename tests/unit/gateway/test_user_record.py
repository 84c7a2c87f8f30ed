"""Reading a stored user record: a sound one reads back as written, a damaged one as the safest user, with its
bad fields named."""
from datetime import UTC, datetime

import pytest

from services.gateway.domain import User
from services.gateway.passwords import hash_password
from services.gateway.user_record import record_fields, user_from_record

pytestmark = pytest.mark.unit


def test_a_record_reads_back_as_the_user_written():
    user = User(
        id="u1", username="ann", password_hash=hash_password("x" * 8), roles=("user", "admin"), disabled=True,
        created_at=datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC),
    )
    assert user_from_record("ann", record_fields(user)) == user


def test_an_older_record_without_created_at_or_disabled_is_sound():
    fields = {"id": "u1", "username": "ann", "password_hash": hash_password("x" * 8), "roles": "user"}
    user = user_from_record("ann", fields)
    assert (user.problems, user.disabled, user.created_at, user.may_log_in) == ((), False, None, True)


def test_a_record_with_every_field_bad_reads_as_a_user_no_password_opens_and_no_one_may_log_in_as():
    fields = {"username": "bob", "password_hash": "secret", "roles": "owner", "disabled": "true", "created_at": "x"}
    user = user_from_record("ann", fields)
    assert user.problems == ("id", "username", "password_hash", "roles", "disabled", "created_at")
    assert (user.id, user.username, user.password_hash, user.roles, user.disabled) == ("", "ann", "", (), True)
    assert (user.created_at, user.may_log_in) == (None, False)


def test_a_created_at_without_a_zone_is_taken_as_utc():
    fields = {"id": "u1", "username": "ann", "password_hash": hash_password("x" * 8), "roles": "user",
              "created_at": "2026-01-02T03:04:05"}
    assert user_from_record("ann", fields).created_at == datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
