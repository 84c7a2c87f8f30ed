"""ANALYTICS_DB_PASSWORD: a strong password full of URL characters reaches PostgreSQL as it is, with the
user, host and database of ANALYTICS_DB_URL intact. The test logs in as a role of its own that has that
password; a server that trusts local connections does not check it, so the test also reads back the
password psycopg connected with."""
from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg import sql
from sqlalchemy import text
from sqlalchemy.engine import URL, make_url

from services.analytics.adapters.sql_store import SqlEventStore
from services.analytics.settings import Settings

pytestmark = pytest.mark.integration

PASSWORD = "p@ss:w/rd#x%2F?y=1&z $dollar"


@pytest.fixture
def role_and_database(postgres_server_url: str) -> Iterator[URL]:
    """A login role with PASSWORD that owns a new database; the URL names both, without the password."""
    server = make_url(postgres_server_url)
    name = f"cairn_pw_{uuid.uuid4().hex[:10]}"
    admin = server.set(drivername="postgresql").render_as_string(hide_password=False)
    with psycopg.connect(admin, autocommit=True, connect_timeout=5) as conn:
        conn.execute(sql.SQL("CREATE ROLE {} LOGIN PASSWORD {}").format(sql.Identifier(name), sql.Literal(PASSWORD)))
        conn.execute(sql.SQL("CREATE DATABASE {} OWNER {}").format(sql.Identifier(name), sql.Identifier(name)))
    yield server.set(username=name, password=None, database=name)
    with psycopg.connect(admin, autocommit=True, connect_timeout=5) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
        conn.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(name)))


def test_a_password_full_of_url_characters_reaches_postgresql_unchanged(role_and_database: URL, tmp_path: Path) -> None:
    url = role_and_database
    settings = Settings(
        ANALYTICS_DB_URL=url.render_as_string(hide_password=False), ANALYTICS_DB_PASSWORD=PASSWORD, CAIRN_DATA_DIR=tmp_path
    )
    store = SqlEventStore.from_url(settings.database_url)
    try:
        store.create_schema()  # the migrations run as that role, in its database
        with store.engine.connect() as conn:
            info = conn.connection.dbapi_connection.info
            assert info.password == PASSWORD
            assert (info.user, info.host, info.port, info.dbname) == (url.username, url.host, url.port, url.database)
            assert tuple(conn.execute(text("SELECT current_user, current_database()")).one()) == (url.username, url.database)
            assert conn.execute(text("SELECT count(*) FROM events")).scalar() == 0
    finally:
        store.close()
