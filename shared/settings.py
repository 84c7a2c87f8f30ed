"""Settings base shared by every service: environment variables first, defaults that work on one machine."""
from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import AliasChoices, Field, SecretStr, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

PLACEHOLDER_SERVICE_TOKEN = "change-me-internal-service-token"


def aliases(*names: str) -> AliasChoices:
    """Accept a field by its environment variable name(s) or by its own name."""
    return AliasChoices(*names)


class CommonSettings(BaseSettings):
    model_config = SettingsConfigDict(extra="ignore", populate_by_name=True)

    env: Literal["local", "test", "production"] = Field("local", validation_alias=aliases("CAIRN_ENV", "env"))
    log_level: str = Field("INFO", validation_alias=aliases("LOG_LEVEL", "log_level"))
    service_token: SecretStr = Field(
        SecretStr(PLACEHOLDER_SERVICE_TOKEN),
        validation_alias=aliases("CAIRN_SERVICE_TOKEN", "service_token"),
        description="Shared secret the gateway sends to internal services.",
    )
    amqp_url: str = Field("amqp://guest:guest@127.0.0.1:5672/", validation_alias=aliases("AMQP_URL", "amqp_url"))
    events_exchange: str = Field("cairn.events", validation_alias=aliases("EVENTS_EXCHANGE", "events_exchange"))
    analytics_queue: str = Field("cairn.analytics", validation_alias=aliases("ANALYTICS_QUEUE", "analytics_queue"))
    data_dir: Path = Field(Path("data"), validation_alias=aliases("CAIRN_DATA_DIR", "data_dir"))
    outbox_path: Path | None = Field(
        None,
        validation_alias=aliases("OUTBOX_PATH", "outbox_path"),
        description="SQLite file holding events until the broker confirms them; default "
        "CAIRN_DATA_DIR/outbox/<service>.sqlite3. Each process needs its own file.",
    )
    events_linger_s: float = Field(
        1.0,
        ge=0,
        le=60,
        validation_alias=aliases("EVENTS_LINGER_S", "events_linger_s"),
        description="Longest an event waits in the outbox for others before a batch is sent; 0 sends each at once.",
    )
    outbox_max_events: int = Field(
        100_000,
        ge=1,
        validation_alias=aliases("OUTBOX_MAX_EVENTS", "outbox_max_events"),
        description="Most events the outbox holds; beyond it new events are refused and counted as dropped.",
    )
    host: str = "127.0.0.1"
    port: int = 0

    def outbox_file(self, service: str) -> Path:
        return self.outbox_path or self.data_dir / "outbox" / f"{service}.sqlite3"

    @model_validator(mode="after")
    def _refuse_placeholder_secrets(self) -> "CommonSettings":
        if self.env != "local" and self.service_token.get_secret_value() == PLACEHOLDER_SERVICE_TOKEN:
            raise ValueError("CAIRN_SERVICE_TOKEN is the placeholder; set a real secret outside CAIRN_ENV=local")
        return self
