"""shared.server: what a service's lifespan loads is frozen out of the garbage collector's sight once the
server has started, over a real socket; a start that fails exits with uvicorn's start-up failure status."""
import gc
import threading
from contextlib import asynccontextmanager

import httpx
import pytest
import uvicorn
from fastapi import FastAPI
from uvicorn.config import STARTUP_FAILURE

from shared import server
from shared.web import SERVER_OPTIONS
from tests.support import free_port, wait_until

pytestmark = pytest.mark.integration


class Kept:
    """A type of object only this test's lifespan makes, to find among the collector's objects."""


@pytest.fixture(autouse=True)
def thawed():
    # gc.freeze is for the whole process: this pytest worker's own objects are handed back to the collector.
    assert gc.get_freeze_count() == 0
    yield
    gc.unfreeze()


def _app(startup) -> FastAPI:
    @asynccontextmanager
    async def lifespan(app: FastAPI):
        startup(app)
        yield

    app = FastAPI(lifespan=lifespan)

    @app.get("/kept")
    async def kept() -> int:
        return len(app.state.kept)

    return app


def _tracked_kept() -> int:
    return sum(type(o) is Kept for o in gc.get_objects())  # isinstance would wake lazy attributes of torch


def test_the_lifespans_objects_are_frozen_once_the_server_has_started_and_later_garbage_is_collected():
    def keep(app: FastAPI) -> None:
        app.state.kept = [Kept() for _ in range(100)]
        cycle = [Kept()]
        cycle.append(cycle)  # garbage of the start-up, reachable only from itself

    port = free_port()
    served = server.StartFrozenServer(uvicorn.Config(_app(keep), host="127.0.0.1", port=port, **SERVER_OPTIONS))
    thread = threading.Thread(target=served.run, daemon=True)
    thread.start()
    try:
        wait_until(lambda: gc.get_freeze_count() > 0, timeout=10, what="the start-up's objects frozen")
        assert httpx.get(f"http://127.0.0.1:{port}/kept").json() == 100
        assert _tracked_kept() == 0  # the kept ones frozen, the start-up's cycle collected before the freeze

        later = [Kept()]
        later.append(later)
        del later
        assert gc.collect() > 0 and _tracked_kept() == 0  # a cycle made after the start is still collected
    finally:
        served.should_exit = True
        thread.join(timeout=10)
    gc.unfreeze()
    assert _tracked_kept() == 100


def test_a_start_that_fails_exits_with_uvicorns_start_up_failure_status_and_freezes_nothing():
    def fail(app: FastAPI) -> None:
        raise RuntimeError("the model is missing")

    config = uvicorn.Config(_app(fail), host="127.0.0.1", port=free_port(), **SERVER_OPTIONS)
    with pytest.raises(SystemExit) as exited:
        server.run(config)
    assert exited.value.code == STARTUP_FAILURE
    assert gc.get_freeze_count() == 0
