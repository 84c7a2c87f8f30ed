from __future__ import annotations

from pydantic import Field

from shared.settings import CommonSettings, aliases


class Settings(CommonSettings):
    host: str = Field("127.0.0.1", validation_alias=aliases("GATEWAY_HOST", "host"))
    port: int = Field(8000, validation_alias=aliases("GATEWAY_PORT", "port"))
    redis_url: str = Field("redis://127.0.0.1:6379/0", validation_alias=aliases("REDIS_URL", "redis_url"))
    redis_prefix: str = Field("cairn", validation_alias=aliases("REDIS_PREFIX", "redis_prefix"))
    redis_timeout_s: float = Field(2.0, validation_alias=aliases("REDIS_TIMEOUT_S", "redis_timeout_s"))
    session_ttl_seconds: int = Field(86_400, validation_alias=aliases("SESSION_TTL_SECONDS", "session_ttl_seconds"))
    chat_url: str = Field("http://127.0.0.1:8001", validation_alias=aliases("CHAT_URL", "chat_url"))
    retrieval_url: str = Field("http://127.0.0.1:8002", validation_alias=aliases("RETRIEVAL_URL", "retrieval_url"))
    analytics_url: str = Field("http://127.0.0.1:8003", validation_alias=aliases("ANALYTICS_URL", "analytics_url"))
    upstream_timeout_s: float = Field(120.0, validation_alias=aliases("UPSTREAM_TIMEOUT_S", "upstream_timeout_s"))
