"""Reading a stored session record: a sound one reads back as written, one that cannot be read safely (or never
expires) as a damaged session to end (with its bad fields named), and a hash that is no session at all as none."""
import logging
from datetime import UTC, datetime

import pytest

from services.gateway.domain import Session
from services.gateway.session_record import DamagedSession, record_fields, session_from_record, unknown_roles_in

pytestmark = pytest.mark.unit
EXPIRES = datetime(2026, 1, 2, 4, tzinfo=UTC)
SESSION = Session(
    id="digest", public_id="p1", user_id="u1", username="ann", roles=("user", "admin"),
    created_at=datetime(2026, 1, 2, 3, tzinfo=UTC), last_seen=datetime(2026, 1, 2, 3, 30, tzinfo=UTC),
    expires_at=EXPIRES,
)


def _read(fields: dict[str, str], ttl: int = 60):
    return session_from_record("digest", fields, ttl=ttl, expires_at=EXPIRES)


def test_a_record_reads_back_as_the_session_written():
    assert _read(record_fields(SESSION)) == SESSION


@pytest.mark.parametrize(
    ("fields", "ttl"),
    [
        ({}, -2),
        ({"last_seen": "2026-01-02T03:30:00+00:00"}, 60),
        ({k: v for k, v in record_fields(SESSION).items() if k != "public_id"}, 60),
        (record_fields(SESSION), -2),
    ],
    ids=["gone", "a stray last_seen write", "stored by an older gateway", "expired between its two reads"],
)
def test_a_hash_that_is_no_live_session_is_none_without_a_warning(fields, ttl, caplog):
    with caplog.at_level(logging.WARNING):
        assert _read(fields, ttl) is None
    assert not caplog.records


def test_a_record_with_every_field_bad_is_damaged_and_named_so(caplog):
    fields = {"public_id": "p1", "user_id": "", "roles": "owner", "created_at": "x", "last_seen": "1700000000"}
    with caplog.at_level(logging.WARNING):
        assert _read(fields) == DamagedSession("digest", user_id="")
    [warning] = caplog.records
    assert (warning.session, warning.bad_fields) == ("p1", ["user_id", "username", "roles", "created_at", "last_seen"])


@pytest.mark.parametrize(
    ("fields", "bad_fields", "user_id"),
    [
        (record_fields(SESSION), ["expiry"], "u1"),
        ({"last_seen": "2026-01-02T03:30:00+00:00"}, ["user_id", "username", "created_at", "expiry"], ""),
    ],
    ids=["a whole record", "a stray last_seen write"],
)
def test_a_hash_that_never_expires_is_damaged_and_named_so(fields, bad_fields, user_id, caplog):
    with caplog.at_level(logging.WARNING):
        assert _read(fields, ttl=-1) == DamagedSession("digest", user_id=user_id)
    assert [r.bad_fields for r in caplog.records] == [bad_fields]


def test_unknown_roles_are_left_out_and_named_but_the_session_goes_on(caplog):
    with caplog.at_level(logging.WARNING):
        session = _read({**record_fields(SESSION), "roles": "admin,owner,user"})
    assert session == SESSION
    assert [r.bad_fields for r in caplog.records] == [["roles"]]
    assert "session goes on" in caplog.records[0].getMessage()


@pytest.mark.parametrize(
    ("stored", "unknown"), [("admin,owner,user", True), ("admin,user", False), ("", False), ("owner", True)]
)
def test_a_record_naming_an_unknown_role_is_to_be_repaired(stored, unknown):
    assert unknown_roles_in({**record_fields(SESSION), "roles": stored}) is unknown


def test_times_without_a_zone_are_taken_as_utc():
    fields = {**record_fields(SESSION), "created_at": "2026-01-02T03:00:00", "last_seen": "2026-01-02T03:30:00"}
    assert _read(fields) == SESSION
