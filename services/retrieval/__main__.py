"""`python -m services.retrieval`: serve the retrieval service."""
from __future__ import annotations

from services.retrieval.settings import Settings
from shared.logging import configure_logging
from shared.web import serve


def main() -> None:
    settings = Settings()
    configure_logging("retrieval", settings.log_level)
    serve("services.retrieval.main:create_app", settings)


if __name__ == "__main__":
    main()

