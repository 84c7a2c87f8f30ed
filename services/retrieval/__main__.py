"""`python -m services.retrieval`: serve the retrieval service."""
from __future__ import annotations

import os

from services.retrieval.settings import Settings
from shared.logging import configure_logging
from shared.settings import settings_or_exit
from shared.tracing import configure_tracing
from shared.web import serve

# How long an idle OpenMP thread spins before it sleeps, read once when PyTorch (or Chroma, linked to the
# same OpenMP) loads it. OpenMP's default let PyTorch's threads sleep between the steps of a query encode:
# 16-17 ms per SciFact query against 12-13 ms with spinning. 30,000 spins bridge those steps as well as
# 3,000,000 did and stop soon after the encode, so the threads no longer burn the cores that chat, the
# gateway and the next request need: retrieval CPU per search at one client 42-44 ms against 59-61 ms,
# and no slower (docs/benchmarks.md, "End to end").
OPENMP_SPIN_COUNT = "30000"


def main() -> None:
    os.environ.setdefault("GOMP_SPINCOUNT", OPENMP_SPIN_COUNT)
    settings = settings_or_exit("retrieval", Settings)
    configure_logging("retrieval", settings.log_level)
    configure_tracing("retrieval")
    serve("services.retrieval.main:create_app", settings)


if __name__ == "__main__":
    main()
