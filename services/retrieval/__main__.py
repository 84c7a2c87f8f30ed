"""`python -m services.retrieval`: serve the retrieval service."""
from __future__ import annotations

import os

from services.retrieval.settings import Settings
from shared.logging import configure_logging
from shared.tracing import configure_tracing
from shared.web import serve

# How long an idle OpenMP thread spins before it sleeps, read once when PyTorch (or Chroma, linked to the
# same OpenMP) loads it. In this process the default let PyTorch's threads sleep between the steps of a
# query encode: measured inside the service, 16-17 ms per SciFact query against 12-13 ms with this count
# (a bare encode alone in a process: 10 ms). An idle service pays the spin once, after each burst.
OPENMP_SPIN_COUNT = "3000000"


def main() -> None:
    os.environ.setdefault("GOMP_SPINCOUNT", OPENMP_SPIN_COUNT)
    settings = Settings()
    configure_logging("retrieval", settings.log_level)
    configure_tracing("retrieval")
    serve("services.retrieval.main:create_app", settings)


if __name__ == "__main__":
    main()
