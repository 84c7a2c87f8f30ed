"""Cairn as real processes, for the end-to-end bench and the soak: retrieval serving a copy of the SciFact
bench index, chat calling it and generating through an OpenAI-compatible endpoint over HTTP (`llm_url`) or
with its built-in offline generator (`llm_url=None`), analytics consuming the events
(SQLite in the scratch folder), the gateway in front, and a user (roles user and analyst) logged in.

Settings are the defaults but for what a benchmark must pin: the query cache off (QUERY_CACHE_SIZE=0,
every request encodes), the per-user question rate limit off (one user asks everything), the hybrid
candidates per leg (the same work as the systems compared), and log level WARNING. The run has its own
Redis prefix, exchange and queue, all removed by `close`.
"""
from __future__ import annotations

import asyncio
import secrets
import shutil
from pathlib import Path

import httpx
import psutil
from prometheus_client.parser import text_string_to_metric_families

from bench.processes import ServiceProcess
from services.gateway.adapters.redis_store import RedisUserStore, connect
from services.gateway.settings import Settings as GatewaySettings
from services.gateway.users import add_user

USERNAME = "bench"
SERVICES = ("retrieval", "analytics", "chat", "gateway")  # in the order they start


class CairnSystem:
    def __init__(self, *, index: Path, scratch: Path, llm_url: str | None, llm_model: str, candidates: int) -> None:
        run_id = secrets.token_hex(4)
        self.prefix = f"cairn-bench-{run_id}"
        self.exchange, self.queue = f"{self.prefix}.events", f"{self.prefix}.analytics"
        self.password = secrets.token_urlsafe(16)
        self.engines = GatewaySettings()  # REDIS_URL and AMQP_URL as this shell has them
        token = secrets.token_urlsafe(24)
        shared = {"REDIS_PREFIX": self.prefix, "EVENTS_EXCHANGE": self.exchange, "ANALYTICS_QUEUE": self.queue}

        def process(service: str, env: dict[str, str]) -> ServiceProcess:
            data_dir = scratch / service
            data_dir.mkdir(parents=True, exist_ok=True)
            return ServiceProcess(
                service=service, name=service, scratch=scratch, token=token,
                env=shared | {"CAIRN_DATA_DIR": str(data_dir)} | env,
            )

        shutil.copytree(index / "chroma", scratch / "retrieval" / "chroma")
        retrieval = process("retrieval", {
            "CHROMA_COLLECTION": "bench", "QUERY_CACHE_SIZE": "0", "HYBRID_CANDIDATES": str(candidates),
        })
        analytics = process("analytics", {"RETRIEVAL_URL": retrieval.url})
        generator = {"LLM_BASE_URL": f"{llm_url}/v1"} if llm_url else {}  # None: chat's built-in offline generator
        chat = process("chat", {"RETRIEVAL_URL": retrieval.url, "LLM_MODEL": llm_model} | generator)
        gateway = process("gateway", {
            "CHAT_URL": chat.url, "RETRIEVAL_URL": retrieval.url, "ANALYTICS_URL": analytics.url,
            "CHAT_REQUESTS_PER_MINUTE": "0",
        })
        self.processes = {"retrieval": retrieval, "analytics": analytics, "chat": chat, "gateway": gateway}
        self.url = gateway.url

    def start(self, log=print) -> None:
        for process in self.processes.values():
            process.start()
        for name, process in self.processes.items():
            log(f"  {name} ready in {process.wait_ready():.1f}s")

    async def login(self) -> dict[str, str]:
        """Adds the bench user to this run's Redis prefix and logs in: the headers of its session."""
        redis = connect(self.engines.redis_url, timeout_s=5)
        try:
            await add_user(
                users=RedisUserStore(redis, prefix=self.prefix, timeout_s=5),
                username=USERNAME, password=self.password, roles=["user", "analyst"],
            )
        finally:
            await redis.aclose()
        async with httpx.AsyncClient(base_url=self.url, timeout=30) as client:
            response = await client.post("/auth/login", json={"username": USERNAME, "password": self.password})
        if response.status_code != 200:
            raise RuntimeError(f"login answered {response.status_code}: {response.text[:300]}")
        return {"Authorization": f"Bearer {response.json()['token']}"}

    def rss_mb(self) -> dict[str, float]:
        """Resident memory of each service process (with any children), in MiB."""
        sizes = {}
        for name, process in self.processes.items():
            root = psutil.Process(process.pid)
            sizes[name] = sum(p.memory_info().rss for p in [root, *root.children(recursive=True)]) / 2**20
        return sizes

    async def metric(self, service: str, name: str) -> float:
        """The sum of a metric's samples (all labels) on a service's /metrics."""
        async with httpx.AsyncClient(timeout=10) as client:
            response = await client.get(f"{self.processes[service].url}/metrics")
        response.raise_for_status()
        return sum(
            sample.value
            for family in text_string_to_metric_families(response.text)
            for sample in family.samples
            if sample.name == name
        )

    async def close(self) -> None:
        """Stops the processes, then removes the run's Redis keys, exchange and queues."""
        from bench.chat_http import _delete_broker_names

        for process in reversed(self.processes.values()):
            await asyncio.to_thread(process.stop)
        redis = connect(self.engines.redis_url, timeout_s=5)
        try:
            keys = [key async for key in redis.scan_iter(match=f"{self.prefix}:*", count=1000)]
            for start in range(0, len(keys), 1000):
                await redis.delete(*keys[start : start + 1000])
        finally:
            await redis.aclose()
        await _delete_broker_names(self.engines.amqp_url, self.exchange, self.queue)


def offline_generator(scratch: Path) -> ServiceProcess:
    """`python -m services.chat.offline_llm`: the offline generator as an OpenAI-compatible endpoint."""
    return ServiceProcess(service="offline_llm", module="services.chat.offline_llm", name="offline-llm", scratch=scratch, env={})
