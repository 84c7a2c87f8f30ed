"""The uvicorn server every Cairn service runs under: uvicorn's own, with the start-up's objects frozen.

What the lifespan loads is kept for the process's life: the modules, a model, the keyword index. Python's
full garbage collection walks every one of those objects each time, and under load it comes every few
seconds, because the objects of the requests in flight pile up in the oldest generation. On the retrieval
service over the SciFact bench index that is 600,000 objects and 0.35 s a walk, a pause that every request
in flight waits out (four in 30 s of 32 clients searching). `gc.freeze` moves them out of the collector's
sight once the service has started; garbage made after it is still collected as before.
"""
from __future__ import annotations

import gc
import socket
import sys

import uvicorn
from uvicorn.config import STARTUP_FAILURE


def freeze_what_is_loaded() -> None:
    """Keep every object alive now out of the collector's full walks; garbage made later is still collected."""
    gc.collect()  # the start-up's own garbage is freed now, not kept in the frozen generation for good
    gc.freeze()


class StartFrozenServer(uvicorn.Server):
    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets=sockets)
        if self.started:
            freeze_what_is_loaded()


def run(config: uvicorn.Config) -> None:
    """uvicorn.run for one worker with no reload, on StartFrozenServer: the process exits with uvicorn's
    STARTUP_FAILURE status when the lifespan fails or the port is taken."""
    server = StartFrozenServer(config)
    try:
        server.run()
    except KeyboardInterrupt:  # uvicorn raises the SIGINT it caught again once it has shut down
        pass
    if not server.started:
        sys.exit(STARTUP_FAILURE)
