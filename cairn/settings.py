"""What the `cairn` command needs to know: where each service listens, where Redis and RabbitMQ are."""
from __future__ import annotations

from pydantic import Field

from shared.settings import CommonSettings, aliases

SERVICES = ("retrieval", "analytics", "chat", "gateway")  # start order: dependencies first


class CliSettings(CommonSettings):
    gateway_port: int = Field(8000, validation_alias=aliases("GATEWAY_PORT", "gateway_port"))
    chat_port: int = Field(8001, validation_alias=aliases("CHAT_PORT", "chat_port"))
    retrieval_port: int = Field(8002, validation_alias=aliases("RETRIEVAL_PORT", "retrieval_port"))
    analytics_port: int = Field(8003, validation_alias=aliases("ANALYTICS_PORT", "analytics_port"))
    redis_url: str = Field("redis://127.0.0.1:6379/0", validation_alias=aliases("REDIS_URL", "redis_url"))
    redis_prefix: str = Field("cairn", validation_alias=aliases("REDIS_PREFIX", "redis_prefix"))
    demo_password: str | None = Field(None, validation_alias=aliases("CAIRN_DEMO_PASSWORD", "demo_password"))
    start_timeout_s: float = Field(180.0, validation_alias=aliases("CAIRN_START_TIMEOUT_S", "start_timeout_s"))

    def port_of(self, service: str) -> int:
        return getattr(self, f"{service}_port")

    gateway_url: str | None = Field(None, validation_alias=aliases("GATEWAY_URL", "gateway_url"))
    chat_url: str | None = Field(None, validation_alias=aliases("CHAT_URL", "chat_url"))
    retrieval_url: str | None = Field(None, validation_alias=aliases("RETRIEVAL_URL", "retrieval_url"))
    analytics_url: str | None = Field(None, validation_alias=aliases("ANALYTICS_URL", "analytics_url"))

    def url_of(self, service: str) -> str:
        """`<SERVICE>_URL` when set (a Cairn elsewhere), else the local port `cairn up` uses."""
        return getattr(self, f"{service}_url") or f"http://127.0.0.1:{self.port_of(service)}"

    def local_url_of(self, service: str) -> str:
        return f"http://127.0.0.1:{self.port_of(service)}"

    @property
    def run_dir(self):
        return self.data_dir / "run"

    @property
    def log_dir(self):
        return self.data_dir / "logs"
