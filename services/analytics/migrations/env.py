"""Alembic's environment for the analytics schema.

Cairn runs it through services.analytics.adapters.migrations, which passes an open connection (already
in a transaction, holding the migration lock) as config.attributes["connection"]. Run by hand with the
alembic command instead, it connects to the config's sqlalchemy.url, or else to ANALYTICS_DB_URL.
"""
from __future__ import annotations

from alembic import context

from services.analytics.adapters.schema import metadata


def _run(connection) -> None:
    context.configure(connection=connection, target_metadata=metadata)
    with context.begin_transaction():
        context.run_migrations()


connection = context.config.attributes.get("connection")
if connection is not None:
    _run(connection)
else:
    from services.analytics.adapters.sql_store import make_engine
    from services.analytics.settings import Settings

    engine = make_engine(context.config.get_main_option("sqlalchemy.url") or Settings().database_url)
    with engine.connect() as opened:
        _run(opened)
    engine.dispose()
