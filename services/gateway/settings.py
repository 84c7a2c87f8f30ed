from __future__ import annotations

from typing import Annotated

from pydantic import Field, field_validator, model_validator
from pydantic_settings import NoDecode

from services.gateway.rate_limits import parse_networks
from shared.replicas import UrlList
from shared.urls import HttpUrl, RedisUrl
from shared.settings import CommonSettings, aliases


class Settings(CommonSettings):
    host: str = Field("127.0.0.1", validation_alias=aliases("GATEWAY_HOST"))
    port: int = Field(8000, validation_alias=aliases("GATEWAY_PORT"))
    redis_url: RedisUrl = Field("redis://127.0.0.1:6379/0", validation_alias=aliases("REDIS_URL"))
    redis_prefix: str = Field("cairn", validation_alias=aliases("REDIS_PREFIX"))
    redis_timeout_s: float = Field(2.0, gt=0, validation_alias=aliases("REDIS_TIMEOUT_S"))
    # A session ends after SESSION_TTL_SECONDS without use (sliding), and SESSION_MAX_AGE_SECONDS after login at the latest.
    session_ttl_seconds: int = Field(86_400, gt=0, validation_alias=aliases("SESSION_TTL_SECONDS"))
    session_max_age_seconds: int = Field(604_800, gt=0, validation_alias=aliases("SESSION_MAX_AGE_SECONDS"))
    # Each service's replicas, balanced round robin; CHAT_URL / RETRIEVAL_URL (one URL or several) still work.
    chat_urls: UrlList = Field(
        ("http://127.0.0.1:8001",), validation_alias=aliases("CHAT_URLS", "CHAT_URL")
    )
    retrieval_urls: UrlList = Field(
        ("http://127.0.0.1:8002",),
        validation_alias=aliases("RETRIEVAL_URLS", "RETRIEVAL_URL"),
    )
    analytics_url: HttpUrl = Field("http://127.0.0.1:8003", validation_alias=aliases("ANALYTICS_URL"))
    # More than 0: aiohttp reads 0 as "no timeout", and a negative one fails every call at once.
    upstream_timeout_s: float = Field(120.0, gt=0, validation_alias=aliases("UPSTREAM_TIMEOUT_S"))
    # POST /api/documents: retrieval answers once the whole document is embedded, about 3,000 chunks (80-220 s)
    # for 2 MB of Markdown and up to ~32,000 for a MAX_UPLOAD_BYTES text file (docs/configuration.md).
    ingest_upstream_timeout_s: float = Field(3600.0, gt=0, validation_alias=aliases("INGEST_UPSTREAM_TIMEOUT_S"))
    # Rate limits, 0 turning one off: failed logins per username and per client address within
    # LOGIN_WINDOW_S, questions (/api/chat, /api/chat/stream, /v1/chat/completions) per user per minute.
    login_attempts_per_username: int = Field(
        5, ge=0, validation_alias=aliases("LOGIN_ATTEMPTS_PER_USERNAME")
    )
    login_attempts_per_ip: int = Field(
        20, ge=0, validation_alias=aliases("LOGIN_ATTEMPTS_PER_IP")
    )
    login_window_s: float = Field(300.0, gt=0, validation_alias=aliases("LOGIN_WINDOW_S"))
    chat_requests_per_minute: int = Field(
        30, ge=0, validation_alias=aliases("CHAT_REQUESTS_PER_MINUTE")
    )
    # Peers (addresses or CIDR ranges, comma-separated) whose X-Forwarded-For names the client;
    # empty: the socket peer is the client.
    trusted_proxies: Annotated[tuple[str, ...], NoDecode] = Field(
        (), validation_alias=aliases("TRUSTED_PROXIES")
    )
    max_body_bytes: int = Field(1_048_576, ge=0, validation_alias=aliases("MAX_BODY_BYTES"))
    # POST /api/documents only; the same variable and default as the retrieval service's.
    max_upload_bytes: int = Field(20_971_520, ge=1, validation_alias=aliases("MAX_UPLOAD_BYTES"))  # as retrieval
    # Origins (comma-separated) whose pages may call the API from a browser; empty: no CORS headers at all.
    cors_origins: Annotated[tuple[str, ...], NoDecode] = Field(
        (), validation_alias=aliases("CORS_ORIGINS")
    )
    cors_allow_credentials: bool = Field(
        False, validation_alias=aliases("CORS_ALLOW_CREDENTIALS")
    )
    # How long after asking a user may rate the answer (the gateway remembers who asked for that long).
    feedback_window_s: int = Field(604_800, gt=0, validation_alias=aliases("FEEDBACK_WINDOW_S"))
    # Ratings (POST /api/feedback) per user per minute, 0 turning the limit off: each is a row in analytics.
    feedback_per_minute: int = Field(60, ge=0, validation_alias=aliases("FEEDBACK_PER_MINUTE"))

    @field_validator("trusted_proxies", "cors_origins", mode="before")
    @classmethod
    def _comma_separated(cls, value: object) -> object:
        if isinstance(value, str):
            return tuple(part.strip().rstrip("/") for part in value.split(",") if part.strip())
        return value

    @field_validator("trusted_proxies")
    @classmethod
    def _networks(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        parse_networks(value)  # ValueError names the entry that is no address or range
        return value

    @model_validator(mode="after")
    def _no_wildcard_origin_with_credentials(self) -> "Settings":
        if self.cors_allow_credentials and "*" in self.cors_origins:
            raise ValueError("CORS_ORIGINS may not be '*' when CORS_ALLOW_CREDENTIALS is true; list the origins")
        return self
