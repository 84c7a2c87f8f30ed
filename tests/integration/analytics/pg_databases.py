"""Fresh PostgreSQL databases for the analytics store tests, created and dropped around each use."""
from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import psycopg
from sqlalchemy.engine import make_url

from services.analytics.adapters.sql_store import SqlEventStore


@contextmanager
def fresh_database(server_url: str, *, icu_locale: str | None = None) -> Iterator[str]:
    """The URL of a new, empty database on the server at `server_url`, dropped afterwards. `icu_locale`, such
    as en-US, gives it that language's collation instead of the server's default."""
    server = make_url(server_url)
    name = f"cairn_test_{uuid.uuid4().hex[:10]}"
    admin_dsn = server.set(drivername="postgresql").render_as_string(hide_password=False)
    collation = f" TEMPLATE template0 LOCALE_PROVIDER icu ICU_LOCALE '{icu_locale}'" if icu_locale else ""
    with psycopg.connect(admin_dsn, autocommit=True, connect_timeout=5) as conn:
        conn.execute(f'CREATE DATABASE "{name}"{collation}')
    try:
        yield server.set(database=name).render_as_string(hide_password=False)
    finally:
        with psycopg.connect(admin_dsn, autocommit=True, connect_timeout=5) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@contextmanager
def fresh_store(server_url: str, *, icu_locale: str | None = None) -> Iterator[SqlEventStore]:
    """A migrated SqlEventStore on a fresh PostgreSQL database, closed and dropped afterwards."""
    with fresh_database(server_url, icu_locale=icu_locale) as url:
        store = SqlEventStore.from_url(url)
        assert store.dialect == "postgresql"
        store.create_schema()
        try:
            yield store
        finally:
            store.close()


@contextmanager
def database_of_its_own_role(server_url: str) -> Iterator[str]:
    """The URL of a new, empty database owned by a new login role that is not a superuser, connecting as
    that role: unlike the superuser, whom permissions never stop, it can have a privilege revoked. The
    database and the role are dropped afterwards."""
    server = make_url(server_url)
    role = f"cairn_role_{uuid.uuid4().hex[:10]}"
    password = uuid.uuid4().hex  # trust auth ignores it; a server that asks for one gets it
    admin_dsn = server.set(drivername="postgresql").render_as_string(hide_password=False)
    with psycopg.connect(admin_dsn, autocommit=True, connect_timeout=5) as conn:
        conn.execute(f"CREATE ROLE \"{role}\" LOGIN PASSWORD '{password}'")
    try:
        with fresh_database(server_url) as url:
            with psycopg.connect(admin_dsn, autocommit=True, connect_timeout=5) as conn:
                conn.execute(f'ALTER DATABASE "{make_url(url).database}" OWNER TO "{role}"')
            yield make_url(url).set(username=role, password=password).render_as_string(hide_password=False)
    finally:
        with psycopg.connect(admin_dsn, autocommit=True, connect_timeout=5) as conn:
            conn.execute(f'DROP ROLE IF EXISTS "{role}"')
