"""Chat settings: where retrieval and the LLM are, which models callers may pick, how answers are built."""
from __future__ import annotations

import json
from typing import Annotated, Literal

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import NoDecode

from shared.replicas import UrlList
from shared.urls import OptionalModelUrl, RedisUrl
from shared.settings import CommonSettings, aliases

OFFLINE_MODEL = "cairn-extractive"


class Settings(CommonSettings):
    host: str = Field("127.0.0.1", validation_alias=aliases("CHAT_HOST"))
    port: int = Field(8001, validation_alias=aliases("CHAT_PORT"))
    retrieval_urls: UrlList = Field(
        ("http://127.0.0.1:8002",),
        validation_alias=aliases("RETRIEVAL_URLS", "RETRIEVAL_URL"),
        description="Retrieval's replicas (comma-separated), balanced round robin; RETRIEVAL_URL works too.",
    )
    retrieval_timeout_s: float = Field(
        10.0, gt=0, validation_alias=aliases("RETRIEVAL_TIMEOUT_S")
    )
    retrieval_attempts: int = Field(
        3, ge=1, le=10, validation_alias=aliases("RETRIEVAL_ATTEMPTS")
    )
    retrieval_backoff_s: float = Field(
        0.1, ge=0, validation_alias=aliases("RETRIEVAL_BACKOFF_S")
    )
    retrieval_breaker_failures: int = Field(
        5, ge=1, validation_alias=aliases("RETRIEVAL_BREAKER_FAILURES")
    )
    retrieval_breaker_cooldown_s: float = Field(
        30.0, gt=0, validation_alias=aliases("RETRIEVAL_BREAKER_COOLDOWN_S")
    )
    llm_base_url: OptionalModelUrl = Field(
        None,
        validation_alias=aliases("LLM_BASE_URL"),
        description="An OpenAI-compatible endpoint (…/v1); unset = the built-in offline extractive generator.",
    )
    llm_api_key: SecretStr | None = Field(None, validation_alias=aliases("LLM_API_KEY"))
    llm_model: str = Field(
        "", validation_alias=aliases("LLM_MODEL"), description="Default model; required with LLM_BASE_URL."
    )
    chat_models: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        validation_alias=aliases("CHAT_MODELS"),
        description="Models a request may name as model_id (comma-separated or a JSON list); LLM_MODEL is always allowed.",
    )
    llm_timeout_s: float = Field(
        60.0, gt=0, validation_alias=aliases("LLM_TIMEOUT_S"),
        description="Longest wait for the model to connect or to send its next bytes, per attempt.",
    )
    llm_deadline_s: float = Field(
        90.0, gt=0, validation_alias=aliases("LLM_DEADLINE_S"),
        description="Longest a request waits for an answer (a stream: for its first text), retries included; "
        "below the gateway's UPSTREAM_TIMEOUT_S so the caller gets 502 llm_unavailable, not a 504.",
    )
    llm_max_retries: int = Field(
        3,
        ge=0,
        le=10,
        validation_alias=aliases("LLM_MAX_RETRIES"),
        description="Retries after a 429, 5xx, timeout or dropped connection; other 4xx fail at once.",
    )
    llm_backoff_base_s: float = Field(
        1.0, ge=0, validation_alias=aliases("LLM_BACKOFF_BASE_S"),
        description="First retry delay; doubles per retry up to LLM_BACKOFF_CAP_S, plus 0-25 % jitter.",
    )
    llm_backoff_cap_s: float = Field(10.0, ge=0, validation_alias=aliases("LLM_BACKOFF_CAP_S"))
    llm_breaker_failures: int = Field(
        5, ge=1, validation_alias=aliases("LLM_BREAKER_FAILURES"),
        description="Model calls failed in a row (after their retries) that open chat's circuit breaker for the LLM.",
    )
    llm_breaker_cooldown_s: float = Field(
        30.0, gt=0, validation_alias=aliases("LLM_BREAKER_COOLDOWN_S"),
        description="How long an open breaker answers 503 llm_unavailable at once before letting a trial call through.",
    )
    llm_temperature: float = Field(0.1, ge=0, le=2, validation_alias=aliases("LLM_TEMPERATURE"))
    llm_max_tokens: int = Field(512, ge=1, validation_alias=aliases("LLM_MAX_TOKENS"))
    # all-MiniLM-L6-v2 cosine similarity: on-topic passages usually score 0.35-0.75, unrelated text 0.0-0.2.
    relevance_threshold: float = Field(
        0.25, ge=-1, le=1, validation_alias=aliases("RELEVANCE_THRESHOLD")
    )
    default_top_k: int = Field(8, ge=1, le=50, validation_alias=aliases("DEFAULT_TOP_K"))
    context_token_budget: int = Field(
        3500,
        ge=100,
        validation_alias=aliases("CONTEXT_TOKEN_BUDGET"),
        description="Tokens of retrieved text put in the prompt, approximated as characters / 4.",
    )
    redis_url: RedisUrl = Field(
        "redis://127.0.0.1:6379/0",
        validation_alias=aliases("REDIS_URL"),
        description="Where conversations are kept for follow-up questions.",
    )
    redis_prefix: str = Field(
        "cairn", validation_alias=aliases("REDIS_PREFIX"), description="Prefix of chat's Redis keys."
    )
    redis_timeout_s: float = Field(2.0, gt=0, validation_alias=aliases("REDIS_TIMEOUT_S"))
    conversation_ttl_s: int = Field(
        86400, ge=60, validation_alias=aliases("CONVERSATION_TTL_S"),
        description="A conversation is forgotten this long after its last turn.",
    )
    conversation_max_turns: int = Field(
        10, ge=1, le=100, validation_alias=aliases("CONVERSATION_MAX_TURNS")
    )
    reformulation_timeout_s: float = Field(
        10.0, gt=0, validation_alias=aliases("REFORMULATION_TIMEOUT_S"),
        description="Longest the LLM may take to rewrite a question; then the offline heuristic rewrites it.",
    )
    query_reformulation: Literal["off", "followups", "always"] = Field(
        "followups",
        validation_alias=aliases("QUERY_REFORMULATION"),
        description="Rewrite questions before retrieval: follow-ups only, every question (typos too; needs an LLM), or never.",
    )

    @field_validator("chat_models", mode="before")
    @classmethod
    def _split_models(cls, value: object) -> object:
        if isinstance(value, str):
            text = value.strip()
            if text.startswith("["):
                return json.loads(text)
            return [part.strip() for part in text.split(",") if part.strip()]
        return value

    @model_validator(mode="after")
    def _default_model(self) -> "Settings":
        if not self.llm_model:
            if self.llm_base_url:
                raise ValueError("LLM_MODEL is required when LLM_BASE_URL is set")
            self.llm_model = OFFLINE_MODEL
        if self.llm_model not in self.chat_models:
            self.chat_models = [self.llm_model, *self.chat_models]
        return self

    @property
    def offline(self) -> bool:
        return not self.llm_base_url
