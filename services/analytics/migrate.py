"""Run the analytics schema migrations by hand (the service also runs `upgrade` at every start):

    python -m services.analytics.migrate upgrade [REVISION]   # default: head
    python -m services.analytics.migrate downgrade REVISION   # e.g. base, to drop everything
    python -m services.analytics.migrate current

The database is ANALYTICS_DB_URL (else the SQLite file under CAIRN_DATA_DIR), or --url.
"""
from __future__ import annotations

import argparse
import sys

from services.analytics.adapters import migrations
from services.analytics.adapters.sql_store import make_engine
from services.analytics.settings import Settings
from shared.logging import configure_logging


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m services.analytics.migrate", description=__doc__.splitlines()[0])
    parser.add_argument("--url", help="SQLAlchemy URL of the analytics database")
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("upgrade", help="migrate up to REVISION").add_argument("revision", nargs="?", default="head")
    commands.add_parser("downgrade", help="migrate down to REVISION").add_argument("revision")
    commands.add_parser("current", help="print the database's revision")
    args = parser.parse_args(argv)
    configure_logging("analytics", "INFO")  # adopting an old table says what it did
    engine = make_engine(args.url or Settings().database_url)
    try:
        if args.command == "upgrade":
            migrations.upgrade(engine, args.revision)
        elif args.command == "downgrade":
            migrations.downgrade(engine, args.revision)
        print(migrations.current_revision(engine) or "base")
    finally:
        engine.dispose()
    return 0


if __name__ == "__main__":
    sys.exit(main())
