"""`python -m services.analytics` as a real process: serves, consumes, and exits cleanly on SIGTERM."""
from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import aio_pika
import httpx
import pytest

from shared.broker import dead_letter_names
from tests.support import free_port, wait_until

pytestmark = pytest.mark.integration


@pytest.fixture
def queue_names(amqp_url: str, unique: str):
    names = {"EVENTS_EXCHANGE": f"{unique}.events", "ANALYTICS_QUEUE": f"{unique}.analytics"}
    yield names

    async def delete() -> None:
        async with await aio_pika.connect(amqp_url) as connection:
            channel = await connection.channel()
            for queue in (names["ANALYTICS_QUEUE"], dead_letter_names(names["ANALYTICS_QUEUE"])[1]):
                await channel.queue_delete(queue)
            for exchange in (names["EVENTS_EXCHANGE"], dead_letter_names(names["ANALYTICS_QUEUE"])[0]):
                await channel.exchange_delete(exchange)

    asyncio.run(delete())


def test_runs_as_a_module_and_stops_on_sigterm(tmp_path: Path, amqp_url: str, queue_names: dict) -> None:
    port = free_port()
    env = os.environ | queue_names | {
        "ANALYTICS_PORT": str(port),
        "CAIRN_DATA_DIR": str(tmp_path / "data"),
        "AMQP_URL": amqp_url,
        "CAIRN_SERVICE_TOKEN": "process-test-token",
        "CAIRN_ENV": "test",
    }
    env.pop("ANALYTICS_DB_URL", None)
    process = subprocess.Popen(
        [sys.executable, "-m", "services.analytics"],
        cwd=Path(__file__).resolve().parents[3],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:

        def ready() -> bool:
            try:
                return httpx.get(f"{url}/readyz", timeout=1).status_code == 200
            except httpx.HTTPError:
                return process.poll() is not None  # stop waiting if it died

        wait_until(ready, timeout=30, what="analytics process to be ready")
        assert process.poll() is None
        response = httpx.get(f"{url}/analytics/summary", headers={"X-Service-Token": "process-test-token"})
        assert (response.status_code, response.json()["queries"]) == (200, 0)
        assert (tmp_path / "data" / "analytics.db").is_file()
    finally:
        process.send_signal(signal.SIGTERM)
        output, _ = process.communicate(timeout=20)
    # uvicorn shuts down gracefully, then re-raises the signal it caught.
    assert process.returncode in (0, -signal.SIGTERM), output
    assert "Application shutdown complete." in output
    lines = [json.loads(line) for line in output.splitlines() if line.startswith("{")]
    assert any(line.get("message") == "consuming" and line.get("service") == "analytics" for line in lines), output
