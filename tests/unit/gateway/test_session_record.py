"""Reading a stored session record: a sound one reads back as written, one that cannot be read safely as a
damaged session to end (with its bad fields named), and a hash that is no session at all as none."""
import logging
from datetime import UTC, datetime

import pytest

from services.gateway.domain import Session
from services.gateway.session_record import DamagedSession, record_fields, session_from_record

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
        (record_fields(SESSION), -1),
    ],
    ids=["gone", "a stray last_seen write", "stored by an older gateway", "no expiry"],
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


def test_unknown_roles_are_left_out_and_named_but_the_session_goes_on(caplog):
    with caplog.at_level(logging.WARNING):
        session = _read({**record_fields(SESSION), "roles": "admin,owner,user"})
    assert session == SESSION
    assert [r.bad_fields for r in caplog.records] == [["roles"]]


def test_times_without_a_zone_are_taken_as_utc():
    fields = {**record_fields(SESSION), "created_at": "2026-01-02T03:00:00", "last_seen": "2026-01-02T03:30:00"}
    assert _read(fields) == SESSION
