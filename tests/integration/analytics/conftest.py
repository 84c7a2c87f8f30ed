"""PostgreSQL for the analytics store tests: the server at ANALYTICS_TEST_PG_URL (default the local one),
testcontainers when only a Docker engine is there, a clear failure when neither is."""
from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import psycopg
import pytest
from sqlalchemy.engine import make_url

from tests.conftest import answers, docker_reachable

DEFAULT_PG_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/test"


@pytest.fixture(scope="session")
def postgres_server_url() -> Iterator[str]:
    url = os.environ.get("ANALYTICS_TEST_PG_URL", DEFAULT_PG_URL)
    if answers(url, 5432):
        yield url
    elif docker_reachable():
        from testcontainers.community.postgres import PostgresContainer

        with PostgresContainer("postgres:16-alpine", driver="psycopg") as container:
            yield container.get_connection_url()
    else:
        pytest.fail(
            f"PostgreSQL does not answer at {url} and no Docker engine is reachable for testcontainers. "
            "Install and start it (apt-get install postgresql; pg_ctlcluster 15 main start) "
            "or point ANALYTICS_TEST_PG_URL at one.",
            pytrace=False,
        )


@pytest.fixture(scope="session")
def postgres_url(postgres_server_url: str) -> Iterator[str]:
    """A database of its own for this test session, dropped at the end."""
    server = make_url(postgres_server_url)
    name = f"cairn_test_{uuid.uuid4().hex[:10]}"
    admin_dsn = server.set(drivername="postgresql").render_as_string(hide_password=False)
    with psycopg.connect(admin_dsn, autocommit=True, connect_timeout=5) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    yield server.set(database=name).render_as_string(hide_password=False)
    with psycopg.connect(admin_dsn, autocommit=True, connect_timeout=5) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
